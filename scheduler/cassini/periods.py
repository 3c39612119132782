"""Which period must each agent keep so that the unified circles stay true?

A link's unified circle assumes its jobs repeat with periods whose LCM is the
perimeter. Real iteration times are not commensurate (DLRM 121.5 ms next to
BERT 207.3 ms): rounded onto one circle they look interleaved, but left at
their own pace the jobs slide against each other by the rounding error every
iteration and the time-shifts stop meaning anything within a few seconds.

(our choice) The agents therefore pace: job j starts iterations on a grid of
period Q_j >= T_j (it idles Q_j - T_j per iteration). The jobs of one group
coupled through shared links share one `Circle`: a perimeter P and, per job,
a whole number n_j of iterations on it (its ratio), so Q_j = P / n_j and
every link's perimeter, the LCM of its jobs' periods, is exact. Each job is
stretched on its own, as little as its ratio needs (BERT 197 ms and VGG19
253 ms: four and three iterations of a 788 ms circle, VGG19 stretched to
262.7 ms), where one stretch for the whole group could never make 197 and
253 commensurate. The paper bounds a circle by its angle precision; we bound
it by the ratios: on each shared link no job runs more than MAX_RATIO
iterations of the link's circle, and no job is stretched past MAX_STRETCH.
`pacing_options` lists the circles within those bounds, least idling first;
the caller (`scheduler.cassini.pacing.plan_group`) scores them and keeps one
its jobs can hold. The idling is a real cost and is charged in the simulator
(iterations are measured against the unpaced profile time).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

import networkx as nx

from scheduler.cassini.holding import MAX_STRETCH
from scheduler.workloads.types import Phase, Profile

_REL_TOL = 1e-9
# (our choice) At most 4 iterations of one job on a shared link's circle (ratios up to
# 4:3): two jobs on a circle of n and m iterations meet at n x m relative offsets, so a
# larger ratio leaves their Up phases gaps of P / (n m), too short to take turns in.
MAX_RATIO = 4
# (our choice) At most 16 iterations of one job on its group's circle: the circle of a
# group chaining several links is the LCM of them all.
MAX_ITERATIONS = 16
# No job idles past half its iteration: the bound `holding.MAX_STRETCH` also puts on the
# stretch that makes a grid hold (one figure for both, our choice).
# (our choice) Circles offered per group, least idling first: each is solved and played
# out, and the one with least idling that cannot interleave rarely beats a few more.
OPTIONS = 6


def coupled_groups(links: Iterable[Collection[str]]) -> list[set[str]]:
    """Groups of jobs joined through shared links."""
    graph = nx.Graph()
    for jobs in links:
        ordered = sorted(jobs)
        graph.add_nodes_from(ordered)
        graph.add_edges_from(itertools.pairwise(ordered))
    return sorted((set(c) for c in nx.connected_components(graph)), key=min)


@dataclass(frozen=True)
class Circle:
    """One group's unified circle: its perimeter and each job's iterations on it.

    >>> c = Circle(600.0, {"a": 3, "b": 2})
    >>> c.periods_ms, c.stretch({"a": 200.0, "b": 290.0})["b"] > 1.03
    ({'a': 200.0, 'b': 300.0}, True)
    """

    perimeter_ms: float
    iterations: Mapping[str, int]

    @property
    def periods_ms(self) -> dict[str, float]:
        """Each job's period: the perimeter over its iterations."""
        return {j: self.perimeter_ms / n for j, n in self.iterations.items()}

    def stretch(self, iteration_ms: Mapping[str, float]) -> dict[str, float]:
        """Each job's period over its own iteration time (1 = no idling)."""
        return {j: q / iteration_ms[j] for j, q in self.periods_ms.items()}

    def scaled(self, factor: float) -> Circle:
        """The same ratios on a perimeter `factor` times longer."""
        return Circle(self.perimeter_ms * factor, dict(self.iterations))


