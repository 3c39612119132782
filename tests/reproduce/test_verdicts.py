"""The verdict rules on hand-made intervals."""

from __future__ import annotations

from emulation.reproduce.stats import Interval
from emulation.reproduce.verdicts import (
    NOT,
    NOT_RUN,
    PARTLY,
    REPRODUCED,
    Check,
    Outcome,
    judge,
    overall,
)

RATIO = Check("m", "mean", 1.4, tolerance=0.15)  # band 1.19-1.61


def test_a_mean_inside_the_band_is_reproduced() -> None:
    assert judge(RATIO, Interval(1.2, 1.0, 1.4, 5)).verdict == REPRODUCED
    assert judge(RATIO, Interval(1.6, 1.5, 1.7, 5)).verdict == REPRODUCED


def test_an_interval_reaching_the_band_is_partly() -> None:
    out = judge(RATIO, Interval(1.1, 0.9, 1.25, 5))
    assert out.verdict == PARTLY and "interval reaches" in out.reason


def test_a_significant_effect_short_of_the_band_is_partly_and_says_so() -> None:
    out = judge(RATIO, Interval(1.05, 1.02, 1.08, 10))
    assert out.verdict == PARTLY and "direction" in out.reason


def test_no_effect_is_not_reproduced_with_the_measured_reason() -> None:
    out = judge(RATIO, Interval(1.0, 0.97, 1.03, 10))
    assert out.verdict == NOT
    assert out.reason == "mean 1x [0.97, 1.03] (n=10), outside the band 1.19-1.61 of the paper 1.4x"
    # the opposite direction, significant, is not "partly"
    assert judge(RATIO, Interval(0.8, 0.7, 0.9, 10)).verdict == NOT


def test_bounds_at_most_and_at_least() -> None:
    at_most = Check("a", "adjustments", 2.0, kind="at_most", tolerance=0.0, neutral=None)
    assert judge(at_most, Interval(1.5, 1.0, 2.0, 4)).verdict == REPRODUCED
    assert judge(at_most, Interval(25.0, 20.0, 30.0, 4)).verdict == NOT
    at_least = Check("s", "score", 1.0, kind="at_least", tolerance=0.02, neutral=None)
    assert judge(at_least, Interval(0.989, None, None, 1)).verdict == REPRODUCED
    assert judge(at_least, Interval(0.9, None, None, 1)).verdict == NOT


def test_unmeasured_is_not_run_and_the_scenario_verdict_pools_checks() -> None:
    assert judge(RATIO, None).verdict == NOT_RUN
    r, p, n, x = (Outcome(v, "") for v in (REPRODUCED, PARTLY, NOT, NOT_RUN))
    assert overall([r, r, x]) == REPRODUCED
    assert overall([r, n]) == PARTLY and overall([p]) == PARTLY
    assert overall([n, n, x]) == NOT
    assert overall([x]) == NOT_RUN and overall([]) == NOT_RUN
