"""Resuming, retrying and reporting failed cells, fidelity-flagged runs left out, and Dask placement."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from emulation.reproduce.grid import EMULATION, SIMULATOR, CellTask
from emulation.reproduce.run import ReproduceOptions, reproduce
from scheduler.sweep.engine import InlineEngine

CALLS: list[tuple[str, str, int]] = []
_LOCK = threading.Lock()


def fake_cell(task: CellTask) -> dict[str, Any]:
    """Figures that depend on the seed: p90 ratio 1.2, 1.3, 1.4 for seeds 1-3."""
    with _LOCK:
        CALLS.append((task.scenario, task.column, task.index))
    if task.column == SIMULATOR:
        return {"figures": {"vgg19+vgg19.p90_ratio": 1.1 + 0.1 * task.index}}
    # emulation: run 2 is flagged by the fidelity monitor
    return {"figures": {"vgg19+vgg19.p90_ratio": 5.0 if task.index == 2 else 1.3},
            "trustworthy": task.index != 2, "flags": ["given: 8% of wake-ups late"],
            "transport": "tcp"}  # fmt: skip


def test_cells_on_disk_are_skipped_and_the_figures_pooled(tmp_path: Path) -> None:
    CALLS.clear()
    opts = ReproduceOptions(quick=True, seeds=3, runs=3)
    first = reproduce(["two-vgg19"], opts, tmp_path, InlineEngine(), fn=fake_cell)
    assert (first.ran, first.skipped) == (6, 0) and len(CALLS) == 6
    again = reproduce(["two-vgg19"], opts, tmp_path, InlineEngine(), fn=fake_cell)
    assert (again.ran, again.skipped) == (0, 6) and len(CALLS) == 6
    more = reproduce(["two-vgg19"], ReproduceOptions(quick=True, seeds=4, runs=3), tmp_path,
                     InlineEngine(), fn=fake_cell)  # fmt: skip
    assert (more.ran, more.skipped) == (1, 6) and CALLS[-1] == ("two-vgg19", SIMULATOR, 4)
    doc = json.loads((tmp_path / "reproduction.json").read_text())
    sc = doc["scenarios"][0]
    sim = sc["simulator"]["figures"]["vgg19+vgg19.p90_ratio"]
    assert sim["n"] == 4 and sim["mean"] == pytest.approx(1.35)
    emu = sc["emulation"]
    assert emu["left_out"] == 1 and emu["used"] == 2 and emu["transport"] == "tcp"
    assert emu["figures"]["vgg19+vgg19.p90_ratio"]["mean"] == pytest.approx(1.3)  # 5.0 left out
    assert emu["checks"]["vgg19+vgg19.p90_ratio"]["verdict"] == "reproduced"
    md = (tmp_path / "reproduction.md").read_text()
    assert "1 flagged by the fidelity monitor and left out" in md
    assert "left out: given: 8% of wake-ups late" in md
    assert (
        "<td>p90 iteration time, aligned / shifted</td>"
        in (tmp_path / "reproduction.html").read_text()
    )


FLAKY: dict[int, int] = {}


def flaky_cell(task: CellTask) -> dict[str, Any]:
    """Seed 1 fails on its first attempt; seed 2 always fails."""
    FLAKY[task.index] = FLAKY.get(task.index, 0) + 1
    if task.index == 2 or (task.index == 1 and FLAKY[1] == 1):
        raise OSError(f"fabric busy (seed {task.index})")
    return {"figures": {"vgg19+vgg19.p90_ratio": 1.3}}


def test_a_failed_cell_is_retried_then_reported_and_run_again_next_time(tmp_path: Path) -> None:
    FLAKY.clear()
    opts = ReproduceOptions(quick=True, seeds=2, columns=(SIMULATOR,), retries=1)
    res = reproduce(["two-vgg19"], opts, tmp_path, InlineEngine(), fn=flaky_cell)
    assert FLAKY == {1: 2, 2: 2}
    stored = [json.loads(p.read_text()) for p in (tmp_path / "cells").glob("*.json")]
    assert [r["attempts"] for r in stored] == [2]
    assert stored[0]["errors"] == ["OSError: fabric busy (seed 1)"]
    assert len(res.failures) == 1 and res.failures[0]["cell"]["index"] == 2
    assert "failed 2 time(s): OSError: fabric busy (seed 2)" in res.failures[0]["error"]
    assert json.loads((tmp_path / "failures.json").read_text())[0]["key"] == res.failures[0]["key"]
    md = (tmp_path / "reproduction.md").read_text()
    assert "1 of 2 cells (seeds x loads), 1 failed" in md and "## Failed cells" in md
    FLAKY.clear()
    again = reproduce(["two-vgg19"], opts, tmp_path, InlineEngine(), fn=flaky_cell)
    assert FLAKY == {2: 2} and again.skipped == 1 and len(again.failures) == 1


def where_am_i(task: CellTask) -> dict[str, Any]:
    from distributed import get_worker

    worker = get_worker()
    return {"figures": {"vgg19+vgg19.p90_ratio": 1.3},
            "worker": worker.address, "fabric": worker.state.total_resources.get("fabric", 0)}  # fmt: skip


@pytest.mark.timeout(120)
def test_on_a_cluster_emulation_cells_go_only_to_fabric_workers(tmp_path: Path) -> None:
    from distributed import LocalCluster, Worker

    from scheduler.sweep.engine import DaskEngine

    cluster = LocalCluster(n_workers=1, processes=False, threads_per_worker=1,
                           dashboard_address=None, protocol="tcp://", host="127.0.0.1")  # fmt: skip
    cluster.worker_spec["fabric"] = {
        "cls": Worker,
        "options": {"nthreads": 1, "resources": {"fabric": 1}},
    }
    cluster.sync(cluster._correct_state)
    try:
        with DaskEngine(address=cluster.scheduler_address) as engine:
            engine.client.wait_for_workers(2, timeout=30)
            opts = ReproduceOptions(quick=True, seeds=4, runs=3, emulation_here=False)
            res = reproduce(["two-vgg19"], opts, tmp_path, engine, fn=where_am_i)
    finally:
        cluster.close()
    assert res.ran == 7 and not res.failures
    records = [json.loads(p.read_text()) for p in (tmp_path / "cells").glob("*.json")]
    emulation = [r for r in records if r["cell"]["column"] == EMULATION]
    assert len(emulation) == 3 and {r["fabric"] for r in emulation} == {1}


@pytest.mark.timeout(120)
def test_emulation_cells_on_a_cluster_without_fabric_workers_are_refused_in_one_line(
    tmp_path: Path,
) -> None:
    from distributed import LocalCluster

    from scheduler.sweep.engine import DaskEngine
    from topologies.errors import UserInputError

    cluster = LocalCluster(n_workers=1, processes=False, dashboard_address=None,
                           protocol="tcp://", host="127.0.0.1")  # fmt: skip
    try:
        with DaskEngine(address=cluster.scheduler_address) as engine:
            opts = ReproduceOptions(quick=True, seeds=1, runs=1, emulation_here=False)
            with pytest.raises(UserInputError, match='--resources "fabric=1"'):
                reproduce(["two-vgg19"], opts, tmp_path, engine, fn=where_am_i)
    finally:
        cluster.close()


STOPPED: list[int] = []


def stopped_cell(task: CellTask) -> dict[str, Any]:
    """Seed 1 is stopped by the user's Ctrl-C, as `emu_cells._emulate` reports it."""
    STOPPED.append(task.index)
    raise KeyboardInterrupt("the emulation in report was stopped by SIGINT")


