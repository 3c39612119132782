"""Ideal: every job alone on its own copy of the cluster, starting on arrival.

The lower bound on iteration time: no queueing, no contention with other jobs.
Each job is packed on as few racks as an empty cluster allows, so only its own
flows share links (as they would on a dedicated cluster).
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import Allocation, ClusterInfo, ClusterView, pack_one


@dataclass(frozen=True)
class IdealScheduler:
    info: ClusterInfo
    name: str = "ideal"
    dedicated: bool = True
    migration_s: float = 0.0

    def decide(self, view: ClusterView) -> Allocation:
        placement = {j.name: j.servers for j in view.running()}
        for job in view.waiting():
            pick = pack_one(job.requested, view.gpus, self.info)
            if pick is not None:
                placement[job.name] = pick
        return Allocation(placement=placement, candidates=(placement,))

    def next_tick(self, now_s: float, view: ClusterView) -> float:
        return float("inf")
