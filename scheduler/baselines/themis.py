"""Themis: finish-time fairness with leases and auctions (Mahajan et al., NSDI 2020).

A job's finish-time fairness is rho = T_shared / T_independent: the time it
will have taken in the shared cluster over the time it would take alone on
its requested GPUs. rho = 1 is fair; the larger, the worse off the job.

What this module keeps from Themis:
- GPUs are leased; a lease lasts `lease_s` (10 minutes by default). Leases
  roll on a grid from the moment a job got its GPUs (since_s + k x lease_s).
- Auctions run on arrivals and departures (only free GPUs are offered: no
  one is preempted mid-lease) and when leases expire (the expiring jobs'
  GPUs join the pool and those jobs bid again).
- The jobs farthest from fairness (highest rho) bid first; the arbiter gives
  each bidder, in that order, its full request if the pool still holds it
  (gang allocation), skipping those that do not fit (back-filling smaller
  jobs, as Themis's partial allocation does over several rounds).
- Placement sensitivity: a job spread over more racks runs slower; rho
  estimates multiply the remaining time by 1 + `rack_penalty` per extra
  rack, and winners are packed on as few racks as possible.

Simplifications (our choice): bids are the rho values themselves rather than
the valuation tables Themis's agents compute for every GPU bundle, and the
arbiter is greedy rather than solving the partial-allocation auction; a
renewing winner keeps its servers when they are still in the pool. A job
whose lease expires and that loses the auction is preempted with its
progress kept and pays `migration_s` when it resumes.

Candidate placements (the Th+Cassini hook): the winners are packed several
ways with the same number of racks each (equal for Themis's objective).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .base import (
    Allocation,
    ClusterInfo,
    ClusterView,
    JobStatus,
    joint_candidates,
    racks_spanned,
    stable_seed,
)

_EPS_S = 1e-6


def finish_time_fairness(job: JobStatus, now_s: float, slowdown: float = 1.0) -> float:
    """rho = (elapsed + estimated remaining) / time alone; >= 1 means worse than fair.

    >>> j = JobStatus("a", "vgg16", 4, 100, 0.0, 50.0, ideal_iteration_ms=1000.0)
    >>> finish_time_fairness(j, now_s=100.0)   # 100 s spent, 50 s left, 100 s alone
    1.5
    """
    alone_s = job.iterations * job.ideal_iteration_ms / 1e3
    remaining_s = job.remaining * job.ideal_iteration_ms / 1e3 * slowdown
    elapsed_s = max(0.0, now_s - job.arrival_s)
    return (elapsed_s + remaining_s) / max(alone_s, 1e-9)


def lease_expired(job: JobStatus, now_s: float, lease_s: float) -> bool:
    """True when `now_s` is on the job's lease grid (since_s + k x lease_s, k >= 1)."""
    if not job.running or now_s - job.since_s < lease_s - _EPS_S:
        return False
    k = round((now_s - job.since_s) / lease_s)
    return k >= 1 and abs(job.since_s + k * lease_s - now_s) < 1e-3


@dataclass(frozen=True)
class ThemisScheduler:
    info: ClusterInfo
    lease_s: float = 600.0
    rack_penalty: float = 0.1
    candidates: int = 10
    seed: int = 0
    migration_s: float = 15.0
    name: str = "themis"
    dedicated: bool = False

    def slowdown(self, job: JobStatus) -> float:
        if not job.servers:
            return 1.0
        return 1.0 + self.rack_penalty * max(0, racks_spanned(job.servers, self.info.rack_of) - 1)

    def bid_order(self, jobs: list[JobStatus], now_s: float) -> list[JobStatus]:
        """Farthest from fairness first; ties to the earlier arrival, then name."""
        return sorted(
            jobs,
            key=lambda j: (-finish_time_fairness(j, now_s, self.slowdown(j)), j.arrival_s, j.name),
        )

    def decide(self, view: ClusterView) -> Allocation:
        now = view.now_s
        pool = dict(view.free)
        keep: dict[str, tuple[str, ...]] = {}
        bidders: list[JobStatus] = list(view.waiting())
        for job in view.running():
            if view.reason == "tick" and lease_expired(job, now, self.lease_s):
                bidders.append(job)
                for s in job.servers:
                    pool[s] += 1
            else:
                keep[job.name] = job.servers
        fixed = dict(keep)
        to_place: list[tuple[str, int]] = []
        free_count = sum(pool.values())
        for job in self.bid_order(bidders, now):
            if job.requested > free_count:
                continue
            if job.servers and all(pool[s] > 0 for s in job.servers):
                fixed[job.name] = job.servers  # renewal on the same servers
                for s in job.servers:
                    pool[s] -= 1
            else:
                to_place.append((job.name, job.requested))
            free_count -= job.requested
        cands = joint_candidates(
            fixed, to_place, pool, self.info, self.candidates, stable_seed(self.seed, now, "themis")
        )
        return Allocation(placement=cands[0], candidates=cands)

    def next_tick(self, now_s: float, view: ClusterView) -> float:
        nxt = math.inf
        for job in view.running():
            k = math.floor((now_s - job.since_s) / self.lease_s + 1e-9) + 1
            nxt = min(nxt, job.since_s + k * self.lease_s)
        return nxt
