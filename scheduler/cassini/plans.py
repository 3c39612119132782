"""Which of the base scheduler's placements should run, and with what time-shifts? (Algorithm 2)

For every candidate placement: route each job, find the links carrying more
than one job, solve each such link's compatibility, combine the per-link
shifts into one shift per job through the affinity graph, and score the
candidate. The best valid candidate wins; ties go to the lower index.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from scheduler.cassini.affinity import (
    ACYCLIC,
    INCONSISTENT_CYCLE,
    build_affinity_graph,
    find_cycle,
    jobs_per_link,
    link_id,
    unique_shifts,
)
from scheduler.cassini.compatibility import (
    SOLVERS,
    LinkSolution,
    bins_for_precision,
    compatibility,
    free_running_score,
)
from scheduler.cassini.pacing import LinkKey, plan_group
from scheduler.cassini.periods import coupled_groups, paced_profile
from scheduler.workloads.traffic import JobRouter
from scheduler.workloads.types import Placement, Profile, Schedule
from topologies.errors import UserInputError, did_you_mean
from topologies.model import DirectedLink

# How candidates are ranked. "total" (our choice, default): least oversubscription
# summed over shared links plus pacing idle summed over jobs. The paper's "mean"
# of link scores rewards a placement for every extra shared link that can never
# be oversubscribed (each scores 1), so it favours spreading traffic out; "min"
# and "p10" (our choice) look at the worst links.
AGGREGATES = ("total", "mean", "min", "p10")
# "paper": any cycle in the affinity graph discards the candidate (Theorem 1);
# "consistent" (our choice, default): only cycles whose shifts disagree do.
CYCLE_RULES = ("consistent", "paper")


@dataclass(frozen=True)
class CandidateResult:
    """One placement's evaluation. `discarded` says why it cannot be used, if so.

    `score` is the aggregate of the link scores (the mean, the paper's, when
    ranking by "total"); `value` is what candidates are ranked by.
    """

    index: int
    placement: Mapping[str, tuple[str, ...]]
    score: float
    link_scores: Mapping[str, float]
    discarded: str | None
    shifts_ms: Mapping[str, float]
    rule: str = "acyclic"
    periods_ms: Mapping[str, float] = field(default_factory=dict)
    idle: float = 0.0  # fraction of their time paced jobs idle, summed over jobs
    # Jobs whose shifts are relative to each other (one affinity component each).
    groups: tuple[tuple[str, ...], ...] = ()
    value: float = 0.0
    # Per paced job, its group's circle: the perimeter, and its iterations on it (ratio).
    circles_ms: Mapping[str, float] = field(default_factory=dict)
    ratios: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class CassiniDecision:
    """The chosen candidate, the schedule handed to the agents, and every candidate's result.

    `fallback` is True when every candidate was discarded and the best-scoring
    one was used anyway (its shifts then satisfy a spanning tree of links).
    """

    best: CandidateResult
    schedule: Schedule
    candidates: tuple[CandidateResult, ...]
    fallback: bool = False


def _aggregate(scores: Sequence[float], how: str) -> float:
    """Candidate score from its shared links: mean (the paper), or min / p10 (our choice)."""
    if not scores:
        return 1.0
    if how in ("mean", "total"):
        return float(np.mean(scores))
    if how == "min":
        return float(min(scores))
    return float(np.percentile(scores, 10))


# What each plan of one link means, for people (`LinkPlan.plan` is the first word).
LINK_PLANS = {
    "paced": "paced",
    "free": "free (no schedule beats running unaligned by enough to pay for pacing)",
    "unpaced": "unpaced (the paper: own iteration times rounded onto the circle)",
}


@dataclass(frozen=True)
class LinkPlan:
    """How jobs sharing one link run: `plan` (a key of LINK_PLANS), the periods
    the agents keep, the link's solution at those periods (`best`: the best
    shifts and their score) and what the plan applies (`solution`).

    A free plan applies no shift: its `solution` holds the zeros that run, and
    what it can expect is `free_running_score` (the jobs are not aligned, so
    zero shifts are not held either); `best` keeps the shifts it declined.
    """

    plan: str
    solution: LinkSolution
    free_running_score: float
    periods_ms: dict[str, float]
    best: LinkSolution
    own_ms: dict[str, float] = field(default_factory=dict)  # each job's own iteration time

    @property
    def ratios(self) -> dict[str, int]:
        """Each job's iterations on the link's circle (`solution.perimeter_ms`)."""
        return {j: round(self.solution.perimeter_ms / q) for j, q in self.periods_ms.items()}

    @property
    def stretch(self) -> dict[str, float]:
        """Each job's period over its own iteration time (1: it does not idle)."""
        return {j: q / self.own_ms[j] for j, q in self.periods_ms.items() if j in self.own_ms}

    @property
    def plan_score(self) -> float:
        """The score of what the plan does: running unaligned for a free plan, else
        the applied shifts' score."""
        return self.free_running_score if self.plan == "free" else self.solution.score

    def to_json(self) -> dict[str, Any]:
        """The `cassini compat --json` record: each score beside what it belongs to
        (`plan_score` and the applied `shifts_ms`; `best_score` and `best_shifts_ms`,
        the unconstrained optimum a free plan declines). There is no bare `score`:
        a reader took it for the score of the shifts printed next to it."""
        sol, best = self.solution, self.best
        return {
            "plan": self.plan,
            "plan_score": round(self.plan_score, 6),
            "best_score": round(best.score, 6),
            "free_running_score": round(self.free_running_score, 6),
            "perimeter_ms": round(sol.perimeter_ms, 6),
            "rotations_deg": {k: round(v, 6) for k, v in sol.rotations_deg.items()},
            "shifts_ms": {k: round(v, 3) for k, v in sol.shifts_ms.items()},
            "best_rotations_deg": {k: round(v, 6) for k, v in best.rotations_deg.items()},
            "best_shifts_ms": {k: round(v, 3) for k, v in best.shifts_ms.items()},
            "periods_ms": {k: round(v, 3) for k, v in self.periods_ms.items()},
            "ratios": self.ratios,
            "stretch": {k: round(v, 4) for k, v in self.stretch.items()},
            "solver": sol.solver,
            "approximated": sol.approximated,
            "elapsed_ms": round(sol.elapsed_ms, 3),
        }


