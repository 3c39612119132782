"""Which placement and time-shifts does Cassini choose for a trace, placed at once?

One decision without time (`cassini schedule`): the trace's jobs are placed
as if every one were present, in arrival order until the cluster is full;
the jobs that no longer fit are named, not placed. Time is the simulator's
job (`scheduler.simulator`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from scheduler.cassini.plans import CassiniDecision, choose
from scheduler.workloads.profiles import ModelSpec, build_profile
from scheduler.workloads.traces import TraceJob, check_fits
from scheduler.workloads.traffic import JobRouter
from scheduler.workloads.types import Job
from topologies.errors import UserInputError
from topologies.model import Topology

from .candidates import locality_candidates


@dataclass(frozen=True)
class TraceSchedule:
    """The decision for one trace on one topology, and what it placed."""

    topology: str
    jobs: tuple[Job, ...]  # placed, in arrival order
    skipped: tuple[str, ...]  # did not fit once the jobs before them were placed
    gpus_used: int
    gpus: int
    candidates: int  # placements Cassini chose among
    decision: CassiniDecision

    def to_json(self, elapsed_ms: float) -> dict[str, Any]:
        """The `cassini schedule --json` record; `elapsed_ms` is the caller's clock."""
        best = self.decision.best
        own = {j.name: j.profile.iteration_ms for j in self.jobs}
        return {
            "topology": self.topology,
            "chosen": best.index,
            "score": round(best.score, 6),
            "rule": best.rule,
            "fallback": self.decision.fallback,
            "placement": {j: list(s) for j, s in best.placement.items()},
            "shifts_ms": {j: round(v, 3) for j, v in best.shifts_ms.items()},
            "periods_ms": {j: round(v, 3) for j, v in best.periods_ms.items()},
            # Per paced job: its iterations on its group's circle, the circle's perimeter,
            # and its period over its own iteration time.
            "ratios": dict(best.ratios),
            "circles_ms": {j: round(v, 3) for j, v in best.circles_ms.items()},
            "stretch": {j: round(v / own[j], 4) for j, v in best.periods_ms.items()},
            # Each placed job's model: a trace's job names need not be model names, and
            # `fabric run --schedule` reads this file back.
            "models": {j.name: j.profile.model for j in self.jobs if j.name in best.placement},
            "link_scores": {k: round(v, 6) for k, v in best.link_scores.items()},
            "skipped_jobs": list(self.skipped),
            "candidates": [
                {
                    "index": c.index,
                    "score": round(c.score, 6),
                    "value": round(c.value, 6),
                    "shared_links": len(c.link_scores),
                    "rule": c.rule,
                    "discarded": c.discarded,
                }
                for c in self.decision.candidates
            ],
            "elapsed_ms": round(elapsed_ms, 3),
        }


def jobs_that_fit(
    trace: Sequence[TraceJob],
    topology: Topology,
    models: Mapping[str, ModelSpec] | None = None,
) -> tuple[list[Job], list[str]]:
    """The trace's jobs in arrival order while they fit, and the names of the rest.

    >>> from topologies.generators import cassini_testbed
    >>> from scheduler.workloads.traces import four_jobs_trace
    >>> fit, skipped = jobs_that_fit(four_jobs_trace() + four_jobs_trace()[:1], cassini_testbed())
    >>> [j.name for j in fit], skipped
    (['vgg19-0', 'vgg16-1', 'wideresnet101-2', 'bert-3'], ['vgg19-0'])
    """
    capacity = topology.total_gpus()
    nic = topology.nic_gbps()
    jobs: list[Job] = []
    skipped: list[str] = []
    used = 0
    for tj in trace:
        if used + tj.workers > capacity:
            skipped.append(tj.name)
            continue
        profile = build_profile(
            tj.model, tj.workers, batch_size=tj.batch_size, nic_gbps=nic, models=models
        )
        jobs.append(Job(tj.name, profile, tj.workers))
        used += tj.workers
    return jobs, skipped


def schedule_trace(
    trace: Sequence[TraceJob],
    topology: Topology,
    label: str = "trace",
    models: Mapping[str, ModelSpec] | None = None,
    candidates: int = 10,
    seed: int = 0,
    precision_deg: float = 5.0,
    solver: str = "auto",
    aggregate: str = "total",
    processes: int = 1,
    cycles: str = "consistent",
    pace: bool = True,
) -> TraceSchedule:
    """Place the jobs that fit (`jobs_that_fit`) and choose among `candidates` placements.

    `label` names the trace in errors; the other options are `choose`'s and
    `locality_candidates`'s.
    """
    capacity = topology.total_gpus()
    check_fits(trace, capacity, label)
    jobs, skipped = jobs_that_fit(trace, topology, models)
    if not jobs:
        raise UserInputError(f"no job of trace '{label}' fits topology '{topology.name}'")
    placements = locality_candidates(topology, jobs, candidates, seed)
    profiles = {j.name: replace(j.profile, name=j.name) for j in jobs}
    decision = choose(
        placements,
        profiles,
        JobRouter(topology),
        topology.capacity_gbps(),
        precision_deg=precision_deg,
        solver=solver,
        aggregate=aggregate,
        workers=processes,
        cycles=cycles,
        pace=pace,
    )
    return TraceSchedule(
        topology=topology.name,
        jobs=tuple(jobs),
        skipped=tuple(skipped),
        gpus_used=sum(j.workers for j in jobs),
        gpus=capacity,
        candidates=len(placements),
        decision=decision,
    )
