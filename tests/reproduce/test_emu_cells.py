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


def test_a_pair_planned_with_measured_profiles_paces_on_their_grid(tmp_path: Path) -> None:
    import json

    from emulation.reproduce.pair_plan import pair_plan

    # two VGG19s as one run measured them on the fabric: 259.6 ms, Up 139.4 ms at
    # 45.5 Gbit/s after 120.2 ms, grid period (p95) 260.5 ms
    measured = {
        "name": "vgg19", "model": "vgg19", "parallelism": "data", "workers": 4,
        "iteration_ms": 259.595, "batch_size": 64,
        "phases": [[120.19, 0.0], [139.405, 45.531086]], "period_ms": 260.5,
        "measured": {"up_ms": {"mean": 143.071, "p95": 140.075}, "interval_ms": 10.005},
    }  # fmt: skip
    path = tmp_path / "profiles.json"
    path.write_text(json.dumps([measured]))
    derived = pair_plan(("vgg19", "vgg19"))
    plan = pair_plan(("vgg19", "vgg19"), profiles=path)
    assert plan.iteration_ms == {"vgg19-0": 259.595, "vgg19-1": 259.595}
    assert plan.up_ms == {"vgg19-0": 139.405, "vgg19-1": 139.405}
    # Two Up phases at 91% of the link meet on a 260.5 ms grid: it is lengthened until
    # they hold it, planned at their p95 plus one 10 ms sample (150.08 ms): at least the
    # link's worth of both (2 x 150.08 x 45.53 / 50 = 273.3 ms), at most the grid on
    # which they never meet (2 x 150.08)
    period = plan.periods_ms["vgg19-0"]
    assert plan.periods_ms["vgg19-1"] == period
    assert 2 * 150.08 * 45.531086 / 50 <= period <= 2 * 150.08 * 1.003
    assert plan.shift_ms == pytest.approx(period / 2, abs=1.0)
    assert period != derived.periods_ms["vgg19-0"]


def test_a_pairs_score_is_taken_on_its_own_grid_before_any_stretch() -> None:
    from emulation.reproduce.pair_plan import pair_plan

    # The scores of SNAPSHOT_PAIRS (`cassini compat`'s best score at their own pace),
    # though a pair may be paced on a grid lengthened until it holds
    scores = {pair: pair_plan(pair) for pair in (("vgg19", "vgg19"), ("bert", "bert"))}
    assert [round(p.score, 3) for p in scores.values()] == [0.963, 0.717]
    vgg19 = scores[("vgg19", "vgg19")]
    assert vgg19.periods_ms["vgg19-0"] > 1.03 * vgg19.iteration_ms["vgg19-0"]
