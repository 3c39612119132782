"""iterations.csv's per-iteration `ce_marks` sums to the run's host total, per job and overall.

The shape of a real run's marks (a fabric run of two 4-worker rings whose
traffic crosses one congested queue in one direction): a worker counts the
CE-marked segments that arrive at it, so only the worker whose incoming ring
hop crosses the marking queue (worker 2 there) counts any; every other
worker's rows read 0 (counted, none arrived), not an empty cell (not
counted). Hand records in that shape go through the same writers a run
uses (`write_run`, and `cassini emulate`'s `write_iterations`).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from emulation.emulate.plan import SchedulerPlan
from emulation.emulate.report_csv import write_iterations
from emulation.emulate.results import SchedulerRun, job_iterations
from emulation.jobs.launch import parse_schedule, plan_jobs
from emulation.jobs.records import IterationRecord
from emulation.jobs.run_folder import write_run
from emulation.jobs.run_result import RunResult, summarize_job
from emulation.jobs.run_settings import RunSettings
from topologies.library import load_topology

TOPO = load_topology("leaf-spine:2:1:2")
JOBS = plan_jobs(
    parse_schedule({"placement": {"a": ["s01", "s02", "s03", "s04"], "b": ["s02", "s01"]},
                    "models": {"a": "vgg19", "b": "vgg19"}}),
    TOPO,
)  # fmt: skip
ITERATIONS = 5


def _marks(job: str, worker: int, k: int) -> int | None:
    if job == "b":
        return None if worker == 1 else 0  # b's worker 1 had no counter
    return 10 + k if worker == 2 else 0


def _records() -> tuple[IterationRecord, ...]:
    return tuple(
        IterationRecord(j.name, "vgg19", w, k, 1000.0 + 300 * k, 1250.0 + 300 * k, 100,
                        50.0, 0.0, False, _marks(j.name, w, k))
        for j in JOBS for w in range(j.workers) for k in range(ITERATIONS)
    )  # fmt: skip


def _result() -> RunResult:
    records = _records()
    return RunResult(
        jobs=JOBS,
        summaries=tuple(summarize_job(j, records) for j in JOBS),
        records=records,
        ports=(),
        links=(),
        settings=RunSettings(iterations=ITERATIONS),
        scale=0.001,
        emulation_profile="scale S = 0.001",
        duration_s=2.0,
    )


def _column(rows: list[dict[str, str]], job: str) -> list[str]:
    return [r["ce_marks"] for r in rows if r["job"] == job]


def test_the_run_folders_per_iteration_marks_sum_to_the_host_total(tmp_path: Path) -> None:
    result = _result()
    want = sum(10 + k for k in range(ITERATIONS))  # worker 2 of a, by hand: 60
    assert result.host_ce_marks == want
    write_run(result, tmp_path)
    rows = list(csv.DictReader((tmp_path / "iterations.csv").open()))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert sum(int(c) for c in _column(rows, "a")) == summary["jobs"]["a"]["ce_marks"] == want
    assert sum(int(r["ce_marks"] or 0) for r in rows) == summary["host_ce_marks"]
    # the zeros are the workers nothing marked arrived at; "" is a worker that did not count
    on_worker = {w: [r["ce_marks"] for r in rows if r["job"] == "a" and r["worker"] == str(w)]
                 for w in range(4)}  # fmt: skip
    assert on_worker[2] == [str(10 + k) for k in range(ITERATIONS)]
    assert on_worker[0] == on_worker[1] == on_worker[3] == ["0"] * ITERATIONS
    assert set(_column(rows, "b")) == {"0", ""}


def test_the_emulate_reports_iterations_carry_the_same_marks(tmp_path: Path) -> None:
    result = _result()
    plan = SchedulerPlan("given", (), {}, 0.0, 0.0)
    run = SchedulerRun("given", plan, result, {})
    write_iterations([run], tmp_path / "iterations.csv")
    rows = list(csv.DictReader((tmp_path / "iterations.csv").open()))
    assert {r["scheduler"] for r in rows} == {"given"}
    assert sum(int(r["ce_marks"] or 0) for r in rows) == result.host_ce_marks
    per_iteration = job_iterations(result.records)
    assert per_iteration["a"].ce_marks.tolist() == [10.0 + k for k in range(ITERATIONS)]
    # an iteration with a worker that did not count is not a count of 0
    assert all(v != v for v in per_iteration["b"].ce_marks.tolist())  # NaN
