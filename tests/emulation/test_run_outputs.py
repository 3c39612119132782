"""Commands that run jobs refuse silent no-ops before anything runs, and a full --out
disk after a run is one line that says where the run's results were kept.

No fabric: the fabric and the runs are replaced by stand-ins that write what the
real ones write into the folder they are given (replicas' records during the
run, the run's files after), and the disk fills at the writer (ENOSPC).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from emulation.cli import main
from emulation.jobs.launch import parse_schedule, plan_jobs
from emulation.jobs.records import IterationRecord
from emulation.jobs.run_result import RunResult, summarize_job
from emulation.jobs.run_settings import RunSettings
from tests.helpers.full_disk import fill, tiny_tmpfs
from topologies.library import load_topology

TOPOLOGY = "leaf-spine:2:1:2"
SCHEDULE = {"placement": {"vgg19-0": ["s01", "s03"]}, "periods_ms": {"vgg19-0": 260.0}}
ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _one_error(capsys: pytest.CaptureFixture[str]) -> str:
    """The one error line on stderr (with its newline); no traceback."""
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert "Traceback" not in err and len(errors) == 1, err
    return errors[0] + "\n"


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["fabric", "run", "--schedule", "s.json", "--recalibrate"],
         "--recalibrate measures this machine for --scale auto; add --scale auto "
         "(--scale is 0.001)"),
        (["emulate", "--recalibrate", "--scale", "0.02"],
         "--recalibrate measures this machine for --scale auto; add --scale auto "
         "(--scale is 0.02)"),
        (["fabric", "run", "--schedule", "s.json", "--policy", "echelon-rate"],
         "--policy echelon-rate sets host rates, which neither the fabric nor `cassini "
         "simulate` (classes only) enforces"),
        (["simulate", "--drift", "1e300"], "argument --drift: must be at most 1, got 1e300"),
    ],
)  # fmt: skip
def test_a_flag_that_would_do_nothing_or_run_for_ever_is_refused_first(
    argv: list[str],
    line: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("s.json").write_text(json.dumps(SCHEDULE))
    monkeypatch.setattr("emulation.fabric.emulated.EmulatedFabric", None)  # building one would fail
    with contextlib.suppress(SystemExit):
        assert main([*argv, "-t", TOPOLOGY, "--out", "out"]) == 2
    assert line in _one_error(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json"]
    # the simulator's own refusal is true: it does not run echelon-rate either
    if "echelon-rate" in argv:
        assert main(["simulate", "--policy", "echelon-rate", "--out", "sim"]) == 2
        assert "honours classes only" in _one_error(capsys)


class _Fabric:
    """Stands in for EmulatedFabric: nothing to bring up or tear down."""

    prefix = "casfake"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __enter__(self) -> _Fabric:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def switch_failure(self) -> None:
        return None

    def describe(self) -> SimpleNamespace:
        return SimpleNamespace(scale=0.01, profile=("scale S = 0.01",), prefix=self.prefix)


def _result() -> RunResult:
    jobs = plan_jobs(parse_schedule(SCHEDULE), load_topology(TOPOLOGY))
    records = tuple(
        IterationRecord("vgg19-0", "vgg19", w, k, 250.0 * k, 250.0 * k + 240, 100, 10.0, 1.0,
                        False, 2)
        for w in (0, 1) for k in range(5)
    )  # fmt: skip
    return RunResult(
        jobs=tuple(jobs),
        summaries=tuple(summarize_job(j, records) for j in jobs),
        records=records,
        ports=(),
        links=(),
        settings=RunSettings(iterations=5),
        scale=0.01,
        emulation_profile="scale S = 0.01",
        duration_s=2.5,
    )


def _replicas_write(folder: Path) -> None:
    """What the replicas leave in a run's folder while they run."""
    (folder / "replicas").mkdir(parents=True, exist_ok=True)
    (folder / "replicas" / "vgg19-0-w0.jsonl").write_text('{"iteration": 0}\n')


@pytest.fixture
def spare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temporary folder rescued results go to."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(folder))
    return folder


def _full_in_stages(write: Any) -> Any:
    """`write(…, folder)` that fails for want of room in a staged folder ('.NAME.partial-')."""

    def fails_in_stage(*args: Any) -> Any:
        out = write(*args)
        if ".partial-" in str(args[-1]):
            raise ENOSPC
        return out

    return fails_in_stage


