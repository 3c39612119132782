"""Pollux: goodput-driven GPU reallocation (Qiao et al., OSDI 2021).

Goodput = throughput x statistical efficiency. Pollux periodically
re-optimises every job's GPU count for the cluster's total (normalised)
goodput, restarting the jobs whose allocation changes.

The efficiency model here (our choice, simpler than Pollux's fitted one):
a job on g GPUs with per-GPU batch b trains with global batch M = g x b;
its statistical efficiency relative to one GPU is
E(M) = (phi + b) / (phi + M), with phi the gradient noise scale in samples
(default 1024 for every model: large batches beyond phi stop paying off).
Throughput is samples/s = M / T_iter(g), with T_iter from the job's profile
at g workers (so communication cost counts). Goodput(g) = M x E(M) / T_iter.
A job's work is fixed in "iterations at its requested size"; an iteration
on g GPUs advances it by (g E(g b)) / (w E(w b)) of those (w = requested),
which the simulator applies through `work_per_iteration`.

Allocation (our choice, greedy instead of Pollux's genetic search): every
`period_s` (60 s by default) all jobs are reconsidered: in arrival order each
gets 1 GPU while GPUs last, then GPUs go one at a time to the job with the
largest gain in speedup (goodput(g) / goodput(1)), up to its request. A
running job whose count changes is restarted elsewhere and loses
`migration_s` (checkpoint + restart). Between periods, arrivals and
departures only hand out free GPUs with the same greedy rule (no moves).
Placement packs each job on as few racks as possible; up to N equally packed
alternatives form the Po+Cassini candidates.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from .base import (
    Allocation,
    ClusterInfo,
    ClusterView,
    JobStatus,
    ProfileBook,
    joint_candidates,
    stable_seed,
)


def statistical_efficiency(workers: int, batch: int, phi: float) -> float:
    """E(M) = (phi + b) / (phi + M), M = workers x batch.

    >>> round(statistical_efficiency(4, 64, 1024.0), 3)
    0.85
    """
    return (phi + batch) / (phi + workers * batch)


def goodput(book: ProfileBook, model: str, workers: int, batch: int | None, phi: float) -> float:
    """Useful samples per second on `workers` GPUs (throughput x efficiency)."""
    prof = book.get(model, workers, batch)
    b = prof.batch_size
    return workers * b * statistical_efficiency(workers, b, phi) / (prof.iteration_ms / 1e3)


def work_per_iteration(book: ProfileBook, job: JobStatus, workers: int, phi: float) -> float:
    """Progress one iteration on `workers` GPUs makes, in requested-size iterations."""
    b = book.get(job.model, job.requested, job.batch_size).batch_size
    got = workers * statistical_efficiency(workers, b, phi)
    ref = job.requested * statistical_efficiency(job.requested, b, phi)
    return got / ref


@dataclass(frozen=True)
class PolluxScheduler:
    info: ClusterInfo
    book: ProfileBook
    period_s: float = 60.0
    phi: float = 1024.0
    candidates: int = 10
    seed: int = 0
    migration_s: float = 15.0
    name: str = "pollux"
    dedicated: bool = False
    _curves: dict[tuple[str, int, int | None], list[float]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def speedups(self, job: JobStatus) -> list[float]:
        """Speedup over one GPU for 0..requested GPUs (memoised per model and size)."""
        key = (job.model, job.requested, job.batch_size)
        curve = self._curves.get(key)
        if curve is None:
            base = goodput(self.book, job.model, 1, job.batch_size, self.phi)
            curve = [0.0] + [
                goodput(self.book, job.model, g, job.batch_size, self.phi) / base
                for g in range(1, job.requested + 1)
            ]
            self._curves[key] = curve
        return curve

    def counts(
        self, jobs: list[JobStatus], gpus: int, floor: Mapping[str, int], freeze: bool = False
    ) -> dict[str, int]:
        """Greedy goodput allocation of `gpus` GPUs; `floor` counts are given first.

        With `freeze`, jobs in `floor` keep exactly that count (no moves between periods).
        """
        alloc = dict(floor)
        left = gpus - sum(floor.values())
        for job in sorted(jobs, key=lambda j: (j.arrival_s, j.name)):
            if job.name not in alloc and left >= 1:
                alloc[job.name] = 1
                left -= 1
        curves = {j.name: self.speedups(j) for j in jobs if j.name in alloc}
        limit = {j.name: floor.get(j.name, j.requested) if freeze else j.requested for j in jobs}
        while left > 0:
            best, best_gain = None, 1e-9
            for name, g in alloc.items():
                if g >= limit[name] or name not in curves:
                    continue
                gain = curves[name][g + 1] - curves[name][g]
                if gain > best_gain:
                    best, best_gain = name, gain
            if best is None:
                break
            alloc[best] += 1
            left -= 1
        return alloc

    def decide(self, view: ClusterView) -> Allocation:
        now = view.now_s
        jobs = list(view.jobs)
        total = sum(view.gpus.values())
        periodic = view.reason == "tick"
        if periodic:
            counts = self.counts(jobs, total, {})
        else:
            floor = {j.name: len(j.servers) for j in view.running()}
            counts = self.counts(jobs, total, floor, freeze=True)
        fixed: dict[str, tuple[str, ...]] = {}
        pool = dict(view.gpus)
        for job in view.running():
            if counts.get(job.name) == len(job.servers):
                fixed[job.name] = job.servers
                for s in job.servers:
                    pool[s] -= 1
        to_place = [
            (j.name, counts[j.name]) for j in jobs if j.name in counts and j.name not in fixed
        ]
        # biggest first packs better; ties by arrival
        by_name = {j.name: j for j in jobs}
        to_place.sort(key=lambda x: (-x[1], by_name[x[0]].arrival_s, x[0]))
        cands = joint_candidates(
            fixed, to_place, pool, self.info, self.candidates, stable_seed(self.seed, now, "pollux")
        )
        wpi = {
            name: work_per_iteration(self.book, by_name[name], len(servers), self.phi)
            for name, servers in cands[0].items()
        }
        return Allocation(placement=cands[0], candidates=cands, work_per_iteration=wpi)

    def next_tick(self, now_s: float, view: ClusterView) -> float:
        if not view.jobs:
            return math.inf
        return (math.floor(now_s / self.period_s + 1e-9) + 1) * self.period_s
