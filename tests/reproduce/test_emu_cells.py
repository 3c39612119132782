"""The emulation column's figures from a report's files, on hand-made reports."""

from __future__ import annotations

from pathlib import Path

import pytest

from emulation.reproduce.emu_cells import job_iterations, trace_figures

CSV = """scheduler,job,model,worker,iteration,start_ms,end_ms,bytes,comm_ms,wait_ms,adjusted,ce_marks,late_ms,late_max_ms
given,a,vgg19,0,0,0,900,1,1,0,False,50,,
given,a,vgg19,0,1,1000,1300,1,1,0,False,2,,
given,a,vgg19,1,1,1000,1320,1,1,0,False,3,,
given,b,vgg19,0,1,0,250,1,1,0,False,,,
other,a,vgg19,0,1,0,999,1,1,0,False,9,,
"""


def test_iterations_mean_their_workers_sum_their_marks_and_drop_the_warm_up(tmp_path: Path) -> None:
    path = tmp_path / "iterations.csv"
    path.write_text(CSV)
    assert job_iterations(path, "given") == {"a": {1: (310.0, 5.0)}, "b": {1: (250.0, 0.0)}}


def test_trace_figures_are_base_over_variant_with_marks_per_iteration_per_model() -> None:
    def job(model: str, marks: int, iterations: int) -> dict:
        return {"model": model, "ce_marks": marks, "iterations": iterations}

    summary = {"schedulers": {
        "themis": {"mean_iteration_ms": 300.0, "p99_iteration_ms": 600.0,
                   "jobs": {"d": job("dlrm", 270, 10), "r": job("resnet50", 10, 10)}},
        "th+cassini": {"mean_iteration_ms": 200.0, "p99_iteration_ms": 300.0,
                       "jobs": {"d": job("dlrm", 10, 10), "r": job("resnet50", 0, 10)}},
    }}  # fmt: skip
    got = trace_figures(summary)
    assert got["th+cassini.mean"] == pytest.approx(1.5) and got["th+cassini.p99"] == 2.0
    assert got["th+cassini.marks.dlrm"] == pytest.approx(27.0)
    assert got["th+cassini.marks.resnet50"] == float("inf") and got[
        "th+cassini.marks.max"
    ] == float("inf")
    assert "po+cassini.mean" not in got
