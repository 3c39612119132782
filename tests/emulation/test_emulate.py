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
from emulation.netns import leftovers
from scheduler.traces import TraceJob, write_trace

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the fabric needs root")

SCHEDULERS = ("themis", "th+cassini")


def _trace(tmp_path: Path) -> Path:
    """Two jobs at t = 0 whose racks the schedulers choose: small enough for a test."""
    jobs = [TraceJob("vgg19-a", "vgg19", 4, 1000), TraceJob("vgg16-b", "vgg16", 4, 1000)]
    return write_trace(jobs, tmp_path / "trace.csv")


def _replicas_running(marker: str) -> list[str]:
    out = subprocess.run(["pgrep", "-af", "emulation.jobs.replica"], capture_output=True, text=True)
    return [line for line in out.stdout.splitlines() if marker in line]


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
    argv = [sys.executable, "-m", "emulation", "emulate", "--trace", str(_trace(tmp_path)),
            "--iterations", "500", "--out", str(out), "--prefix", prefix]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    records = out / "runs" / "themis" / "replicas"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and proc.poll() is None:
        if records.exists() and any(p.stat().st_size > 0 for p in records.glob("*.jsonl")):
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()
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
    assert (out / "report.html").exists()
    assert leftovers(prefix) == []
    assert _replicas_running(str(out)) == []


def test_a_trace_with_later_arrivals_is_refused_by_name(tmp_path: Path) -> None:
    trace = write_trace(
        [TraceJob("a", "vgg19", 2, 10), TraceJob("late", "dlrm", 2, 10, arrival_s=30.0)],
        tmp_path / "t.csv",
    )
    run = subprocess.run(
        [sys.executable, "-m", "emulation", "emulate", "--trace", str(trace), "--out",
         str(tmp_path / "o")], capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 2
    assert "job 'late' arrives at 30 s" in run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / "o" / "summary.json").exists()
