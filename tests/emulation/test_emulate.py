"""`cassini emulate` end to end: schedulers' placements as replicas on the fabric, a report, a clean machine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from emulation.emulate.runner import EmulateSettings, emulate
from scheduler.workloads.traces import TraceJob, write_trace
from tests.helpers.leftovers import leftovers

pytestmark = pytest.mark.root

SCHEDULERS = ("themis", "th+cassini")


def _trace(tmp_path: Path) -> Path:
    """Two jobs at t = 0 whose racks the schedulers choose: small enough for a test."""
    jobs = [TraceJob("vgg19-a", "vgg19", 4, 1000), TraceJob("vgg16-b", "vgg16", 4, 1000)]
    return write_trace(jobs, tmp_path / "trace.csv")


def _replicas_running(marker: str) -> list[str]:
    out = subprocess.run(["pgrep", "-af", "emulation.jobs.replica"], capture_output=True, text=True)
    return [line for line in out.stdout.splitlines() if marker in line]


def _running_with_records(argv: list[str], tmp_path: Path) -> subprocess.Popen[str]:
    """`cassini emulate` started, once its first scheduler's replicas have written records
    (the run writes into a hidden sibling that replaces --out at the end)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and proc.poll() is None:
        records = list(tmp_path.glob(".out.partial-*/runs/themis/replicas/*.jsonl"))
        if any(p.stat().st_size > 0 for p in records):
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()
    return proc


def test_emulate_runs_every_scheduler_and_reports(tmp_path: Path, prefix: str) -> None:
    out = tmp_path / "out"
    settings = EmulateSettings(
        trace=str(_trace(tmp_path)), schedulers=SCHEDULERS, iterations=6, prefix=prefix
    )
    report, stopped = emulate(settings, out)
    assert stopped is None
    summary = json.loads((out / "summary.json").read_text())
    assert summary == report.summary
    assert set(summary["schedulers"]) == set(SCHEDULERS)
    assert not summary["partial"]
    for name, s in summary["schedulers"].items():
        assert set(s["jobs"]) == {"vgg19-a", "vgg16-b"}, name
        for job in s["jobs"].values():
            assert job["iterations"] == 6
            assert job["mean_iteration_ms"] > 0.5 * job["profile_iteration_ms"]
            assert job["sim_mean_iteration_ms"] > 0
            assert job["ce_marks"] is not None
        # the host CE total is the jobs' sum; the switch marks on shared links are part of all
        assert s["host_ce_marks"] == sum(j["ce_marks"] for j in s["jobs"].values())
        assert 0 <= s["ecn_marks_shared_links"] <= s["ecn_marks"]
        assert isinstance(s["trustworthy"], bool)
        assert s["fidelity"]["switch_cpu_mean"] is not None
        # the schedule that ran is the scheduler's own first decision
        assert s["schedule"]["placement"] == {
            j: list(v)
            for j, v in report.summary["schedulers"][name]["schedule"]["placement"].items()
        }
    assert "th+cassini" in summary["speedups"]
    rows = (out / "iterations.csv").read_text().splitlines()
    assert len(rows) == 1 + len(SCHEDULERS) * 2 * 4 * 6
    for name in ("report_html", "report_md", "iteration_cdf", "ecn_shared_links", "links_themis"):
        assert report.paths[name].stat().st_size > 0, name
    page = (out / "report.html").read_text()
    assert "data:image/png;base64," in page and "src='http" not in page
    assert leftovers(prefix) == []
    assert _replicas_running(str(out)) == []


def test_ctrl_c_leaves_a_partial_report_and_a_clean_machine(tmp_path: Path, prefix: str) -> None:
    out = tmp_path / "out"
    # An older run's records in --out: with --force they must not be read as this run's.
    stale = out / "runs" / "themis" / "replicas" / "vgg19-a-w0.jsonl"
    stale.parent.mkdir(parents=True)
    # (A marker no record of this run can hold: a bare number turned up in a timestamp.)
    stale.write_text('{"job": "vgg19-a", "worker": 0, "iteration": 0, "stale": "older-run"}\n')
    argv = [sys.executable, "-m", "emulation", "emulate", "--trace", str(_trace(tmp_path)),
            "--iterations", "500", "--out", str(out), "--prefix", prefix, "--force"]  # fmt: skip
    proc = _running_with_records(argv, tmp_path)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["partial"] is True
    assert summary["settings"]["stopped_by"] == "SIGINT"
    themis = summary["schedulers"]["themis"]
    assert themis["interrupted"] == "SIGINT"
    assert themis["iterations"] > 0  # what completed is reported
    assert "older-run" not in stale.read_text()  # the file is this run's alone
    assert list(tmp_path.glob(".out.*")) == []
    assert (out / "report.html").exists()
    assert leftovers(prefix) == []
    assert _replicas_running(str(out)) == []


