"""Paced grids that the jobs can hold with their Up phases meeting (scheduler.cassini.holding)."""

from __future__ import annotations

import pytest

from scheduler.cassini.holding import (
    BISECTION_STEPS,
    HOLD_TOLERANCE,
    MAX_STRETCH,
    contended_iterations,
    free_slowdown,
    grid_slip,
    holding_factor,
)
from scheduler.cassini.plans import plan_link
from scheduler.workloads.profiles import build_profile
from scheduler.workloads.types import Phase, Profile
from tests.helpers.legacy_models import legacy_models


def _job(name: str, down: float, up: float, gbps: float = 50.0) -> Profile:
    return Profile(name, "m", "data", 2, down + up, (Phase(down, 0.0), Phase(up, gbps)))


def test_two_jobs_whose_up_phases_overlap_run_longer_than_their_grid() -> None:
    # By hand, period 100, B shifted 50: A sends alone 40-90 (50 of its 60 ms), then
    # both at 25 Gbps: A's last 500 Gbit-ms take 20 ms, so A ends at 110 and starts late
    # at once; B then sends alone until A's next Up... each iteration takes 120 ms.
    a, b = _job("a", 40.0, 60.0), _job("b", 40.0, 60.0)
    assert contended_iterations((a, b), (100.0, 100.0), (0.0, 50.0), 50.0) == pytest.approx(
        (120.0, 120.0)
    )
    # On a 120 ms grid shifted by 60 the Up phases just touch: held exactly.
    assert contended_iterations((a, b), (120.0, 120.0), (0.0, 60.0), 50.0) == pytest.approx(
        (120.0, 120.0)
    )


def test_a_job_alone_or_below_capacity_keeps_its_period() -> None:
    a = _job("a", 40.0, 60.0, gbps=20.0)
    b = _job("b", 70.0, 30.0, gbps=20.0)
    # 40 Gbps of demand on a 50 Gbps link: nobody slows, whatever the shift
    assert contended_iterations((a, b), (100.0, 100.0), (0.0, 0.0), 50.0) == pytest.approx(
        (100.0, 100.0)
    )
    assert contended_iterations((a,), (150.0,), (0.0,), 50.0) == pytest.approx((150.0,))


def test_the_least_stretch_that_holds_is_found_and_none_past_the_limit() -> None:
    a, b = _job("a", 40.0, 60.0), _job("b", 40.0, 60.0)

    def holds(f: float) -> bool:
        slips = grid_slip((a, b), (100.0 * f, 100.0 * f), (0.0, 50.0 * f), 50.0)
        return max(slips) <= HOLD_TOLERANCE

    factor = holding_factor(holds)
    assert factor is not None
    # 120 ms of Up at line rate per period: a grid of 120 ms (to the tolerance)
    resolution = (MAX_STRETCH - 1.0) / 2**BISECTION_STEPS
    assert 1.2 / (1 + HOLD_TOLERANCE) <= factor <= 1.2 + resolution
    # played until it slips past the tolerance: the answer is the same, sooner
    fast = grid_slip((a, b), (100.0, 100.0), (0.0, 50.0), 50.0, give_up=HOLD_TOLERANCE)
    assert HOLD_TOLERANCE < max(fast) < 2.5
    assert holding_factor(holds, max_stretch=1.1) is None
    assert holding_factor(lambda f: True) == 1.0