def _fits_links(iterations: Mapping[str, int], links: Sequence[tuple[str, ...]]) -> bool:
    """No job runs more than MAX_RATIO iterations of any link's circle (its jobs
    assigned so far)."""
    for link in links:
        counts = [iterations[j] for j in link if j in iterations]
        if counts and max(counts) // math.gcd(*counts) > MAX_RATIO:
            return False
    return True


def _assignments(
    perimeter_ms: float,
    iteration_ms: Mapping[str, float],
    jobs: Sequence[str],
    links: Sequence[tuple[str, ...]],
    max_stretch: float,
) -> Iterator[dict[str, int]]:
    """Iterations per job on a circle of `perimeter_ms` within the bounds, each job
    trying its least stretch first (depth first, so the first is the least idling)."""
    choices = []
    for j in jobs:
        most = min(MAX_ITERATIONS, math.floor(perimeter_ms / iteration_ms[j] * (1 + _REL_TOL)))
        fit = [n for n in range(most, 0, -1)
               if perimeter_ms / n <= max_stretch * iteration_ms[j] * (1 + _REL_TOL)]  # fmt: skip
        if not fit:
            return
        choices.append(fit)

    def extend(k: int, chosen: dict[str, int]) -> Iterator[dict[str, int]]:
        if k == len(jobs):
            yield dict(chosen)
            return
        for n in choices[k]:
            chosen[jobs[k]] = n
            if _fits_links(chosen, links):
                yield from extend(k + 1, chosen)
            del chosen[jobs[k]]

    yield from extend(0, {})


def pacing_options(
    iteration_ms: Mapping[str, float],
    links: Iterable[Collection[str]],
    max_stretch: float = MAX_STRETCH,
    count: int = OPTIONS,
) -> list[Circle]:
    """The circles one group of coupled jobs may be paced on, least idling first.

    Every circle worth offering has a job at its own pace (a longer perimeter only
    idles more), so the perimeters tried are n x T_j, n <= MAX_ITERATIONS; on each
    the least idling ratios within the bounds are kept (our choice).

    >>> [(c.perimeter_ms, dict(c.iterations)) for c in pacing_options(
    ...     {"a": 200.0, "b": 300.0}, [("a", "b")], count=2)]
    [(600.0, {'a': 3, 'b': 2}), (900.0, {'a': 4, 'b': 3})]
    """
    shared = [tuple(sorted(set(jobs))) for jobs in links if len(set(jobs)) > 1]
    jobs = sorted({j for link in shared for j in link})
    if not jobs:
        return [Circle(0.0, {})]
    perimeters = sorted({round(n * iteration_ms[j], 9)
                         for j in jobs for n in range(1, MAX_ITERATIONS + 1)})  # fmt: skip
    found: dict[tuple[int, ...], tuple[float, Circle]] = {}
    for perimeter in perimeters:
        first = next(_assignments(perimeter, iteration_ms, jobs, shared, max_stretch), None)
        if first is None:
            continue
        common = math.gcd(*first.values())
        circle = Circle(perimeter / common, {j: n // common for j, n in first.items()})
        key = tuple(circle.iterations[j] for j in jobs)
        idle = sum(circle.stretch(iteration_ms).values()) - len(jobs)
        if key not in found or idle < found[key][0] - _REL_TOL:
            found[key] = (idle, circle)
    ranked = sorted(found.values(), key=lambda kv: (round(kv[0], 9), kv[1].perimeter_ms))
    return [circle for _, circle in ranked[:count]]


def paced_profile(profile: Profile, period_ms: float) -> Profile:
    """The profile as the network sees it when the agent idles up to `period_ms`."""
    idle = period_ms - profile.iteration_ms
    if idle <= _REL_TOL * profile.iteration_ms:
        return profile
    return replace(profile, iteration_ms=period_ms, phases=(*profile.phases, Phase(idle, 0.0)))
