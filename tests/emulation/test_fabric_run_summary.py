"""What a run reports, from records and counter rows made by hand (no fabric)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from controlplane.telemetry import LinkDelta, PortDelta
from emulation.jobs.launch import parse_schedule, plan_jobs
from emulation.jobs.records import COLUMNS, IterationRecord
from emulation.jobs.run_folder import write_run
from emulation.jobs.run_result import RunResult, summarize_job
from emulation.jobs.run_settings import RunSettings
from topologies.library import load_topology

TOPO = load_topology("leaf-spine:2:1:2")
JOBS = plan_jobs(
    parse_schedule(
        {
            "placement": {"vgg19-0": ["s01", "s03"], "vgg19-1": ["s02", "s04"]},
            "shifts_ms": {"vgg19-1": 100.0},
            "periods_ms": {"vgg19-0": 250.0, "vgg19-1": 250.0},
        }
    ),
    TOPO,
)


def record(
    job: str, worker: int, k: int, ms: float, ce: int | None, adjusted: bool = False
) -> IterationRecord:
    start = 1000.0 + 250.0 * k
    return IterationRecord(
        job, "vgg19", worker, k, start, start + ms, 100, ms / 2, 1.0, adjusted, ce
    )


def test_a_job_summary_counts_every_worker_iteration_once() -> None:
    times = [200.0, 210.0, 220.0, 400.0]
    records = [record("vgg19-0", w, k, t, 3) for w in (0, 1) for k, t in enumerate(times)]
    records.append(record("vgg19-0", 0, 4, 200.0, 1, adjusted=True))  # worker 1 never ended it
    records.append(record("vgg19-1", 0, 0, 999.0, 5))
    summary = summarize_job(JOBS[0], records)
    assert summary.iterations == 4
    # every record idled 1 ms for its slot first: a step's time counts it
    all_times = [t + 1.0 for t in (*times, *times, 200.0)]
    assert summary.mean_iteration_ms == pytest.approx(sum(all_times) / len(all_times), abs=1e-3)
    assert summary.p99_iteration_ms == pytest.approx(401.0, abs=1.0)
    assert summary.ce_marks == 3 * 8 + 1
    assert summary.adjustments == 1
    span_ms = records[8].end_ms - records[0].start_ms
    assert summary.adjustments_per_minute == pytest.approx(60_000.0 / span_ms, abs=1e-3)
    assert summarize_job(JOBS[0], [record("vgg19-0", 0, 0, 5.0, None)]).ce_marks is None
    empty = summarize_job(JOBS[1], [])
    assert (empty.iterations, empty.mean_iteration_ms, empty.ce_marks) == (0, None, None)


def _port(port: int, marked: int) -> PortDelta:
    return PortDelta(
        time_s=1.0, interval_s=0.5, port=port, tx_packets=10, ecn_marked_packets=marked
    )


def test_the_run_folder_holds_every_file_with_the_totals(tmp_path: Path) -> None:
    records = tuple(record(j.name, w, 0, 210.0, 2) for j in JOBS for w in (0, 1))
    result = RunResult(
        jobs=JOBS,
        summaries=tuple(summarize_job(j, records) for j in JOBS),
        records=records,
        ports=(_port(1, 4), _port(5, 3), _port(5, 1)),
        links=(
            LinkDelta(
                time_s=1.0,
                interval_s=0.5,
                link="tor1->s01",
                port=1,
                tx_packets=10,
                tx_bytes=15000,
                ecn_marked_packets=4,
                wred_dropped_packets=0,
                gbps=0.01,
            ),
        ),  # fmt: skip
        settings=RunSettings(iterations=1),
        scale=0.001,
        emulation_profile="scale S = 0.001\nport rates: 50 Mbit/s",
        duration_s=2.5,
    )
    assert (result.switch_ecn_marked, result.host_ce_marks) == (8, 8)
    written = {p.name for p in write_run(result, tmp_path)}
    assert written == {
        "iterations.csv", "summary.json", "schedule.json", "profiles.json",
        "emulation-profile.txt", "ecn.csv", "ecn-links.csv", "telemetry.csv", "queues.csv",
    }  # fmt: skip
    telemetry = (tmp_path / "telemetry.csv").read_text().splitlines()
    assert telemetry == ["time_s,link,job,bytes,packets,ce_marks"]  # no samples in this result
    rows = list(csv.reader((tmp_path / "iterations.csv").open()))
    assert tuple(rows[0]) == COLUMNS and len(rows) == 1 + len(records)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["switch_ecn_marked"] == 8 and summary["host_ce_marks"] == 8
    assert summary["jobs"]["vgg19-1"]["ce_marks"] == 4
    assert summary["schedule"]["shifts_ms"] == {"vgg19-0": 0.0, "vgg19-1": 100.0}
    assert summary["emulation_profile"]["lines"][1] == "port rates: 50 Mbit/s"
    # The schedule written beside the results runs again as it is.
    again = plan_jobs(parse_schedule(json.loads((tmp_path / "schedule.json").read_text())), TOPO)
    assert again == JOBS
    profiles = json.loads((tmp_path / "profiles.json").read_text())
    assert [p["name"] for p in profiles] == ["vgg19-0", "vgg19-1"]


def test_a_switch_that_died_has_no_cpu_figure_rather_than_a_negative_one() -> None:
    import math
    import resource

    from emulation.jobs.cpu_usage import machine_cpu
    from emulation.jobs.supervisor import _fidelity

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    machine = machine_cpu()
    alive = _fidelity([], (2.0, machine, usage), (3.0, machine, usage), 2.0, 0.001)
    assert alive["switch_cpu_cores"] == 0.5
    died = _fidelity([], (2.0, machine, usage), (math.nan, machine, usage), 2.0, 0.001)
    assert died["switch_cpu_cores"] is None  # it was -1.0: the dead pids' CPU read as 0


def test_records_written_before_the_host_witness_still_read(tmp_path: Path) -> None:
    from emulation.jobs.records import read_records, write_record

    old = {"job": "j", "model": "vgg19", "worker": 0, "iteration": 0, "start_ms": 1.0,
           "end_ms": 2.0, "bytes": 10, "comm_ms": 0.5, "wait_ms": 0.0, "adjusted": False,
           "ce_marks": 1}  # fmt: skip
    path = tmp_path / "w0.jsonl"
    path.write_text(json.dumps(old) + "\n")
    new = IterationRecord("j", "vgg19", 0, 1, 3.0, 4.0, 10, 0.5, 0.0, False, 0, 1.5, 1.0,
                          (0.97, 0.5))  # fmt: skip
    with path.open("a") as fh:
        write_record(fh, new)
    first, second = read_records(path)
    assert (first.late_ms, first.late_max_ms, first.up_pace) == (None, None, None)
    assert second == new  # up_pace comes back a tuple
    assert COLUMNS[-2:] == ("late_ms", "late_max_ms")


def test_host_lateness_counts_late_wakeups_and_slow_unmarked_phases() -> None:
    from dataclasses import replace

    from emulation.jobs.run_result import host_lateness

    def rec(
        w: int, k: int, ce: int | None, late: float, pace: tuple[float, ...]
    ) -> IterationRecord:
        return replace(record("vgg19-0", w, k, 200.0, ce), late_ms=late + 0.5, late_max_ms=late,
                       up_pace=pace)  # fmt: skip

    records = [
        rec(0, 0, 0, 0.4, (0.95, 0.97)),
        rec(1, 0, 0, 5.5, (0.95, 0.7)),  # late (> 5 ms), and one phase slow (< 75%)
        rec(0, 1, None, 9.0, (0.1,)),  # marks not counted: its phases are not judged
        rec(1, 1, 0, 5.0, (0.8,)),  # exactly 5 ms is not late
    ]
    # The other job was marked once: a job that shares a bottleneck is never judged.
    other = [replace(r, job="vgg19-1", ce_marks=r.iteration) for r in records]
    f = host_lateness(records + other)
    assert (f["host_iterations"], f["host_late_iterations"]) == (8, 4)
    assert f["host_late_p99_ms"] == pytest.approx(
        float(np.percentile([0.4, 5.5, 9.0, 5.0] * 2, 99))
    )
    assert (f["up_phases"], f["slow_up_phases"]) == (4, 1)
    # Records without the fields: not measured, not zero.
    bare = host_lateness([record("vgg19-0", 0, 0, 200.0, 0)])
    assert set(bare.values()) == {None}
    # Unpaced replicas time their wake-ups but judge no phase.
    unpaced = host_lateness([replace(r, up_pace=None) for r in records])
    assert unpaced["host_iterations"] == 4 and unpaced["up_phases"] is None
    # RoCE: a job a PFC pause stopped once (never marked: a victim of the pause's
    # spread) is not judged either; one never paused still is.
    roce = [replace(r, pfc_pause_frames=0) for r in records]
    paused = [replace(r, job="bert-3", ce_marks=0, pfc_pause_frames=r.iteration * 2)
              for r in records]  # fmt: skip
    g = host_lateness(roce + paused)
    assert (g["up_phases"], g["slow_up_phases"]) == (4, 1)


def test_a_paced_step_counts_the_agents_idle_as_the_simulator_does() -> None:
    # Hand case: ready at 1000, the slot is at 1030, the work ends at 1230: the step took
    # 230 ms (the simulator's "an iteration counts from when the job was ready"); the
    # work alone 200 ms.
    rec = IterationRecord("vgg19-0", "vgg19", 0, 3, 1030.0, 1230.0, 100, 80.0, 30.0, False)
    assert rec.iteration_ms == 230.0 and rec.busy_ms == 200.0
    unpaced = IterationRecord("vgg19-0", "vgg19", 0, 3, 1000.0, 1200.0, 100, 80.0, 0.0, False)
    assert unpaced.iteration_ms == unpaced.busy_ms == 200.0


def test_lines_that_are_no_record_are_skipped_not_raised(tmp_path: Path) -> None:
    """A line cut by a kill can still parse (as a number), and a file in a run folder may
    hold a line of something else: neither is a record, and the rest still reads."""
    from emulation.jobs.records import read_records, write_record

    record = IterationRecord("j", "vgg19", 0, 1, 3.0, 4.0, 10, 0.5, 0.0, False)
    path = tmp_path / "w0.jsonl"
    path.write_text('12\n{"job": "j", "worker": 0}\n["a"]\n{"cut": \n')
    with path.open("a") as fh:
        write_record(fh, record)
    assert read_records(path) == [record]
