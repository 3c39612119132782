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
from dataclasses import dataclass, replace

import numpy as np

from scheduler.affinity import (
    ACYCLIC,
    INCONSISTENT_CYCLE,
    build_affinity_graph,
    find_cycle,
    jobs_per_link,
    link_id,
    unique_shifts,
)
from scheduler.compatibility import SOLVERS, LinkSolution, bins_for_precision, compatibility
from scheduler.types import Placement, Profile, Schedule
from topologies.errors import UserInputError, did_you_mean
from topologies.model import DirectedLink
from topologies.routing import Router

AGGREGATES = ("mean", "min", "p10")
# "paper": any cycle in the affinity graph discards the candidate (Theorem 1);
# "consistent" (our choice, default): only cycles whose shifts disagree do.
CYCLE_RULES = ("consistent", "paper")


@dataclass(frozen=True)
class CandidateResult:
    """One placement's evaluation. `discarded` says why it cannot be used, if so."""

    index: int
    placement: Mapping[str, tuple[str, ...]]
    score: float
    link_scores: Mapping[str, float]
    discarded: str | None
    shifts_ms: Mapping[str, float]
    rule: str = "acyclic"


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
    if how == "mean":
        return float(np.mean(scores))
    if how == "min":
        return float(min(scores))
    return float(np.percentile(scores, 10))


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


def evaluate_candidate(
    placement: Placement,
    profiles: Mapping[str, Profile],
    router: Router,
    capacities: Mapping[DirectedLink, float],
    precision_deg: float = 5.0,
    solver: str = "auto",
    aggregate: str = "mean",
    index: int = 0,
    cache: dict[LinkKey, LinkSolution] | None = None,
    cycles: str = "consistent",
) -> CandidateResult:
    """Score one placement (Algorithm 2, step 2) and derive its per-job shifts."""
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
    link_scores: dict[str, float] = {}
    link_shifts: dict[DirectedLink, dict[str, float]] = {}
    half_bin_ms = 0.0
    for link, jobs in shared.items():
        if link not in capacities:
            raise UserInputError(f"no capacity for link {link_id(link)}")
        solution, shifts = solve_link(
            jobs, profiles, capacities[link], precision_deg, solver, cache
        )
        link_scores[link_id(link)] = solution.score
        link_shifts[link] = shifts
        half_bin_ms = max(
            half_bin_ms, solution.perimeter_ms / bins_for_precision(precision_deg) / 2
        )
    graph = build_affinity_graph(job_links)
    # (our choice) Shifts on a cycle "agree" within half a bin of the coarsest
    # circle involved: closer than that is below the solver's resolution.
    result = unique_shifts(
        graph,
        link_shifts,
        {j: p.iteration_ms for j, p in profiles.items()},
        tolerance_ms=max(1.0, half_bin_ms),
    )
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
    return CandidateResult(
        index=index,
        placement=dict(placement),
        score=_aggregate(list(link_scores.values()), aggregate),
        link_scores=link_scores,
        discarded=discarded,
        shifts_ms=shifts,
        rule=result.rule,
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
    router: Router,
    capacities: Mapping[DirectedLink, float],
    precision_deg: float,
    solver: str,
    aggregate: str,
    cycles: str,
) -> list[CandidateResult]:
    cache: dict[LinkKey, LinkSolution] = {}
    return [
        evaluate_candidate(
            p, profiles, router, capacities, precision_deg, solver, aggregate, i, cache, cycles
        )
        for i, p in chunk
    ]


def choose(
    candidates: Sequence[Placement],
    profiles: Mapping[str, Profile],
    router: Router,
    capacities: Mapping[DirectedLink, float],
    precision_deg: float = 5.0,
    solver: str = "auto",
    aggregate: str = "mean",
    workers: int = 1,
    cycles: str = "consistent",
) -> CassiniDecision:
    """Pick the best candidate placement and its time-shifts (Algorithm 2)."""
    if not candidates:
        raise UserInputError("Cassini needs at least one candidate placement")
    _check_options(solver, aggregate, cycles)
    bins_for_precision(precision_deg)
    indexed = list(enumerate(candidates))
    if workers > 1 and len(indexed) > 1:
        chunks = [indexed[i::workers] for i in range(min(workers, len(indexed)))]
        with ProcessPoolExecutor(max_workers=len(chunks)) as pool:
            futures = [
                pool.submit(
                    _evaluate_chunk,
                    c,
                    profiles,
                    router,
                    capacities,
                    precision_deg,
                    solver,
                    aggregate,
                    cycles,
                )
                for c in chunks
            ]
            results = sorted((r for f in futures for r in f.result()), key=lambda r: r.index)
    else:
        results = _evaluate_chunk(
            indexed, profiles, router, capacities, precision_deg, solver, aggregate, cycles
        )
    valid = [r for r in results if r.discarded is None]
    pool_of = valid or results
    best = max(pool_of, key=lambda r: (r.score, -r.index))
    schedule = Schedule(
        placement=best.placement,
        shifts_ms=best.shifts_ms,
        link_scores=best.link_scores,
        score=best.score if not math.isnan(best.score) else 0.0,
    )
    return CassiniDecision(
        best=best, schedule=schedule, candidates=tuple(results), fallback=not valid
    )
