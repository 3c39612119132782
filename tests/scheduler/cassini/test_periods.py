"""Pacing: periods whose LCM is exact, the free-running expectation, and agents that keep them."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest

from scheduler.baselines.base import ProfileBook
from scheduler.cassini.circle import unified_perimeter
from scheduler.cassini.compatibility import compatibility, free_running_score
from scheduler.cassini.periods import MAX_RATIO, MAX_STRETCH, paced_profile, pacing_options
from scheduler.simulator import SimSettings, simulate
from scheduler.workloads.traces import TraceJob
from scheduler.workloads.types import Phase, Profile
from tests.helpers.periods import paced_periods
from tests.helpers.schedulers import FixedScheduler
from topologies.generators import leaf_spine


def _profile(name: str, down_ms: float, up_ms: float, gbps: float = 50.0) -> Profile:
    return Profile(
        name, name, "data", 2, down_ms + up_ms, (Phase(down_ms, 0.0), Phase(up_ms, gbps))
    )


def test_paced_periods_are_commensurate_and_never_shorter() -> None:
    own = {"dlrm": 121.45, "bert": 207.3, "vgg19": 268.3, "resnet": 96.8}
    links = [("dlrm", "bert"), ("bert", "vgg19"), ("resnet", "dlrm")]
    periods = paced_periods(own, links)
    assert set(periods) == set(own)
    for job, q in periods.items():
        assert own[job] <= q <= own[job] * MAX_STRETCH
    # each link's circle is exact, and no job runs more than MAX_RATIO iterations of it
    for link in links:
        perimeter, approximated = unified_perimeter([periods[j] for j in link])
        assert not approximated
        for j in link:
            assert perimeter / periods[j] == pytest.approx(round(perimeter / periods[j]))
            assert round(perimeter / periods[j]) <= MAX_RATIO


def test_unlinked_groups_are_paced_independently() -> None:
    own = {"a": 100.0, "b": 100.0, "c": 133.0, "d": 133.0}
    assert paced_periods(own, [("a", "b"), ("c", "d")]) == own  # nothing to idle for
    assert paced_periods(own, [("a",), ("c", "d")]) == {"c": 133.0, "d": 133.0}


def test_periods_of_200_and_300_ms_share_one_circle_of_600_unstretched() -> None:
    least = pacing_options({"a": 200.0, "b": 300.0}, [("a", "b")])[0]
    assert least.perimeter_ms == pytest.approx(600.0)
    assert dict(least.iterations) == {"a": 3, "b": 2}
    assert least.periods_ms == {"a": pytest.approx(200.0), "b": pytest.approx(300.0)}


def test_periods_of_197_and_253_ms_share_a_circle_of_four_and_three_iterations() -> None:
    """One stretch for both cannot make 197 and 253 commensurate; a stretch of its own
    for the longer job can: 4 x 197 = 788 = 3 x 262.7, VGG19 stretched 3.8%."""
    own = {"bert": 197.0, "vgg19": 253.0}
    options = pacing_options(own, [("bert", "vgg19")])
    least = options[0]
    assert dict(least.iterations) == {"bert": 4, "vgg19": 3}
    assert least.perimeter_ms == pytest.approx(788.0)
    stretch = least.stretch(own)
    assert stretch["bert"] == pytest.approx(1.0)
    assert stretch["vgg19"] == pytest.approx(788.0 / 3 / 253.0) == pytest.approx(1.038, abs=1e-3)
    # more harmonic circles are offered after it, least idling first, none past the bounds
    assert [dict(c.iterations) for c in options] == [
        {"bert": 4, "vgg19": 3}, {"bert": 3, "vgg19": 2}, {"bert": 1, "vgg19": 1}
    ]
    idles = [sum(c.stretch(own).values()) for c in options]
    assert idles == sorted(idles) and max(max(c.stretch(own).values()) for c in options) <= 1.5


def test_a_ratio_past_the_bound_is_not_offered() -> None:
    # 211.2 against 188.6 is 9:8 at 0.4% idle, but 9 iterations of one link's circle
    # leave gaps too short to take turns in: the least idling circle offered is 1:1.
    options = pacing_options({"a": 211.2, "b": 188.6}, [("a", "b")])
    assert dict(options[0].iterations) == {"a": 1, "b": 1}
    assert options[0].periods_ms == {"a": pytest.approx(211.2), "b": pytest.approx(211.2)}
    assert all(max(c.iterations.values()) <= MAX_RATIO for c in options)


def test_paced_profile_idles_at_the_end() -> None:
    p = _profile("x", 80.0, 100.0)
    paced = paced_profile(p, 200.0)
    assert paced.iteration_ms == 200.0
    assert paced.phases[-1] == Phase(20.0, 0.0)
    assert paced_profile(p, 180.0) is p


def _brute_force_free_running(profiles: list[Profile], capacity: float, seed: int) -> float:
    """Average excess over time with random, independent phases (incommensurate periods)."""
    rng = np.random.default_rng(seed)
    t = rng.uniform(0.0, 1e6, 200_000)
    total = np.zeros_like(t)
    for p in profiles:
        edges = np.cumsum([ph.duration_ms for ph in p.phases])
        levels = np.array([ph.gbps for ph in p.phases])
        pos = (t + rng.uniform(0.0, p.iteration_ms)) % p.iteration_ms
        total += levels[np.searchsorted(edges, pos, side="right").clip(0, len(levels) - 1)]
    return 1.0 - float(np.maximum(total - capacity, 0.0).mean()) / capacity


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_free_running_score_matches_a_brute_force_average(seed: int) -> None:
    rng = np.random.default_rng(seed)
    profiles = [
        _profile(f"j{i}", float(rng.uniform(20, 150)), float(rng.uniform(20, 150)), gbps)
        for i, gbps in enumerate([50.0, 40.0, 30.0])
    ]
    exact = free_running_score(profiles, 50.0)
    assert exact == pytest.approx(_brute_force_free_running(profiles, 50.0, seed), abs=0.01)
    # the best alignment is never worse than running free
    same = [paced_profile(p, max(q.iteration_ms for q in profiles)) for p in profiles]
    assert compatibility(same, 50.0).score >= free_running_score(same, 50.0) - 1e-9


class _BookByModel(ProfileBook):
    def __init__(self, profiles: Mapping[str, Profile]) -> None:
        self.profiles = profiles
        self.models = {}
        self._cache = {}

    def get(self, model: str, workers: int, batch_size: int | None = None) -> Profile:
        return self.profiles[model]


def test_agents_that_pace_stay_interleaved_and_free_ones_drift_into_each_other() -> None:
    # a: 100 ms compute + 100 ms at 50 Gbps; b: 80 + 100, so b's own period is 180 ms.
    book = _BookByModel({"a": _profile("a", 100.0, 100.0), "b": _profile("b", 80.0, 100.0)})
    topo = leaf_spine(2, 1, 2)  # both rings cross leaf1 <-> spine1 <-> leaf2
    trace = [TraceJob("a", "a", 2, 60), TraceJob("b", "b", 2, 60)]
    # a sends in [100, 200) + 200k; b waits 120 ms, computes to 200, sends in [200, 300) + 200k
    shifts = {"a": 0.0, "b": 120.0}
    exact = SimSettings(fast_forward=False)
    placement = {"a": ("s01", "s03"), "b": ("s02", "s04")}
    paced_agents = FixedScheduler(placement, shifts, {"a": 200.0, "b": 200.0})
    paced = simulate(trace, topo, paced_agents, exact, book=book)
    assert paced.links.oversub_ms.sum() == pytest.approx(0.0)
    a, b = paced.jobs
    # b idles 20 ms per iteration to keep the grid
    assert a.iteration_ms[1:] == pytest.approx(np.full(59, 200.0))
    assert b.iteration_ms[1:] == pytest.approx(np.full(59, 200.0))
    # the agents moved the pair by one offset so the first alignment costs
    # 80 ms of waiting in all (a waits 80, b none) rather than b's 120
    assert a.iteration_ms[0] + b.iteration_ms[0] == pytest.approx(200.0 + 180.0 + 80.0)
    # the same shifts at the jobs' own periods: b gains 20 ms per iteration on a
    # and slides into a's sending phase within a few iterations
    own_agents = FixedScheduler(placement, shifts, {"a": 200.0, "b": 180.0})
    own = simulate(trace, topo, own_agents, exact, book=book)
    assert own.links.oversub_ms.sum() > 1000.0
    assert max(j.iteration_ms.max() for j in own.jobs) > 200.0


def test_the_plan_names_each_jobs_ratio_stretch_and_circle() -> None:
    """200 and 300 ms, Up 40 and 50 ms at the whole link: on their 600 ms circle (3 and
    2 iterations) the Up phases meet at six offsets 100 ms apart, room for 40 + 50."""
    from scheduler.cassini.plans import plan_link

    a, b = _profile("a", 160.0, 40.0), _profile("b", 250.0, 50.0)
    doc = plan_link([a, b], 50.0, 5.0, "auto", pace=True).to_json()
    assert doc["plan"] == "paced" and doc["plan_score"] == pytest.approx(1.0)
    assert doc["perimeter_ms"] == pytest.approx(600.0)
    assert doc["ratios"] == {"a": 3, "b": 2}
    assert doc["stretch"] == {"a": 1.0, "b": 1.0}
    assert doc["periods_ms"] == {"a": 200.0, "b": 300.0}
