"""Which period must each agent keep so that the unified circles stay true?

A link's unified circle assumes its jobs repeat with periods whose LCM is the
perimeter. Real iteration times are not commensurate (DLRM 121.5 ms next to
BERT 207.3 ms): rounded onto one circle they look interleaved, but left at
their own pace the jobs slide against each other by the rounding error every
iteration and the time-shifts stop meaning anything within a few seconds.

(our choice) The agents therefore pace: job j starts iterations on a grid of
period Q_j >= T_j (it idles Q_j - T_j per iteration) where every Q_j of one
group of jobs coupled through shared links is a whole multiple of one quantum
q, so each link's perimeter LCM(Q_j) is exact. Among the quanta that keep every
link's perimeter within `cap_factor` x its longest period, `pacing_options`
offers the least-idling one and a few more harmonic ones; the caller
(`scheduler.cassini.plans.plan_group`) scores them. The idling is a real cost and
is charged in the simulator (iterations are measured against the unpaced
profile time).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace

import networkx as nx

from scheduler.workloads.types import Phase, Profile

_REL_TOL = 1e-9


def coupled_groups(links: Iterable[Collection[str]]) -> list[set[str]]:
    """Groups of jobs joined through shared links."""
    graph = nx.Graph()
    for jobs in links:
        ordered = sorted(jobs)
        graph.add_nodes_from(ordered)
        graph.add_edges_from(itertools.pairwise(ordered))
    return sorted((set(c) for c in nx.connected_components(graph)), key=min)


def _units(period_ms: float, quantum_ms: float) -> int:
    return max(1, math.ceil(period_ms / quantum_ms - _REL_TOL))


def _feasible_units(
    iteration_ms: Mapping[str, float],
    links: list[tuple[str, ...]],
    cap_factor: float,
    max_units: int,
) -> dict[tuple[int, ...], tuple[float, float, int]]:
    """Unit counts per job (sorted by name) -> (quantum, worst idling, largest link LCM).

    Quanta come from T_j / k for every job j and k <= max_units; a unit
    assignment is kept with its largest quantum (the least idling for it).
    """
    jobs = sorted({j for link in links for j in link})
    quanta = sorted({iteration_ms[j] / k for j in jobs for k in range(1, max_units + 1)})
    found: dict[tuple[int, ...], tuple[float, float, int]] = {}
    for q in reversed(quanta):
        units = {j: _units(iteration_ms[j], q) for j in jobs}
        key = tuple(units[j] for j in jobs)
        if key in found:
            continue
        lcms = [math.lcm(*(units[j] for j in link)) for link in links]
        if any(
            lcm * q > cap_factor * max(units[j] * q for j in link) * (1 + _REL_TOL)
            for lcm, link in zip(lcms, links, strict=True)
        ):
            continue
        worst = max(units[j] * q / iteration_ms[j] - 1.0 for j in jobs)
        found[key] = (q, worst, max(lcms))
    return found


def pacing_options(
    iteration_ms: Mapping[str, float],
    links: Iterable[Collection[str]],
    cap_factor: float = 8.0,
    max_units: int = 16,
    max_idle: float = 0.15,
    count: int = 3,
) -> list[dict[str, float]]:
    """A few period assignments for one group of coupled jobs, least idling first.

    The least-idling grid often puts nearby periods in a ratio like 9:8, on
    which two jobs cannot stay interleaved; a more harmonic grid (1:1, 1:2)
    idles more but may interleave far better. The caller scores each option
    (our choice: up to `count`, harmonic ones idling at most `max_idle`).
    """
    shared = [tuple(sorted(set(jobs))) for jobs in links if len(set(jobs)) > 1]
    jobs = sorted({j for link in shared for j in link})
    if not jobs:
        return [{}]
    found = _feasible_units(iteration_ms, shared, cap_factor, max_units)
    # q = the longest period always fits (every unit count is 1), so found is not empty.
    ranked = sorted(found.items(), key=lambda kv: (round(kv[1][1], 12), -kv[1][0]))
    harmonic = sorted(
        (kv for kv in ranked[1:] if kv[1][1] <= max_idle),
        key=lambda kv: (kv[1][2], round(kv[1][1], 12)),
    )
    options: dict[tuple[float, ...], dict[str, float]] = {}
    for key, (q, _, _) in [ranked[0], *harmonic]:
        periods = {j: units * q for j, units in zip(jobs, key, strict=True)}
        options.setdefault(tuple(round(periods[j], 6) for j in jobs), periods)
        if len(options) == count:
            break
    return list(options.values())


def paced_profile(profile: Profile, period_ms: float) -> Profile:
    """The profile as the network sees it when the agent idles up to `period_ms`."""
    idle = period_ms - profile.iteration_ms
    if idle <= _REL_TOL * profile.iteration_ms:
        return profile
    return replace(profile, iteration_ms=period_ms, phases=(*profile.phases, Phase(idle, 0.0)))
