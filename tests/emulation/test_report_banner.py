"""What the report says above its tables: which witness condemned a run (not "the emulator
fell behind" when only the machine's CPU passed its limit), and the speed-up table
when the schedulers ran a given schedule."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from emulation.emulate.report import write_report
from emulation.emulate.results import SchedulerRun
from tests.emulation.test_emulate_report import _run

SETTINGS = {"trace": "four-jobs", "topology": "cassini-testbed", "scale": 0.001}


def _busy_machine(run: SchedulerRun, busy: float) -> SchedulerRun:
    fidelity = {**run.result.fidelity, "machine_cpu": {"busy": busy, "steal": 0.01}}
    return dataclasses.replace(run, result=dataclasses.replace(run.result, fidelity=fidelity))


def test_a_busy_machine_with_every_frame_on_time_is_named_as_such(tmp_path: Path) -> None:
    runs = [
        _busy_machine(_run("themis", [300.0, 320.0], [1, 2], {"tor1->agg1": 5}), 0.97),
        _run("th+cassini", [250.0, 260.0], [1, 0], {"tor1->agg1": 2}),
    ]
    report = write_report(runs, SETTINGS, tmp_path)
    themis = report.summary["schedulers"]["themis"]
    assert themis["trustworthy"] is False
    assert themis["fidelity"]["failed_witnesses"] == ["machine CPU"]
    md = (tmp_path / "report.md").read_text()
    assert "fell behind" not in md
    assert "NOT TRUSTWORTHY: limits exceeded by machine CPU in themis;" in md, md
    assert "the switch kept up, the machine did not" in md
    assert "limits exceeded" in md and "limits passed" not in md


def test_late_frames_are_named_and_the_switch_is_not_said_to_keep_up(tmp_path: Path) -> None:
    runs = [_run("themis", [300.0, 320.0], [1, 2], {"tor1->agg1": 5}, late=500)]
    write_report(runs, SETTINGS, tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "NOT TRUSTWORTHY: limits exceeded by frame lateness in themis. See Fidelity." in md, md
    assert "kept up" not in md.split("\n\n")[1]


def test_against_given_the_speedup_is_cassinis_shifts_over_the_files(tmp_path: Path) -> None:
    runs = [
        _run("given", [300.0, 320.0], [10, 20], {"tor1->agg1": 50}),
        _run("th+cassini", [250.0, 260.0], [1, 0], {"tor1->agg1": 2}),
    ]
    report = write_report(runs, SETTINGS, tmp_path)
    up = report.summary["speedups"]["th+cassini"]
    assert up["base"] == "given"
    assert up["mean"] == pytest.approx(309.5 / 254.5, rel=1e-3)
    md = (tmp_path / "report.md").read_text()
    assert "| th+cassini | given | 1.216 |" in md, md


@pytest.mark.parametrize(("target", "noted"), [("bmv2", True), ("softswitch", False)])
def test_a_bmv2_report_says_its_marks_are_counted_in_packets(
    tmp_path: Path, target: str, noted: bool
) -> None:
    """bmv2 marks a job alone (its queues drain packets, not bytes): the report says so
    above its tables, and only on bmv2."""
    runs = [_run("themis", [300.0, 320.0], [1, 2], {"tor1->agg1": 5})]
    write_report(runs, {**SETTINGS, "target": target}, tmp_path)
    head = (tmp_path / "report.md").read_text().split("\n\n")[1]
    assert ("ON BMV2, MARKS ARE NOT THE SOFTWARE SWITCH'S" in head) is noted, head
