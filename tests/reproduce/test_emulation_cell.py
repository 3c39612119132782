"""One quick emulation cell of two-vgg19 through the emulate runner, on the real fabric (~45 s):
VGG19 profiled alone first, then the pair aligned and shifted."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from emulation.reproduce.grid import EMULATION
from emulation.reproduce.pair_plan import pair_plan
from emulation.reproduce.run import ReproduceOptions, reproduce
from emulation.reproduce.scenarios import QUICK_PROFILE_ITERATIONS
from scheduler.sweep.engine import InlineEngine


@pytest.mark.root
@pytest.mark.timeout(180)
def test_a_quick_two_vgg19_emulation_cell_runs_both_cases_and_reports_its_trust(
    tmp_path: Path,
) -> None:
    opts = ReproduceOptions(quick=True, runs=1, columns=(EMULATION,), retries=0)
    res = reproduce(["two-vgg19"], opts, tmp_path, InlineEngine())
    assert res.failures == () and res.ran == 1
    (record,) = [json.loads(p.read_text()) for p in (tmp_path / "cells").glob("*.json")]
    figures = record["figures"]
    assert record["transport"] == "tcp" and record["trustworthy"] in (True, False, None)
    assert math.isfinite(figures["vgg19+vgg19.p90_ratio"]) and figures["vgg19+vgg19.p90_ratio"] > 0
    assert 0.2 < figures["vgg19+vgg19.aligned_share"] <= 1.2
    # both cases left their emulate reports
    for case in ("aligned", "shifted"):
        assert list((tmp_path / "emulation").glob(f"*/vgg19+vgg19/{case}/report/summary.json"))
    # the run profiled VGG19 alone first and Cassini planned the shifted case with it
    (profiles,) = (tmp_path / "emulation").glob("*/profiles.json")
    (entry,) = json.loads(profiles.read_text())
    assert entry["model"] == "vgg19" and entry["workers"] == 4
    # less the warm-up, and the last (an iteration is start to start)
    assert entry["measured"]["iterations"] == QUICK_PROFILE_ITERATIONS - 2
    (shifted,) = (tmp_path / "emulation").glob("*/vgg19+vgg19/shifted/report/summary.json")
    schedule = json.loads(shifted.read_text())["settings"]["schedule"]
    plan = pair_plan(("vgg19", "vgg19"), profiles=profiles)
    assert schedule["periods_ms"] == pytest.approx(plan.periods_ms)
    assert min(plan.periods_ms.values()) >= entry["period_ms"]
    emu = res.doc["scenarios"][0]["emulation"]
    assert emu["used"] + emu["left_out"] == 1 and emu["transport"] == "tcp"
    assert ("left out: vgg19+vgg19" in (tmp_path / "reproduction.md").read_text()) == (
        record["trustworthy"] is False
    )
