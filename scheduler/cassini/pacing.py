"""How does one group of jobs coupled through shared links run: paced on which circle, or free?

Each pacing option (`scheduler.cassini.periods.pacing_options`: a circle, each
job a whole number of iterations on it) is solved link by link, played out
until its jobs hold their grids (`scheduler.cassini.holding`), and weighed
against running free; the group keeps the best option that pays for itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from scheduler.cassini.compatibility import (
    LinkSolution,
    bins_for_precision,
    compatibility,
    free_running_score,
)
from scheduler.cassini.holding import HOLD_TOLERANCE, free_slowdown, grid_slip, holding_factor
from scheduler.cassini.periods import MAX_STRETCH, Circle, paced_profile, pacing_options
from scheduler.workloads.types import Profile
from scheduler.workloads.up_slack import with_long_up
from topologies.model import DirectedLink

# (our choice) Pacing must beat running free by this much, in links' worth of
# oversubscription (1 = one link always oversubscribed by its capacity).
FREE_RUNNING_MARGIN = 0.01

# A link's solution depends only on the multiset of (profile content, capacity);
# the key orders the profiles so identical links map to one entry.
LinkKey = tuple[tuple[tuple[float, tuple[tuple[float, float], ...]], ...], float]


def _content(profile: Profile) -> tuple[float, tuple[tuple[float, float], ...]]:
    return (profile.iteration_ms, tuple((p.duration_ms, p.gbps) for p in profile.phases))


def solve_link(
    jobs: Sequence[str],
    profiles: Mapping[str, Profile],
    capacity: float,
    precision_deg: float,
    solver: str,
    cache: dict[LinkKey, LinkSolution],
) -> tuple[LinkSolution, dict[str, float]]:
    """Solve (or reuse) one link; returns the solution and its shifts keyed by job name."""
    ordered = sorted(jobs, key=lambda j: (_content(profiles[j]), j))
    contents = tuple(_content(profiles[j]) for j in ordered)
    key: LinkKey = (contents, capacity)
    solution = cache.get(key)
    if solution is None:
        slots = [replace(profiles[j], name=f"#{i}") for i, j in enumerate(ordered)]
        solution = compatibility(slots, capacity, precision_deg, solver)
        cache[key] = solution
    return solution, {job: solution.shifts_ms[f"#{i}"] for i, job in enumerate(ordered)}


@dataclass(frozen=True)
class GroupPlan:
    """How one group of coupled jobs runs: its links' scores, shifts and paced periods.

    `value` is minus its cost: oversubscription (1 - score) summed over its
    links plus idling fractions summed over its jobs. A group left to run
    free has no shifts, no periods and no circle, and its links' free-running
    scores. `circle`: the group's circle (each job's iterations on it, its
    ratio) when paced.
    """

    value: float
    link_scores: dict[DirectedLink, float]
    link_shifts: dict[DirectedLink, dict[str, float]]
    periods_ms: dict[str, float]
    half_bin_ms: float
    circle: Circle = field(default_factory=lambda: Circle(0.0, {}))


@dataclass(frozen=True, eq=False)
class GroupProblem:
    """One group of coupled jobs to plan: its shared links (each with its jobs and
    capacity), the jobs' profiles as planned, and the solver's settings and cache."""

    links: Mapping[DirectedLink, tuple[str, ...]]
    profiles: Mapping[str, Profile]
    capacities: Mapping[DirectedLink, float]
    precision_deg: float
    solver: str
    cache: dict[LinkKey, LinkSolution]

    @property
    def own_ms(self) -> dict[str, float]:
        """Each job's own iteration time, as planned."""
        jobs = sorted({j for group in self.links.values() for j in group})
        return {j: self.profiles[j].iteration_ms for j in jobs}


def group_problem(
    links: Mapping[DirectedLink, tuple[str, ...]],
    profiles: Mapping[str, Profile],
    capacities: Mapping[DirectedLink, float],
    precision_deg: float,
    solver: str,
    cache: dict[LinkKey, LinkSolution],
    pace: bool,
) -> GroupProblem:
    """The group as Cassini plans it. Paced, a measured job is planned with its Up phase
    at its p95 (`with_long_up`), so that the grid has room for the Up phases that run
    long."""
    planned = {j: with_long_up(p) for j, p in profiles.items()} if pace else dict(profiles)
    return GroupProblem(links, planned, capacities, precision_deg, solver, cache)