def test_a_pair_that_cannot_hold_its_profile_grid_is_paced_on_a_longer_one() -> None:
    v1, v2 = build_profile("vgg19", 4, models=legacy_models()), build_profile("vgg19", 4, models=legacy_models())
    v2 = Profile("v2", v2.model, v2.parallelism, v2.workers, v2.iteration_ms, v2.phases)
    own = v1.iteration_ms
    # on the profile's own grid, shifted by half of it, each VGG19 would run > 5% late
    late = contended_iterations((v1, v2), (own, own), (0.0, own / 2), 50.0)
    assert min(late) > 1.05 * own
    link = plan_link([v1, v2], 50.0, 5.0, "auto", pace=True)
    assert link.plan == "paced"
    period = link.periods_ms[v1.name]
    assert link.periods_ms[v2.name] == pytest.approx(period)
    # held: no Up phase slowed, so a little past the contended iteration (where the
    # phases still meet a little every period)
    assert own * 1.05 < period < min(late) * 1.01
    shifts = link.solution.shifts_ms
    held = contended_iterations(
        (v1, v2), (period, period), (shifts[v1.name], shifts[v2.name]), 50.0
    )
    assert max(held) <= period * (1 + HOLD_TOLERANCE)
    starts = (shifts[v1.name], shifts[v2.name])
    assert max(grid_slip((v1, v2), (period, period), starts, 50.0)) <= HOLD_TOLERANCE


def test_a_pair_that_interleaves_keeps_its_own_periods() -> None:
    r1 = build_profile("resnet50", 4, models=legacy_models())
    r2 = Profile("r2", r1.model, r1.parallelism, r1.workers, r1.iteration_ms, r1.phases)
    link = plan_link([r1, r2], 50.0, 5.0, "auto", pace=True)
    assert link.solution.score == pytest.approx(1.0)
    assert link.periods_ms == {r1.name: r1.iteration_ms, r2.name: r1.iteration_ms}


def test_a_stretched_grid_is_kept_only_when_it_beats_running_free() -> None:
    # Two VGG11s (score 0.709 on their own 197.6 ms): held only at about 1.29x, still
    # faster than the fluid expects them to run free (1.42x), so paced on it.
    v1 = build_profile("vgg11", 4, models=legacy_models())
    v2 = Profile("w2", v1.model, v1.parallelism, v1.workers, v1.iteration_ms, v1.phases)
    link = plan_link([v1, v2], 50.0, 5.0, "auto", pace=True)
    period = link.periods_ms[v1.name]
    assert link.plan == "paced" and 1.25 < period / v1.iteration_ms < 1.32
    assert period / v1.iteration_ms < free_slowdown([v1, v2], 50.0) - 0.05
    # Hogs at 90% of the link for 95% of their iteration: two Up phases need 1.9 of
    # their period, so no grid up to 1.5x holds, and they run free.
    hog = Profile("h", "m", "data", 2, 100.0, (Phase(5.0, 0.0), Phase(95.0, 45.0)))
    hog2 = Profile("h2", "m", "data", 2, 100.0, hog.phases)
    assert plan_link([hog, hog2], 50.0, 5.0, "auto", pace=True).plan == "free"


def test_a_group_no_grid_holds_runs_free_even_where_the_value_rule_would_pace() -> None:
    # Up for 80% of 100 ms at line rate: the best shift scores 0.4 and running free
    # 0.36, so the value rule alone would pace (-0.6 against -0.64, past the 0.01
    # margin); but two such Up phases need 160 ms of the link per period, and no grid
    # up to 1.5 x 100 ms holds: they run free.
    a = Profile("a", "m", "data", 2, 100.0, (Phase(20.0, 0.0), Phase(80.0, 50.0)))
    b = Profile("b", "m", "data", 2, 100.0, a.phases)
    link = plan_link([a, b], 50.0, 5.0, "auto", pace=True)
    assert link.plan == "free"
    assert link.solution.shifts_ms == {"a": 0.0, "b": 0.0}


