"""Sweeps: the config and its errors, cell keys and resuming, the seed table, a real Dask cluster."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from emulation.cli import main as cli_main
from scheduler.simulator import SimSettings
from scheduler.simulator.experiment import SchedulerSummary, run_experiment
from scheduler.sweep import (
    InlineEngine,
    load_sweep_config,
    parse_seeds,
    parse_sweep_config,
    run_sweep,
)
from scheduler.sweep.aggregate import markdown_table, ratio_stats, seed_runs
from scheduler.sweep.cells import cell_key, run_cell, summary_record
from scheduler.sweep.config import Cell
from scheduler.sweep.driver import prepare_tasks
from scheduler.workloads.traces import generate_trace
from topologies.errors import UserInputError
from topologies.library import load_topology

TINY = {"trace": "poisson", "loads": 0.9, "jobs": 8, "schedulers": ["themis", "th+cassini"]}


# ------------------------------------------------------------------ config


def test_defaults_are_simulates_and_seeds_take_ranges() -> None:
    cfg = parse_sweep_config({"seeds": "21-23"}, "s.yaml")
    assert cfg.seeds == (21, 22, 23)
    assert cfg.loads == (0.9,) and cfg.jobs == (60,) and cfg.topologies == ("cassini-testbed",)
    assert cfg.schedulers == ("themis", "th+cassini", "pollux", "po+cassini", "random", "ideal")
    assert parse_seeds([1, "4-5", "7,9"]) == [1, 4, 5, 7, 9]


def test_grid_is_the_product_and_ignored_axes_collapse() -> None:
    cfg = parse_sweep_config({"seeds": [1, 2], "loads": [0.8, 0.9], "precision": [5, 10]}, "s")
    assert len(cfg.cells()) == 8
    dyn = parse_sweep_config({"trace": "dynamic", "seeds": [1, 2], "loads": [0.8, 0.9]}, "s")
    cells = dyn.cells()
    assert len(cells) == 2 and all(c.load is None and c.jobs is None for c in cells)


@pytest.mark.parametrize(
    ("doc", "needles"),
    [
        ({"seeds": 1, "lodas": 0.9}, ["s.yaml", "no key named 'lodas'", "Did you mean 'loads'"]),
        (
            {"seeds": 1, "schedulers": ["themsi"]},
            ["s.yaml", "'schedulers'", "Did you mean 'themis'"],
        ),
        ({"seeds": 1, "loads": [0.9, -1]}, ["s.yaml", "'loads'", "-1"]),
        ({"seeds": 1, "loads": "high"}, ["'loads'", "'high'"]),
        ({"seeds": "20-1"}, ["'seeds'", "20-1"]),
        ({"seeds": "a-b"}, ["'seeds'", "'a-b'"]),
        ({"loads": 0.9}, ["s.yaml", "'seeds' is missing"]),
        ({"seeds": 1, "trace": "poison"}, ["'trace'", "Did you mean 'poisson'"]),
        ({"seeds": 1, "aggregate": "totl"}, ["'aggregate'", "Did you mean 'total'"]),
        ({"seeds": 1, "pacing": "yes"}, ["'pacing'", "'yes'"]),
        ({"seeds": 1, "jobs": 0}, ["'jobs'", "0"]),
        ({"seeds": 1, "topologies": "nope.yaml"}, ["'topologies'", "nope.yaml"]),
        ([1, 2], ["s.yaml", "mapping"]),
    ],
)
def test_config_errors_name_file_key_and_value(doc: Any, needles: list[str]) -> None:
    with pytest.raises(UserInputError) as err:
        parse_sweep_config(doc, "s.yaml")
    for needle in needles:
        assert needle in str(err.value)


def test_unknown_topology_is_caught_before_running(tmp_path: Path) -> None:
    cfg = parse_sweep_config({"seeds": 1, "topologies": "cassini-tesbed"}, "s.yaml")
    with pytest.raises(
        UserInputError, match=r"s.yaml: key 'topologies'.*Did you mean 'cassini-testbed'"
    ):
        prepare_tasks(cfg, cfg.cells(), ["k"])


def test_cli_reports_a_bad_file_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("seeds: [1\n")
    assert cli_main(["sweep", "--config", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert f"{bad}:2:1: invalid YAML" in capsys.readouterr().err
    with pytest.raises(UserInputError, match="none.yaml: no such sweep file"):
        load_sweep_config(tmp_path / "none.yaml")


def test_trace_files_are_relative_to_the_config_and_hashed(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,model,workers,iterations\n0,resnet50,2,50\n")
    (tmp_path / "s.yaml").write_text("trace: t.csv\nseeds: 1\n")
    cfg = load_sweep_config(tmp_path / "s.yaml")
    assert cfg.trace == str(trace) and str(trace) in cfg.inputs
    before = cell_key(cfg.cells()[0], cfg.inputs)
    trace.write_text("arrival_s,model,workers,iterations\n0,resnet50,2,60\n")
    cfg2 = load_sweep_config(tmp_path / "s.yaml")
    assert cell_key(cfg2.cells()[0], cfg2.inputs) != before


# ------------------------------------------------------------------ keys and resume


def test_keys_follow_settings_and_harness_version() -> None:
    a, b = parse_sweep_config({**TINY, "seeds": [1, 2]}, "s").cells()
    assert cell_key(a, {}, "0.1.0") == cell_key(a, {}, "0.1.0")
    assert cell_key(a, {}, "0.1.0") != cell_key(b, {}, "0.1.0")
    assert cell_key(a, {}, "0.1.0") != cell_key(a, {}, "0.2.0")


class CountingEngine(InlineEngine):
    """Inline, counting the tasks it is given."""

    def __init__(self) -> None:
        self.ran = 0

    def run(self, fn: Callable[[Any], Any], tasks: Sequence[Any]) -> Iterator[Any]:
        self.ran += len(tasks)
        yield from super().run(fn, tasks)


def test_resume_skips_done_cells_and_completes_a_half_done_folder(tmp_path: Path) -> None:
    cfg = parse_sweep_config({**TINY, "seeds": [1, 2]}, "s")
    first = CountingEngine()
    res = run_sweep(cfg, tmp_path, first)
    assert (first.ran, res.ran, res.skipped, res.failures) == (2, 2, 0, ())
    table = pq.read_table(tmp_path / "runs.parquet")
    assert table.num_rows == 4
    assert set(table.column("scheduler").to_pylist()) == {"themis", "th+cassini"}
    assert sorted(set(table.column("seed").to_pylist())) == [1, 2]
    for name in ("table.md", "ratio_cdf.png", "iteration_cdf.png"):
        assert (tmp_path / name).stat().st_size > 0

    again = CountingEngine()
    res2 = run_sweep(cfg, tmp_path, again)
    assert (again.ran, res2.skipped) == (0, 2)
    assert pq.read_table(tmp_path / "runs.parquet").equals(table)

    cells = sorted((tmp_path / "cells").glob("*.json"))
    cells[0].unlink()
    (tmp_path / "cells" / "leftover.tmp123").write_text("{")  # a write cut short
    third = CountingEngine()
    res3 = run_sweep(cfg, tmp_path, third)
    assert (third.ran, res3.skipped, len(res3.records)) == (1, 1, 2)
    assert pq.read_table(tmp_path / "runs.parquet").num_rows == 4


def test_a_failed_cell_does_not_stop_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import scheduler.sweep.driver as run_mod

    real = run_mod.run_cell

    def flaky(task: Any) -> Any:
        if task.cell.seed == 1:
            raise RuntimeError("boom")
        return real(task)

    monkeypatch.setattr(run_mod, "run_cell", flaky)
    cfg = parse_sweep_config({**TINY, "seeds": [1, 2]}, "s")
    res = run_sweep(cfg, tmp_path, InlineEngine())
    assert (res.total, res.ran, len(res.failures)) == (2, 1, 1)
    assert res.failures[0]["cell"]["seed"] == 1 and "RuntimeError: boom" in res.failures[0]["error"]
    assert "boom" in (tmp_path / "failures.json").read_text()
    monkeypatch.setattr(run_mod, "run_cell", real)
    again = run_sweep(cfg, tmp_path, InlineEngine())  # the failed cell runs again, alone
    assert (again.skipped, again.ran, again.failures) == (1, 1, ())
    assert not (tmp_path / "failures.json").exists()


def test_a_cell_is_what_simulate_runs() -> None:
    cfg = parse_sweep_config({**TINY, "schedulers": ["themis"], "seeds": [3]}, "s")
    (task,) = prepare_tasks(cfg, cfg.cells(), ["k"])
    record = run_cell(task)
    topo = load_topology("cassini-testbed")
    jobs = generate_trace("poisson", topo.total_gpus(), jobs=8, load=0.9, seed=3)
    exp = run_experiment(jobs, topo, ["themis"], 3, SimSettings(seed=3))
    want = summary_record(exp.summaries[0])
    got = record["summaries"][0]
    assert {k: v for k, v in got.items() if k != "wall_s"} == {
        k: v for k, v in want.items() if k != "wall_s"
    }


# ------------------------------------------------------------------ aggregation


def _summary(
    name: str, mean: float, p99: float, jct: float, oversub: float, marked: float
) -> dict[str, Any]:
    return summary_record(
        SchedulerSummary(
            name=name, jobs=1, iterations=10, mean_ms=mean, p50_ms=mean, p90_ms=mean, p99_ms=p99,
            mean_slowdown=1.0, p99_slowdown=p99 / 100, mean_jct_s=jct, oversub_link_s=oversub,
            excess_gbit=0.0, marked_gbit=marked, per_model_mean_ms={}, per_model_marked_gbit={},
            wall_s=0.0, events=0, fast_forwarded_s=0.0, adjustments=0, migrations=0,
        )
    )  # fmt: skip


def _record(seed: int, themis: dict[str, Any], cassini: dict[str, Any]) -> dict[str, Any]:
    cell = Cell("poisson", 0.9, seed, 60, "cassini-testbed", ("themis", "th+cassini"), 5.0, "total", True, 10, 0.0, False, None)  # fmt: skip
    return {
        "key": f"k{seed}",
        "cell": cell.settings(),
        "summaries": [themis, cassini],
        "iteration_ms_q": {},
    }


def test_table_matches_hand_computed_ratios() -> None:
    records = [
        # mean 110/100 = 1.10, p99 200/250 = 0.80, jct 30/20 = 1.50, congestion 4/1, marked 2/0 = inf
        _record(1, _summary("themis", 110, 200, 30, 4.0, 2.0), _summary("th+cassini", 100, 250, 20, 1.0, 0.0)),
        # mean 90/100 = 0.90, p99 1.00 (tie: not a win), jct 1.00, congestion 0/0 = 1, marked 1/2
        _record(2, _summary("themis", 90, 200, 20, 0.0, 1.0), _summary("th+cassini", 100, 200, 20, 0.0, 2.0)),
        # mean 120/100 = 1.20, p99 300/200 = 1.50, jct 10/20 = 0.50, congestion 50/2 = 25, marked 3/1
        _record(3, _summary("themis", 120, 300, 10, 50.0, 3.0), _summary("th+cassini", 100, 200, 20, 2.0, 1.0)),
    ]  # fmt: skip
    runs = seed_runs(records)
    stats = ratio_stats(runs)["th+cassini"]
    assert stats["mean"].mean == pytest.approx((1.1 + 0.9 + 1.2) / 3)
    assert (stats["mean"].lo, stats["mean"].hi, stats["mean"].wins) == (0.9, 1.2, 2)
    assert stats["p99"].wins == 1 and stats["congestion"].mean == pytest.approx(10.0)
    table = markdown_table(runs).splitlines()
    assert table[0] == "| | Th+Cassini vs Themis, seeds 1-3 |"
    assert table[2] == "| mean iteration time | 1.07x [0.90-1.20], 2/3 |"
    assert table[3] == "| p99 iteration time | 1.10x [0.80-1.50], 1/3 |"
    assert table[5] == "| mean job completion time | 1.00x [0.50-1.50], 1/3 |"
    assert table[6] == "| congestion (oversubscribed link-seconds) | 10.0x lower [1.00-25.0], 2/3 |"
    assert table[7] == "| traffic through oversubscribed links | inf less [0.50-inf], 2/3 |"


# ------------------------------------------------------------------ a real Dask cluster


class KillOnFirstResult:
    """Progress hook that SIGKILLs a busy worker process when the first cell finishes."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.killed: int | None = None
        self.victim_was_busy = False
        self.errors: list[BaseException] = []
        self.done = 0

    def started(self, total: int, skipped: int, engine: str, dashboard: str | None) -> None:
        pass

    def finished(self, cell: Cell, error: BaseException | None) -> None:
        self.done += 1
        if error is not None:
            self.errors.append(error)
        if self.killed is None:
            pids = self.client.run(os.getpid)
            # Right after a result the scheduler may not have handed the next cell out yet
            # (CI once saw no worker busy): wait a moment for one that is.
            busy: list[Any] = []
            for _ in range(100):
                busy = [w for w, keys in self.client.processing().items() if keys]
                if busy:
                    break
                time.sleep(0.02)
            victim = busy[0] if busy else next(iter(pids))
            self.victim_was_busy = bool(busy)
            self.killed = pids[victim]
            os.kill(self.killed, signal.SIGKILL)

    def closed(self) -> None:
        pass