def test_fabric_run_onto_a_full_disk_keeps_the_run_and_says_where(
    tmp_path: Path,
    spare: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import emulation.jobs.run_folder as run_folder

    def run_schedule(fabric: Any, jobs: Any, settings: Any, folder: Path, **k: Any) -> RunResult:
        _replicas_write(folder)
        return _result()

    monkeypatch.setattr("emulation.fabric.emulated.EmulatedFabric", _Fabric)
    monkeypatch.setattr("emulation.jobs.supervisor.run_schedule", run_schedule)
    monkeypatch.setattr(run_folder, "write_run", _full_in_stages(run_folder.write_run))
    schedule = tmp_path / "s.json"
    schedule.write_text(json.dumps(SCHEDULE))
    out = tmp_path / "run"
    argv = ["fabric", "run", "--schedule", str(schedule), "-t", TOPOLOGY, "--out", str(out)]
    assert main(argv) == 2
    err = _one_error(capsys)
    (kept,) = spare.iterdir()
    assert err == (
        f"cassini: error: --out {out}: not written (No space left on device writing "
        f"{out}/{_newest_name(kept)}); the results are in {kept} instead\n"
    )
    assert json.loads((kept / "summary.json").read_text())["jobs"]["vgg19-0"]["iterations"] == 5
    assert (kept / "replicas" / "vgg19-0-w0.jsonl").exists()
    assert len((kept / "iterations.csv").read_text().splitlines()) == 11
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json", "tmp"]


def _newest_name(folder: Path) -> str:
    """The file write_run wrote last (the one the failed write is named by)."""
    files = [p for p in folder.rglob("*") if p.is_file() and p.parent == folder]
    return max(files, key=lambda p: p.stat().st_mtime_ns).name


def test_emulate_onto_a_full_disk_keeps_the_report_and_the_runs(
    tmp_path: Path,
    spare: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    @contextlib.contextmanager
    def fabric(settings: Any, topo: Any) -> Iterator[_Fabric]:
        yield _Fabric()

    def run_one(fabric: Any, plan: Any, name: str, settings: Any, out: Path, *a: Any) -> Any:
        _replicas_write(out / "runs" / name)
        return SimpleNamespace(result=SimpleNamespace(interrupted=None))

    def write_report(runs: Any, record: dict[str, Any], folder: Path) -> None:
        (folder / "summary.json").write_text(json.dumps({"runs": len(runs)}))
        if ".partial-" in str(folder):
            raise ENOSPC

    monkeypatch.setattr("emulation.emulate.runner._fabric", fabric)
    monkeypatch.setattr("emulation.emulate.runner.run_one", run_one)
    monkeypatch.setattr("emulation.emulate.runner.write_report", write_report)
    out = tmp_path / "emu"
    argv = ["emulate", "-t", TOPOLOGY, "--trace", "snapshot", "--jobs", "2",
            "--schedulers", "themis,random", "--json", "--out", str(out)]  # fmt: skip
    assert main(argv) == 2
    (kept,) = spare.iterdir()
    assert _one_error(capsys) == (
        f"cassini: error: --out {out}: not written (No space left on device writing "
        f"{out}/summary.json); the results are in {kept} instead\n"
    )
    assert json.loads((kept / "summary.json").read_text()) == {"runs": 2}
    assert (kept / "runs" / "random" / "replicas" / "vgg19-0-w0.jsonl").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tmp"]


@pytest.mark.root
def test_simulate_onto_a_full_disk_is_one_line_and_keeps_the_results(
    tmp_path: Path, spare: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with tiny_tmpfs(tmp_path / "disk", "256k") as disk:
        fill(disk)
        out = disk / "sim"
        argv = ["simulate", "--trace", "snapshot", "--jobs", "4", "--schedulers", "random",
                "--json", "--out", str(out)]  # fmt: skip
        assert main(argv) == 2
        left = sorted(p.name for p in disk.iterdir())
    err = _one_error(capsys)
    (kept,) = spare.iterdir()
    assert err.startswith(f"cassini: error: --out {out}: not written (No space left on device")
    assert err.endswith(f"; the results are in {kept} instead\n")
    assert json.loads((kept / "summary.json").read_text())["schedulers"]
    assert left == ["filler"]
