"""Random: each waiting job, first come first served, on random free GPUs.

No locality, no compatibility, no preemption: the worst case a network-unaware
scheduler can produce, which is why the paper uses it as the upper bound.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .base import Allocation, ClusterInfo, ClusterView, stable_seed


@dataclass(frozen=True)
class RandomScheduler:
    info: ClusterInfo
    seed: int = 0
    name: str = "random"
    dedicated: bool = False
    migration_s: float = 0.0

    def decide(self, view: ClusterView) -> Allocation:
        placement = {j.name: j.servers for j in view.running()}
        free = dict(view.free)
        rng = np.random.default_rng(stable_seed(self.seed, round(view.now_s, 6), "random"))
        for job in view.waiting():
            slots = sorted(s for s, n in free.items() for _ in range(n))
            if len(slots) < job.requested:
                continue  # gang scheduling: wait until all its GPUs are free
            pick = tuple(
                sorted(slots[i] for i in rng.choice(len(slots), job.requested, replace=False))
            )
            for s in pick:
                free[s] -= 1
            placement[job.name] = pick
        return Allocation(placement=placement, candidates=(placement,))

    def next_tick(self, now_s: float, view: ClusterView) -> float:
        return float("inf")