@pytest.mark.timeout(240)
def test_two_worker_cluster_survives_a_killed_worker(tmp_path: Path) -> None:
    from scheduler.sweep import DaskEngine

    cfg = parse_sweep_config({**TINY, "jobs": 12, "seeds": [1, 2, 3, 4]}, "s")
    with DaskEngine(workers=2, dashboard_address=None) as engine:
        assert engine.workers == 2
        hook = KillOnFirstResult(engine.client)
        res = run_sweep(cfg, tmp_path, engine, hook)
    assert hook.killed is not None and hook.victim_was_busy and hook.errors == []
    assert (res.total, res.ran, res.failures) == (4, 4, ())
    assert len(list((tmp_path / "cells").glob("*.json"))) == 4
    assert pq.read_table(tmp_path / "runs.parquet").num_rows == 8


def _listening_hosts(port: int) -> set[str]:
    """The local addresses of TCP sockets listening on `port` (from /proc/net/tcp{,6})."""
    hosts = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                hosts.add(address)
    return hosts


def test_the_local_clusters_dashboard_listens_on_loopback_only_as_it_says():
    from scheduler.sweep import DaskEngine

    with DaskEngine(workers=1) as engine:
        link = engine.dashboard_link
        assert link is not None and link.startswith("http://127.0.0.1:")
        port = int(link.split(":")[2].split("/")[0])
        hosts = _listening_hosts(port)
    # 127.0.0.1, little-endian hex; never 00000000 (0.0.0.0) or the IPv6 any-address.
    assert hosts == {"0100007F"}


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"seeds": "0-100000000"}, r"key 'seeds': the range '0-100000000' has 100000001 seeds"),
        ({"seeds": 1, "jobs": 100000000}, r"key 'jobs': 100000000 must be a finite number up to"),
        ({"seeds": 1, "drift": float("inf")}, r"key 'drift': inf must be a finite number up to 1"),
        ({"seeds": 1, "loads": float("nan")}, r"key 'loads': nan must be a finite number"),
        ({"seeds": 1, "precision": 0.0001}, r"key 'precision': 0.0001 must be >= 0.1"),
        ({"seeds": -1}, r"key 'seeds': seed -1 is outside"),
        (
            {"seeds": "1-100", "loads": [0.5, 0.6, 0.7, 0.8, 0.9], "jobs": list(range(1, 41))},
            r"the grid has 20,000 cells, more than 10,000",
        ),
    ],
)
def test_grids_past_their_bounds_are_refused_before_the_first_cell(doc, message) -> None:
    with pytest.raises(UserInputError, match=message):
        parse_sweep_config(doc, "s.yaml")


