"""The unified circle and the per-link solvers, checked against brute force."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.cassini.circle import demand_on_circle, unified_perimeter
from scheduler.cassini.compatibility import (
    compatibility,
    discretize,
    equation5_shift_ms,
    exact_rotations,
    fast_rotations,
)
from scheduler.workloads.types import Phase, Profile
from tests.helpers.scores import score_at
from topologies.errors import UserInputError


def duty(
    name: str, iteration_ms: float, up_fraction: float, gbps: float = 50.0, offset: float = 0.0
) -> Profile:
    """A job that sends at `gbps` for `up_fraction` of each iteration, after `offset` ms of compute."""
    up = iteration_ms * up_fraction
    phases = [Phase(offset, 0.0), Phase(up, gbps), Phase(iteration_ms - up - offset, 0.0)]
    return Profile(
        name, "m", "data", 2, iteration_ms, tuple(p for p in phases if p.duration_ms > 0)
    )


def brute_force_scores(profiles: list[Profile], capacity: float, precision: float) -> np.ndarray:
    """Score of every rotation of every job but the first, the slow obvious way."""
    problem = discretize(profiles, precision)
    scores = []
    for rots in itertools.product(range(problem.bins), repeat=len(profiles) - 1):
        total = problem.demands[0].copy()
        for j, r in enumerate(rots, start=1):
            total += np.roll(problem.demands[j], r)
        scores.append(1 - np.maximum(total - capacity, 0).mean() / capacity)
    return np.array(scores)


# --- unified circle ---------------------------------------------------------


def test_perimeter_is_lcm_of_quantized_iteration_times() -> None:
    assert unified_perimeter([100.0, 150.0]) == (300.0, False)
    assert unified_perimeter([40.0, 60.0, 100.0]) == (600.0, False)
    assert unified_perimeter([99.6, 150.2]) == (300.0, False)  # 1 ms quantization is silent


def test_perimeter_cap_coarsens_quantum_and_reports_it() -> None:
    # LCM(101, 150) = 15150 ms > 8 x 150: a 2 ms grid gives 50 and 75 units -> 300 ms.
    assert unified_perimeter([101.0, 150.0]) == (300.0, True)
    perimeter, approximated = unified_perimeter([232.9, 251.8], cap_factor=8)
    assert approximated and perimeter <= 8 * 251.8
    assert unified_perimeter([101.0, 150.0], cap_factor=200) == (15150.0, False)


@given(
    st.lists(st.floats(min_value=5.0, max_value=900.0), min_size=1, max_size=6),
    st.sampled_from([4, 8, 16]),
)
@settings(max_examples=60, deadline=None)
def test_perimeter_never_exceeds_cap(times: list[float], cap: int) -> None:
    perimeter, _ = unified_perimeter(times, cap_factor=cap)
    assert max(times) * 0.5 <= perimeter <= cap * max(times) + 1e-6


def test_demand_on_circle_integrates_exactly() -> None:
    prof = Profile("a", "m", "data", 2, 100.0, (Phase(25.0, 40.0), Phase(75.0, 0.0)))
    np.testing.assert_allclose(demand_on_circle(prof, 200.0, 8), [40, 0, 0, 0, 40, 0, 0, 0])
    # Bins of 66.7 ms straddle phase edges: each of the first two holds 25 ms at 40 Gbps.
    np.testing.assert_allclose(demand_on_circle(prof, 200.0, 3), [15.0, 15.0, 0.0])
    # Total volume is preserved on any grid.
    for bins in (7, 72, 360):
        assert demand_on_circle(prof, 200.0, bins).mean() * 200.0 == pytest.approx(2 * 25 * 40)


# --- solvers ----------------------------------------------------------------


@pytest.mark.parametrize("solver", ["exact", "fast", "auto"])
def test_two_half_duty_jobs_interleave_perfectly(solver: str) -> None:
    a, b = duty("a", 200.0, 0.5), duty("b", 200.0, 0.5)
    sol = compatibility([a, b], 50.0, 5.0, solver)
    assert sol.score == 1.0
    assert sol.perimeter_ms == 200.0
    assert sol.rotations_deg == {"a": 0.0, "b": 180.0}
    assert sol.shifts_ms == {"a": 0.0, "b": pytest.approx(100.0)}  # half an iteration
    # Without the shift they collide for the whole Up phase: half the time 50 Gbps over.
    assert score_at([a, b], 50.0, {"a": 0.0, "b": 0.0}) == pytest.approx(0.5)


def test_75_percent_duty_jobs_cannot_interleave_matches_brute_force() -> None:
    a, b = duty("a", 100.0, 0.75), duty("b", 100.0, 0.75)
    scores = brute_force_scores([a, b], 50.0, 10.0)
    assert scores.max() < 1.0
    assert scores.max() == pytest.approx(0.5)  # overlap of at least 50% of the circle
    for solver in ("exact", "fast"):
        assert compatibility([a, b], 50.0, 10.0, solver).score == pytest.approx(scores.max())


def test_exact_equals_brute_force_on_three_jobs() -> None:
    profs = [
        duty("a", 120.0, 0.4, 40.0),
        duty("b", 60.0, 0.5, 30.0, 10.0),
        duty("c", 120.0, 0.3, 50.0, 20.0),
    ]
    best = brute_force_scores(profs, 60.0, 20.0).max()
    sol = compatibility(profs, 60.0, 20.0, "exact")
    assert sol.score == pytest.approx(best, abs=1e-9)
    assert score_at(profs, 60.0, sol.rotations_deg, 20.0) == pytest.approx(sol.score, abs=1e-9)


random_profile = st.builds(
    lambda t, f, g, o: (t, f, g, o),
    st.sampled_from([60.0, 80.0, 120.0, 240.0]),
    st.floats(0.1, 0.9),
    st.floats(5.0, 50.0),
    st.floats(0.0, 0.09),
)


@given(st.lists(random_profile, min_size=2, max_size=4), st.integers(0, 71), st.integers(0, 71))
@settings(max_examples=40, deadline=None)
def test_rotating_all_jobs_together_keeps_the_score(
    specs: list[tuple[float, float, float, float]], common: int, seed: int
) -> None:
    profs = [duty(f"j{i}", t, f, g, o * t) for i, (t, f, g, o) in enumerate(specs)]
    rng = np.random.default_rng(seed)
    rots = {p.name: float(rng.integers(0, 72)) * 5.0 for p in profs}
    turned = {k: (v + common * 5.0) % 360 for k, v in rots.items()}
    assert score_at(profs, 50.0, turned) == pytest.approx(score_at(profs, 50.0, rots), abs=1e-9)


def _random_mix(seed: int) -> list[Profile]:
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 5))
    out = []
    for i in range(k):
        t = float(rng.choice([50.0, 100.0, 150.0, 200.0, 300.0]))
        f = float(rng.uniform(0.15, 0.7))
        out.append(
            duty(f"j{i}", t, f, float(rng.uniform(15, 50)), float(rng.uniform(0, 1 - f)) * t)
        )
    return out


def test_fast_solver_within_one_percent_of_exact_on_random_mixes() -> None:
    gaps = []
    for seed in range(40):
        profs = _random_mix(seed)
        problem = discretize(profs, 10.0)
        _, exact_excess = exact_rotations(problem, 50.0)
        rot, fast_excess = fast_rotations(problem, 50.0)
        exact_score = 1 - exact_excess / problem.bins / 50.0
        fast_score = 1 - fast_excess / problem.bins / 50.0
        assert fast_score <= exact_score + 1e-9  # exact is optimal
        gaps.append(exact_score - fast_score)
        # The reported rotations are the ones that reach the reported excess.
        total = sum(np.roll(problem.demands[j], int(r)) for j, r in enumerate(rot))
        assert np.maximum(total - 50.0, 0).sum() == pytest.approx(fast_excess)
    assert max(gaps) <= 0.01


def test_equation5_time_shift() -> None:
    # 90 degrees of a 600 ms circle is 150 ms; a 200 ms job wraps 450 ms to 50 ms.
    assert equation5_shift_ms(90.0, 600.0, 200.0) == pytest.approx(150.0)
    assert equation5_shift_ms(270.0, 600.0, 200.0) == pytest.approx(50.0)
    a, b = duty("a", 100.0, 0.5), duty("b", 200.0, 0.25)
    sol = compatibility([a, b], 50.0, 5.0, "exact")
    for p in (a, b):
        assert sol.shifts_ms[p.name] == pytest.approx(
            sol.rotations_deg[p.name] / 360 * sol.perimeter_ms % p.iteration_ms
        )


def test_shortcuts_score_one_without_shifts() -> None:
    single = compatibility([duty("a", 100.0, 0.9)], 50.0)
    assert (single.score, single.solver, single.shifts_ms) == (1.0, "trivial", {"a": 0.0})
    low = compatibility([duty("a", 100.0, 0.9, 20.0), duty("b", 70.0, 0.9, 25.0)], 50.0)
    assert (low.score, low.solver) == (1.0, "trivial")
    assert set(low.shifts_ms.values()) == {0.0}


def test_bad_inputs_are_user_errors() -> None:
    a, b = duty("a", 100.0, 0.5), duty("b", 100.0, 0.5)
    with pytest.raises(UserInputError, match="Did you mean 'exact'"):
        compatibility([a, b], 50.0, solver="exakt")
    with pytest.raises(UserInputError, match="does not divide 360"):
        compatibility([a, b], 50.0, precision_deg=7.0)
    with pytest.raises(UserInputError, match="appears twice"):
        compatibility([a, replace(b, name="a")], 50.0)
    with pytest.raises(UserInputError, match="capacity"):
        compatibility([a, b], 0.0)


def test_auto_picks_fast_for_large_search_spaces() -> None:
    profs = [duty(f"j{i}", 100.0, 0.3, 40.0) for i in range(5)]
    assert compatibility(profs, 50.0, 5.0, "auto").solver == "fast"  # 72^4 combinations
    assert compatibility(profs[:3], 50.0, 5.0, "auto").solver == "exact"


@pytest.mark.parametrize("gbps", [1e-300, 1e-4, 1e300, float("nan")])
def test_a_link_capacity_outside_physical_links_is_refused(
    gbps: float, capsys: pytest.CaptureFixture[str]
) -> None:
    """`compat --capacity-gbps 1e-300` was accepted and scored every pair 0."""
    from emulation.cli import main
    from scheduler.cassini.compatibility import MAX_CAPACITY_GBPS, MIN_CAPACITY_GBPS

    half = Profile("a", "m", "data", 2, 100.0, (Phase(50.0, 50.0), Phase(50.0, 0.0)))
    with pytest.raises(UserInputError, match=r"link capacity must be .* Gbps \(our choice: "):
        compatibility([half, replace(half, name="b")], gbps)
    try:
        code = main(["compat", "--jobs", "vgg16,resnet50", "--capacity-gbps", str(gbps)])
    except SystemExit as stop:  # argparse refusing the value itself
        code = stop.code
    assert code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--capacity-gbps" in last and "Traceback" not in last
    if gbps == gbps:  # argparse refuses NaN itself, as not finite
        assert "0.001" in last and "100000" in last  # the bounds, in the message
    assert (MIN_CAPACITY_GBPS, MAX_CAPACITY_GBPS) == (1e-3, 1e5)