def test_ctrl_c_stops_the_reproduction_without_retrying_or_storing_a_failure(
    tmp_path: Path,
) -> None:
    STOPPED.clear()
    opts = ReproduceOptions(quick=True, seeds=3, columns=(SIMULATOR,), retries=2)
    with pytest.raises(KeyboardInterrupt):
        reproduce(["two-vgg19"], opts, tmp_path, InlineEngine(), fn=stopped_cell)
    assert STOPPED == [1]  # not retried, and seeds 2-3 never started
    assert not list((tmp_path / "cells").glob("*.json"))
    assert not (tmp_path / "failures.json").exists()


def test_a_run_stopped_by_a_signal_is_an_interrupt_not_a_failed_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import emulation.emulate.runner as runner
    from emulation.reproduce import emu_cells

    monkeypatch.setattr(runner, "emulate", lambda settings, folder: (None, "SIGINT"))
    with pytest.raises(KeyboardInterrupt, match="stopped by SIGINT"):
        emu_cells._emulate(object(), tmp_path / "report")


@pytest.mark.parametrize(
    "edit",
    [
        lambda r: [],
        lambda r: "x",
        lambda r: {"key": r["key"]},
        lambda r: {**r, "figures": {"x": 1}},  # by hand: the digest no longer matches
        lambda r: {**r, "figures": {"vgg19+vgg19.p90_ratio": "1.3"}},
    ],
)
def test_a_stored_cell_of_the_wrong_shape_runs_again(edit: Any, tmp_path: Path) -> None:
    CALLS.clear()
    opts = ReproduceOptions(quick=True, seeds=2, columns=(SIMULATOR,))
    first = reproduce(["two-vgg19"], opts, tmp_path, InlineEngine(), fn=fake_cell)
    cell = sorted((tmp_path / "cells").glob("*.json"))[0]
    cell.write_text(json.dumps(edit(json.loads(cell.read_text()))))
    again = reproduce(["two-vgg19"], opts, tmp_path, InlineEngine(), fn=fake_cell)
    assert (again.ran, again.skipped, len(CALLS)) == (1, 1, 3)
    (line,) = again.rejected
    assert line.startswith(f"{cell}: ") and line.endswith("not used, the cell runs again")
    assert again.doc["scenarios"] == first.doc["scenarios"]


def test_a_full_disk_keeps_the_finished_cells_and_leaves_no_temporaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno
    import os

    from topologies.errors import UserInputError

    real_fsync = os.fsync
    saved: list[int] = []

    def fsync(fd: int) -> None:
        saved.append(fd)
        if len(saved) > 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    opts = ReproduceOptions(quick=True, seeds=3, columns=(SIMULATOR,))
    with pytest.raises(UserInputError, match=r"cells/[0-9a-f]+\.json: not written \(No space"):
        reproduce(["two-vgg19"], opts, tmp_path, InlineEngine(), fn=fake_cell)
    assert [p.suffix for p in (tmp_path / "cells").iterdir()] == [".json"]
    monkeypatch.setattr(os, "fsync", real_fsync)
    again = reproduce(["two-vgg19"], opts, tmp_path, InlineEngine(), fn=fake_cell)
    assert (again.ran, again.skipped) == (2, 1)


def test_the_tables_replace_a_planted_link_instead_of_writing_through_it(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("keep\n")
    out = tmp_path / "out"
    out.mkdir()
    for name in ("reproduction.md", "reproduction.json", "reproduction.html"):
        (out / name).symlink_to(secret)
    opts = ReproduceOptions(quick=True, seeds=1, columns=(SIMULATOR,))
    reproduce(["two-vgg19"], opts, out, InlineEngine(), fn=fake_cell)
    assert secret.read_text() == "keep\n"
    assert (
        not (out / "reproduction.md").is_symlink()
        and "two-vgg19" in (out / "reproduction.md").read_text()
    )