def test_a_large_grid_runs_when_asked(tmp_path: Path) -> None:
    doc = {"seeds": "1-100", "loads": [0.5, 0.6, 0.7, 0.8, 0.9], "jobs": list(range(1, 41))}
    assert len(parse_sweep_config(doc, "s.yaml", max_cells=20_000).cells()) == 20_000
    (tmp_path / "s.yaml").write_text("seeds: 0-20000\n")
    assert cli_main(["sweep", "-c", str(tmp_path / "s.yaml"), "-o", str(tmp_path / "o")]) == 2
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "seeds: 1-50\nloads: 0.9\nseeds: 1\n",
            "s.yaml:3: key 'seeds' is given twice (first on line 1)",
        ),
        (
            "seeds: 1\nmodels:\n  a: 1\n  b: 2\n  a: 3\n",
            "s.yaml:5: key 'a' is given twice (first on line 3)",
        ),
        ("base: &b {x: 1}\nseeds: 1\ntrace: poisson\ntrace: dynamic\n", "s.yaml:4: key 'trace'"),
    ],
)
def test_a_key_given_twice_in_a_sweep_file_is_refused_with_its_line(
    text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "s.yaml").write_text(text)
    assert cli_main(["sweep", "-c", str(tmp_path / "s.yaml"), "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{tmp_path}/{message}" in err, err
    assert not (tmp_path / "o").exists()