def plan_link(
    profiles: Sequence[Profile],
    capacity_gbps: float,
    precision_deg: float = 5.0,
    solver: str = "auto",
    pace: bool = True,
) -> LinkPlan:
    """The plan `plan_group` would choose for these jobs on one link of `capacity_gbps`.

    Without `pace`, the jobs keep their own iteration times (the paper). A
    link that cannot be oversubscribed, or carries one job, is paced at the
    jobs' own times (no idling).
    """
    own_ms = {p.name: p.iteration_ms for p in profiles}
    free = free_running_score(profiles, capacity_gbps)
    periods = dict(own_ms)
    plan = "unpaced"
    peaks = sum(p.peak_gbps for p in profiles)
    if pace and peaks > capacity_gbps and len(profiles) > 1:
        link = ("link", "link")
        chosen = plan_group(
            {link: tuple(own_ms)},
            {p.name: p for p in profiles},
            {link: capacity_gbps},
            precision_deg,
            solver,
            {},
            pace=True,
        )
        if not chosen.periods_ms:
            plan = "free"
        else:
            plan = "paced"
            periods = chosen.periods_ms
    elif pace:
        plan = "paced"
    paced = [paced_profile(p, periods[p.name]) for p in profiles]
    best = compatibility(paced, capacity_gbps, precision_deg, solver)
    sol = best
    if plan == "free":
        sol = replace(
            best,
            rotations_deg=dict.fromkeys(best.rotations_deg, 0.0),
            shifts_ms=dict.fromkeys(best.shifts_ms, 0.0),
        )
    return LinkPlan(plan, sol, free, periods, best, own_ms)


def evaluate_candidate(
    placement: Placement,
    profiles: Mapping[str, Profile],
    router: JobRouter,
    capacities: Mapping[DirectedLink, float],
    precision_deg: float = 5.0,
    solver: str = "auto",
    aggregate: str = "total",
    index: int = 0,
    cache: dict[LinkKey, LinkSolution] | None = None,
    cycles: str = "consistent",
    pace: bool = True,
) -> CandidateResult:
    """Score one placement (Algorithm 2, step 2) and derive its per-job shifts.

    Only links the jobs' peaks can oversubscribe ("coupling" links) constrain
    rotations: on any other shared link every rotation scores 1, so it joins
    no affinity edge (our choice; the paper draws every shared link). Jobs
    joined through coupling links form groups; each group is planned by
    `plan_group` (paced, shifted, or left free-running).
    """
    _check_options(solver, aggregate, cycles)
    cache = {} if cache is None else cache
    missing = [job for job in placement if job not in profiles]
    if missing:
        raise UserInputError(did_you_mean(missing[0], profiles, "job profile"))
    job_links = {
        job: router.job_links(servers, profiles[job].parallelism, job)
        for job, servers in placement.items()
    }
    shared = {link: jobs for link, jobs in jobs_per_link(job_links).items() if len(jobs) > 1}
    for link in shared:
        if link not in capacities:
            raise UserInputError(f"no capacity for link {link_id(link)}")
    coupling = {
        link: jobs
        for link, jobs in shared.items()
        if sum(profiles[j].peak_gbps for j in jobs) > capacities[link] * (1 + 1e-9)
    }
    link_scores = {link_id(link): 1.0 for link in shared}
    link_shifts: dict[DirectedLink, dict[str, float]] = {}
    periods: dict[str, float] = {}
    circles: dict[str, float] = {}
    ratios: dict[str, int] = {}
    half_bin_ms = 0.0
    for group in coupled_groups(coupling.values()):
        group_links = {link: jobs for link, jobs in coupling.items() if jobs[0] in group}
        plan = plan_group(group_links, profiles, capacities, precision_deg, solver, cache, pace)
        link_scores.update({link_id(link): score for link, score in plan.link_scores.items()})
        link_shifts.update(plan.link_shifts)
        periods.update(plan.periods_ms)
        circles.update(dict.fromkeys(plan.circle.iterations, plan.circle.perimeter_ms))
        ratios.update(plan.circle.iterations)
        half_bin_ms = max(half_bin_ms, plan.half_bin_ms)
    aligned = {job: job_links[job] & link_shifts.keys() for job in periods}
    graph = build_affinity_graph(aligned)
    # (our choice) Shifts on a cycle "agree" within half a bin of the coarsest
    # circle involved: closer than that is below the solver's resolution.
    result = unique_shifts(graph, link_shifts, periods, tolerance_ms=max(1.0, half_bin_ms))
    discarded = None
    if result.rule == INCONSISTENT_CYCLE:
        discarded = "inconsistent cycle in the affinity graph: " + "; ".join(result.conflicts[:3])
    elif cycles == "paper" and result.rule != ACYCLIC:
        discarded = (
            "cycle in the affinity graph (paper rule: "
            + " - ".join(map(_node_name, find_cycle(graph) or []))
            + ")"
        )
    shifts = {job: round(result.shifts_ms.get(job, 0.0), 6) for job in placement}
    idle = sum(periods[j] / profiles[j].iteration_ms - 1.0 for j in periods)
    score = _aggregate(list(link_scores.values()), aggregate)
    if aggregate == "total":
        value = -sum(1.0 - s for s in link_scores.values()) - idle
    else:
        value = score - idle / max(1, len(periods))
    return CandidateResult(
        index=index,
        placement=dict(placement),
        score=score,
        link_scores=link_scores,
        discarded=discarded,
        shifts_ms=shifts,
        rule=result.rule,
        periods_ms={j: round(q, 6) for j, q in periods.items()},
        idle=idle,
        groups=result.components,
        value=value,
        circles_ms={j: round(p, 6) for j, p in circles.items()},
        ratios=ratios,
    )


