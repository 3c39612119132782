"""Th+Cassini and Po+Cassini: a base scheduler's candidates ranked by Cassini.

The base scheduler decides who runs and on how many GPUs and returns up to N
placements it rates equally; `scheduler.cassini.plans.choose` scores each by the
compatibility of the jobs sharing each link and returns the best with one
time-shift per job. Worker counts, leases and hyper-parameters are the
base's: Cassini only picks among the base's own placements and adds shifts.
When the base placed nothing new (nothing to choose), the agents keep the
grids they have, so they are not re-aligned for nothing. A new schedule
re-aligns every paced agent (shifts are relative to the decision time).
With `apply_shifts=False` Cassini still picks the placement but hands the
agents no schedule: the ablation that separates what placement and what
time-shifts contribute (`benchmarks/shift_ablation.py`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from scheduler.cassini.compatibility import LinkSolution
from scheduler.cassini.plans import CandidateResult, CassiniDecision, LinkKey, choose
from scheduler.workloads.traffic import JobRouter
from topologies.model import DirectedLink

from .base import Allocation, ClusterView, ProfileBook, Scheduler

SOLUTION_CACHE_ENTRIES = 20_000  # (our choice) bound on remembered link solutions


@dataclass(frozen=True)
class CassiniAugmented:
    base: Scheduler
    router: JobRouter
    capacities: Mapping[DirectedLink, float]
    name: str = "th+cassini"
    precision_deg: float = 5.0
    solver: str = "auto"
    aggregate: str = "total"
    pace: bool = True
    dedicated: bool = False
    apply_shifts: bool = True
    book: ProfileBook = field(default_factory=ProfileBook, compare=False, repr=False)
    # Link solutions kept across decisions (the same pairs meet again); cleared when full.
    solutions: dict[LinkKey, LinkSolution] = field(default_factory=dict, compare=False, repr=False)

    @property
    def migration_s(self) -> float:
        return self.base.migration_s

    def decide(self, view: ClusterView) -> Allocation:
        alloc, decision = self.rank(view)
        if decision is None:
            return alloc
        return self.allocation(alloc, decision.best)

    def rank(self, view: ClusterView) -> tuple[Allocation, CassiniDecision | None]:
        """The base's allocation and Cassini's evaluation of its candidates.

        No evaluation (None) when the base placed nothing new; the allocation
        then keeps every agent's grid.
        """
        alloc = self.base.decide(view)
        by_name = {j.name: j for j in view.jobs}
        previous = {j.name: j.servers for j in view.running()}
        moved = [n for n, s in alloc.placement.items() if sorted(s) != sorted(previous.get(n, ()))]
        if not moved:
            kept = Allocation(
                placement=alloc.placement,
                candidates=alloc.candidates,
                work_per_iteration=alloc.work_per_iteration,
                note="no new placement: agents keep their grids",
            )
            return kept, None
        candidates = alloc.candidates or (alloc.placement,)
        profiles = {
            name: self.book.get(by_name[name].model, len(servers), by_name[name].batch_size)
            for name, servers in candidates[0].items()
        }
        if len(self.solutions) > SOLUTION_CACHE_ENTRIES:
            self.solutions.clear()
        decision = choose(
            candidates,
            profiles,
            self.router,
            self.capacities,
            precision_deg=self.precision_deg,
            solver=self.solver,
            aggregate=self.aggregate,
            pace=self.pace,
            cache=self.solutions,
        )
        return replace(alloc, candidates=candidates), decision

    def allocation(self, alloc: Allocation, chosen: CandidateResult) -> Allocation:
        """Run `chosen` (normally the best candidate) with the base's work split."""
        score = chosen.score if not math.isnan(chosen.score) else 0.0
        note = f"candidate {chosen.index} of {len(alloc.candidates)}, score {score:.3f}"
        if not self.apply_shifts:
            return Allocation(
                placement=chosen.placement,
                candidates=alloc.candidates,
                work_per_iteration=alloc.work_per_iteration,
                score=score,
                note=note + ", placement only",
            )
        return Allocation(
            placement=chosen.placement,
            candidates=alloc.candidates,
            shifts_ms=dict(chosen.shifts_ms),
            work_per_iteration=alloc.work_per_iteration,
            score=score,
            periods_ms=dict(chosen.periods_ms),
            groups=chosen.groups,
            new_schedule=True,
            note=note,
        )

    def next_tick(self, now_s: float, view: ClusterView) -> float:
        return self.base.next_tick(now_s, view)