def test_a_job_arriving_later_starts_at_its_compressed_arrival(tmp_path: Path, prefix: str) -> None:
    """The dynamic case: a second job arrives at 8 s of trace time, compressed 2x: 4 s in."""
    trace = write_trace(
        [
            TraceJob("vgg19-a", "vgg19", 4, 1000),
            TraceJob("vgg16-b", "vgg16", 4, 1000, arrival_s=8.0),
        ],
        tmp_path / "t.csv",
    )
    settings = EmulateSettings(trace=str(trace), schedulers=("th+cassini",), iterations=30,
                               prefix=prefix, compress=2.0)  # fmt: skip
    report, stopped = emulate(settings, tmp_path / "out")
    assert stopped is None and not report.summary["partial"]
    s = report.summary["schedulers"]["th+cassini"]
    assert {j: v["iterations"] for j, v in s["jobs"].items()} == {"vgg19-a": 30, "vgg16-b": 30}
    rows = (tmp_path / "out" / "iterations.csv").read_text().splitlines()[1:]
    first = {}
    for row in rows:
        _, job, _, _, iteration, start, *_ = row.split(",")
        if iteration == "0":
            first[job] = min(first.get(job, float("inf")), float(start))
    # b starts after its arrival (4 s), a was already running then
    assert first["vgg16-b"] - first["vgg19-a"] > 3900
    # the job running across the arrival kept its count: iterations numbered on, none twice
    its = sorted(
        int(r.split(",")[4])
        for r in rows
        if r.split(",")[1] == "vgg19-a" and r.split(",")[3] == "0"
    )
    assert its == list(range(30))
    assert (tmp_path / "out" / "runs" / "th+cassini" / "segment-1" / "summary.json").exists()
    assert leftovers(prefix) == []


def test_a_departure_decision_re_aims_the_jobs_left_and_starts_the_waiting_one(
    tmp_path: Path, prefix: str
) -> None:
    """The testbed full with four jobs; e arrives and waits; a leaves first (8 iterations, the
    others 12) and Th+Cassini places e on a's servers with new shifts for c and d."""
    from emulation.emulate.plan import plan_trace
    from emulation.emulate.runner import run_one
    from emulation.fabric.emulated import EmulatedFabric
    from emulation.fabric.options import FabricOptions
    from topologies.library import load_topology

    trace = [
        TraceJob("a", "vgg19", 6, 8),
        TraceJob("b", "vgg19", 6, 12),
        TraceJob("c", "vgg16", 6, 12),
        TraceJob("d", "wideresnet101", 6, 12),
        TraceJob("e", "resnet50", 6, 12, arrival_s=0.5),
    ]
    topo = load_topology("cassini-testbed")
    plan = plan_trace(trace, topo, ["th+cassini"], {j.name: j.iterations for j in trace})
    arrival, waits, departure = plan.of("th+cassini").decisions[:3]
    assert (waits.reason, departure.reason) == ("arrival", "departure")
    settings = EmulateSettings(schedulers=("th+cassini",), prefix=prefix)
    with EmulatedFabric(topo, FabricOptions(prefix=prefix)) as fabric:
        run = run_one(fabric, plan, "th+cassini", settings, tmp_path)
    folder = tmp_path / "runs" / "th+cassini"
    # e's arrival (it waits) restarts nothing; a's departure opens the second segment
    assert sorted(p.name for p in folder.iterdir()) == ["segment-0", "segment-1"]
    ran = [json.loads((folder / f"segment-{i}" / "schedule.json").read_text()) for i in (0, 1)]
    for schedule, decision in zip(ran, (arrival, departure), strict=True):
        assert {j: tuple(s) for j, s in schedule["placement"].items()} == dict(decision.placement)
        assert schedule["shifts_ms"] == pytest.approx(dict(decision.shifts_ms), abs=1e-3)
        assert schedule["periods_ms"] == pytest.approx(dict(decision.periods_ms), abs=1e-3)
    assert ran[0]["shifts_ms"] != ran[1]["shifts_ms"]  # the departure re-aimed c and d
    opened = json.loads((folder / "segment-1" / "segment.json").read_text())
    assert opened["reason"] == "departure" and "e: starts" in opened["why"]
    assert any(w.startswith(("c: shift", "d: shift")) for w in opened["why"])
    assert opened["started_s"] >= departure.at_s
    jobs = {s.name: s.iterations for s in run.result.summaries}
    assert {j: jobs[j] for j in "bcde"} == dict.fromkeys("bcde", 12)
    assert 1 <= jobs["a"] <= 8  # a ran until its servers became e's
    e_start = min(r.start_ms for r in run.result.records if r.job == "e")
    b_start = min(r.start_ms for r in run.result.records if r.job == "b")
    assert e_start - b_start > departure.at_s * 1e3
    assert leftovers(prefix) == []
    assert _replicas_running(str(tmp_path)) == []


def test_a_switch_that_dies_ends_the_run_in_one_line_with_a_partial_report(
    tmp_path: Path, prefix: str
) -> None:
    # It ended with a traceback (RuntimeError: the switch stopped) and no report.
    from emulation.housekeeping.run_files import runs
    from emulation.softswitch.processes import is_switch_process

    out = tmp_path / "out"
    argv = [sys.executable, "-m", "emulation", "emulate", "--trace", str(_trace(tmp_path)),
            "--iterations", "500", "--out", str(out), "--prefix", prefix]  # fmt: skip
    proc = _running_with_records(argv, tmp_path)
    (run,) = runs([prefix])
    switch = [p.pid for p in run.processes if is_switch_process(_argv(p.pid))]
    assert switch, run.processes
    for pid in switch:  # the run's own switch, by pid
        os.kill(pid, signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=90)
    assert proc.returncode == 1, stderr
    assert "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("cassini: error: the switch stopped during themis's run: ")
    assert last.endswith(f"fabric down, partial report in {out}")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["partial"] is True and summary["settings"]["failed"].startswith("the switch")
    assert "FAILED: the switch stopped" in (out / "report.md").read_text()
    assert leftovers(prefix) == []
    assert _replicas_running(str(out)) == []


def _argv(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]