def _node_name(node: object) -> str:
    return link_id(node) if isinstance(node, tuple) else str(node)


def _check_options(solver: str, aggregate: str, cycles: str = "consistent") -> None:
    if cycles not in CYCLE_RULES:
        raise UserInputError(did_you_mean(cycles, CYCLE_RULES, "cycle rule"))
    if solver not in SOLVERS:
        raise UserInputError(did_you_mean(solver, SOLVERS, "solver"))
    if aggregate not in AGGREGATES:
        raise UserInputError(did_you_mean(aggregate, AGGREGATES, "aggregate"))


def _evaluate_chunk(
    chunk: Sequence[tuple[int, Placement]],
    profiles: Mapping[str, Profile],
    router: JobRouter,
    capacities: Mapping[DirectedLink, float],
    precision_deg: float,
    solver: str,
    aggregate: str,
    cycles: str,
    pace: bool,
    cache: dict[LinkKey, LinkSolution] | None = None,
) -> list[CandidateResult]:
    cache = {} if cache is None else cache
    return [
        evaluate_candidate(
            p,
            profiles,
            router,
            capacities,
            precision_deg,
            solver,
            aggregate,
            i,
            cache,
            cycles,
            pace,
        )
        for i, p in chunk
    ]


def choose(
    candidates: Sequence[Placement],
    profiles: Mapping[str, Profile],
    router: JobRouter,
    capacities: Mapping[DirectedLink, float],
    precision_deg: float = 5.0,
    solver: str = "auto",
    aggregate: str = "total",
    workers: int = 1,
    cycles: str = "consistent",
    pace: bool = True,
    cache: dict[LinkKey, LinkSolution] | None = None,
) -> CassiniDecision:
    """Pick the best candidate placement and its time-shifts (Algorithm 2).

    `cache` (link contents -> solution) may be kept across calls with the
    same precision and solver: the same job pairs meet again and again.
    """
    if not candidates:
        raise UserInputError("Cassini needs at least one candidate placement")
    _check_options(solver, aggregate, cycles)
    bins_for_precision(precision_deg)
    indexed = list(enumerate(candidates))
    settings = (profiles, router, capacities, precision_deg, solver, aggregate, cycles, pace)
    if workers > 1 and len(indexed) > 1:
        chunks = [indexed[i::workers] for i in range(min(workers, len(indexed)))]
        with ProcessPoolExecutor(max_workers=len(chunks)) as pool:
            futures = [pool.submit(_evaluate_chunk, c, *settings) for c in chunks]
            results = sorted((r for f in futures for r in f.result()), key=lambda r: r.index)
    else:
        results = _evaluate_chunk(indexed, *settings, cache)
    valid = [r for r in results if r.discarded is None]
    pool_of = valid or results
    best = max(pool_of, key=lambda r: (r.value, -r.index))
    schedule = Schedule(
        placement=best.placement,
        shifts_ms=best.shifts_ms,
        link_scores=best.link_scores,
        score=best.score if not math.isnan(best.score) else 0.0,
        periods_ms=best.periods_ms,
        groups=best.groups,
    )
    return CassiniDecision(
        best=best, schedule=schedule, candidates=tuple(results), fallback=not valid
    )