def plan_group(
    links: Mapping[DirectedLink, tuple[str, ...]],
    profiles: Mapping[str, Profile],
    capacities: Mapping[DirectedLink, float],
    precision_deg: float,
    solver: str,
    cache: dict[LinkKey, LinkSolution],
    pace: bool,
) -> GroupPlan:
    """The best way to run one group: paced on a circle and shifted, or free-running.

    (our choice) With `pace`, every circle `pacing_options` offers is costed as
    its links' oversubscription (1 - score, summed) plus its jobs' idling
    fractions (summed), and must be one its jobs can hold (`held_plan`, which
    may lengthen the circle). A circle that holds at the jobs' own pace is kept
    when its value beats the links' free-running expectation
    (`free_running_score`) by FREE_RUNNING_MARGIN; a stretched one (a job
    idling for its ratio, or the circle lengthened to hold) only when the fluid
    expects the jobs faster on it than free (`free_slowdown`). The kept circle
    of best value wins; with none, the group runs unaligned, without shifts, and loses
    no time idling. Without `pace` the jobs keep their own iteration times,
    rounded onto each circle (the paper), and are always shifted. Paced,
    measured Up phases are planned at their p95 (`group_problem`).
    """
    problem = group_problem(links, profiles, capacities, precision_deg, solver, cache, pace)
    if not pace:
        return best_option(problem, pace)
    planned, own = problem.profiles, problem.own_ms
    free_scores = {
        link: free_running_score([planned[j] for j in group], capacities[link])
        for link, group in links.items()
    }
    free_plan = GroupPlan(-sum(1.0 - s for s in free_scores.values()), free_scores, {}, {}, 0.0)
    free_slow: list[float] = []  # computed once, when a circle must be lengthened

    def free_slowdown_mean() -> float:
        # Plain means: over the group's jobs, and over its links whatever jobs each
        # carries (our choice).
        if not free_slow:
            free_slow.append(float(np.mean([
                free_slowdown([planned[j] for j in group], capacities[link])
                for link, group in links.items()
            ])))  # fmt: skip
        return free_slow[0]

    kept: list[GroupPlan] = []
    for circle in pacing_options(own, list(links.values())):
        plan = plan_at(problem, circle.periods_ms, circle)
        stretch = circle.stretch(own)
        if max(stretch.values()) <= 1.0 + 1e-9 and holds_grid(problem, plan):
            # At the jobs' own pace and held: nothing idles, the value rule decides.
            if plan.value > free_plan.value + FREE_RUNNING_MARGIN:
                kept.append(plan)
            continue
        # (our choice) A stretched circle (a job idling for its ratio, or the circle
        # lengthened to hold) is kept only when the jobs run faster on it than free:
        # oversubscription against idling, as the value rule weighs them, prices neither
        # in time. So it need not grow past the point where its mean stretch would lose
        # to running free, nor any job past MAX_STRETCH.
        mean = float(np.mean(list(stretch.values())))
        limit = min(MAX_STRETCH / max(stretch.values()),
                    (free_slowdown_mean() - FREE_RUNNING_MARGIN) / mean)  # fmt: skip
        if limit < 1.0:
            continue
        held = held_plan(problem, plan, limit)
        if held is not None:
            kept.append(held)
    # (our choice) No circle holds and pays for itself: paced, the jobs would overrun
    # their slots (the agents skip one each time) or idle more than running free costs.
    return max(kept, key=lambda p: p.value, default=free_plan)


def best_option(problem: GroupProblem, pace: bool) -> GroupPlan:
    """The best pacing option of one group by its value (oversubscription plus idle), on
    its own circle: before `held_plan` lengthens it and before the free-running test."""
    own = problem.own_ms
    if not pace:
        return plan_at(problem, own)
    plans = [plan_at(problem, c.periods_ms, c) for c in pacing_options(own, problem.links.values())]
    best = plans[0]
    for plan in plans[1:]:
        if plan.value > best.value + 1e-12:
            best = plan
    return best


def plan_at(
    problem: GroupProblem, periods: Mapping[str, float], circle: Circle | None = None
) -> GroupPlan:
    """One group paced at `periods` (those of `circle`, when given): every link solved,
    valued as its links' oversubscription plus its jobs' idle against their own
    iteration times."""
    profiles = problem.profiles
    paced = {j: paced_profile(profiles[j], q) for j, q in periods.items()}
    scores: dict[DirectedLink, float] = {}
    shifts: dict[DirectedLink, dict[str, float]] = {}
    half_bin_ms = 0.0
    for link, group in problem.links.items():
        solution, shifts[link] = solve_link(
            group, paced, problem.capacities[link], problem.precision_deg, problem.solver,
            problem.cache,
        )  # fmt: skip
        scores[link] = solution.score
        half_bin_ms = max(
            half_bin_ms, solution.perimeter_ms / bins_for_precision(problem.precision_deg) / 2
        )
    idle = sum(q / profiles[j].iteration_ms - 1.0 for j, q in periods.items())
    value = -sum(1.0 - s for s in scores.values()) - idle
    return GroupPlan(value, scores, shifts, dict(periods), half_bin_ms, circle or Circle(0.0, {}))


def holds_grid(problem: GroupProblem, at: GroupPlan) -> bool:
    """Every job of the group within HOLD_TOLERANCE of its grid at `at`'s periods and
    shifts (`holding.grid_slip`). (our choice) Each link of the group is simulated on
    its own: a job crossing two shared links is late by the worse of them."""
    return all(
        max(grid_slip(
            [problem.profiles[j] for j in group],
            [at.periods_ms[j] for j in group],
            [at.link_shifts[link].get(j, 0.0) for j in group],
            problem.capacities[link],
            give_up=HOLD_TOLERANCE,
        )) <= HOLD_TOLERANCE
        for link, group in problem.links.items()
    )  # fmt: skip


def held_plan(
    problem: GroupProblem, plan: GroupPlan, max_stretch: float = MAX_STRETCH
) -> GroupPlan | None:
    """`plan` with its circle lengthened (its ratios kept, so it stays exact) until every
    job holds its grid with its Up phases meeting the others' (`holds_grid`), its shifts
    solved again there and the idle charged; `plan` itself when it holds as planned;
    None when no lengthening up to `max_stretch` holds."""
    tried: dict[float, GroupPlan] = {1.0: plan}

    def holds(factor: float) -> bool:
        if factor not in tried:
            circle = plan.circle.scaled(factor)
            periods = {j: q * factor for j, q in plan.periods_ms.items()}
            tried[factor] = plan_at(problem, periods, circle)
        return holds_grid(problem, tried[factor])

    factor = holding_factor(holds, max_stretch)
    return None if factor is None else tried[factor]
