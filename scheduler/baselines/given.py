"""A scheduler that answers with a given placement, shifts and periods, and never re-decides.

What the simulator runs when the schedule is not its to choose: the schedule
an emulation ran (`emulation.jobs.prediction`), or a test's hand-made case.
Jobs are placed once they have arrived; a job in `periods_ms` is paced.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .base import Allocation, ClusterView


@dataclass(frozen=True)
class GivenScheduler:
    """`GivenScheduler({"a": ("s01", "s02")}, {"a": 0.0}, {"a": 250.0})`"""

    placement: Mapping[str, tuple[str, ...]]
    shifts_ms: Mapping[str, float] = field(default_factory=dict)
    periods_ms: Mapping[str, float] = field(default_factory=dict)
    name: str = "given"
    dedicated: bool = False
    migration_s: float = 0.0

    def decide(self, view: ClusterView) -> Allocation:
        live = {j.name for j in view.jobs}
        placement = {k: v for k, v in self.placement.items() if k in live}
        return Allocation(
            placement,
            (placement,),
            {k: v for k, v in self.shifts_ms.items() if k in live},
            periods_ms={k: v for k, v in self.periods_ms.items() if k in live},
            new_schedule=bool(self.periods_ms),
        )

    def next_tick(self, now_s: float, view: ClusterView) -> float:
        return float("inf")