def test_a_measured_up_phase_is_planned_at_its_p95() -> None:
    """Hand case: two jobs of 100 ms, Up 40 ms at the whole link. On their means a
    100 ms grid holds (40 + 40 in 100, shifted 50). With 15 ms of slack each they are
    planned with Up 55 (`with_long_up`): 110 ms together, so the grid stretches to
    110 ms, shifted half of it."""
    from dataclasses import replace

    def job(name: str, slack: float) -> Profile:
        return Profile(name, "x", "data", 2, 100.0, (Phase(60.0, 0.0), Phase(40.0, 50.0)),
                       up_slack_ms=slack)  # fmt: skip

    calm = plan_link([job("a", 0.0), job("b", 0.0)], 50.0, 5.0, "auto", pace=True)
    assert calm.periods_ms == {"a": 100.0, "b": 100.0}
    loose = plan_link([job("a", 15.0), job("b", 15.0)], 50.0, 5.0, "auto", pace=True)
    period = loose.periods_ms["a"]
    assert loose.periods_ms["b"] == period
    assert 110.0 <= period <= 110.0 * 1.01
    shift = (loose.solution.shifts_ms["b"] - loose.solution.shifts_ms["a"]) % period
    assert shift == pytest.approx(period / 2, abs=period * 5 / 360)
    # the slack is for planning only: the profiles are unchanged
    assert replace(job("a", 15.0), up_slack_ms=0.0) == job("a", 0.0)


def test_a_pair_is_paced_on_a_circle_where_one_job_idles_for_its_ratio() -> None:
    """Hand case: a (160 ms, Up 60) and b (190 ms, Up 70) at the whole link. No shift
    interleaves them at their own pace (160:190 is no ratio up to 4), and the
    old quanta offered only grids that idled at most 15% or that cannot be held; on
    one 1:1 circle of 190 ms, a idling 30 ms, their Up phases (130 ms) take turns,
    and the jobs run 1.094x on average against the 1.139x the fluid expects free."""
    a = Profile("a", "m", "data", 2, 160.0, (Phase(100.0, 0.0), Phase(60.0, 50.0)))
    b = Profile("b", "m", "data", 2, 190.0, (Phase(120.0, 0.0), Phase(70.0, 50.0)))
    link = plan_link([a, b], 50.0, 5.0, "auto", pace=True)
    assert link.plan == "paced"
    assert link.periods_ms == {"a": pytest.approx(190.0), "b": pytest.approx(190.0)}
    shifts = link.solution.shifts_ms
    assert shifts["a"] != shifts["b"]
    held = grid_slip((a, b), (190.0, 190.0), (shifts["a"], shifts["b"]), 50.0)
    assert max(held) <= HOLD_TOLERANCE
    mean_stretch = (190.0 / 160.0 + 1.0) / 2
    assert mean_stretch < free_slowdown([a, b], 50.0) - 0.04


def test_an_overlap_the_idle_absorbs_every_period_is_held_and_a_growing_one_is_not() -> None:
    """Hand cases of `grid_slip` (our choice: a slowed Up phase is no slip while the
    slot's idle absorbs it the same way every period).

    a: 60 ms compute, then 40 ms at the whole link, paced at 110 ms (10 ms idle). With b
    shifted 75 ms, b's Up (135-175) meets a's next one (170-210) for 5 ms: both at half
    rate, b ends at 180 and a at 215, inside their slots (185, 220), and so every period:
    held. The earlier rule counted the 5 ms as slip (5 / 110)."""
    a = Profile("a", "m", "data", 2, 100.0, (Phase(60.0, 0.0), Phase(40.0, 50.0)))
    assert grid_slip((a, a), (110.0, 110.0), (0.0, 75.0), 50.0) == (0.0, 0.0)
    # Two Up phases of 40 ms on a 79 ms grid ask the link for 80 ms a period: each
    # period's overlap is 1 ms longer than the last; idle hides it for a while, but the
    # ends move later and it is slip. On 81 ms it fits, and holds.
    b = Profile("b", "m", "data", 2, 70.0, (Phase(30.0, 0.0), Phase(40.0, 50.0)))
    assert min(grid_slip((b, b), (79.0, 79.0), (0.0, 39.5), 50.0)) > HOLD_TOLERANCE
    assert grid_slip((b, b), (81.0, 81.0), (0.0, 40.5), 50.0) == (0.0, 0.0)
