"""What does the fluid simulator predict for the schedule a run emulates?

The same placement, shifts, periods and profiles, all jobs arriving at 0,
for the run's iteration count: `scheduler.simulator.simulate` under a
scheduler that answers with the given schedule once and never re-decides.
The emulated mean iteration time is compared with this per job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scheduler.baselines.base import Allocation, ClusterView, ProfileBook
from scheduler.profiles import ModelSpec
from scheduler.simulator import SimSettings, simulate
from scheduler.traces import TraceJob
from topologies.model import Topology

from .launch import JobPlan


@dataclass(frozen=True)
class GivenSchedule:
    """A scheduler for the simulator that places, shifts and paces jobs as told."""

    placement: Mapping[str, tuple[str, ...]]
    shifts_ms: Mapping[str, float]
    periods_ms: Mapping[str, float]
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
            groups=(tuple(sorted(placement)),),
        )

    def next_tick(self, now_s: float, view: ClusterView) -> float:
        return float("inf")


def simulated_means(
    topo: Topology,
    jobs: Sequence[JobPlan],
    iterations: int,
    models: Mapping[str, ModelSpec] | None = None,
) -> dict[str, float]:
    """{job: the simulator's mean iteration time in ms} for `jobs` as scheduled.

    (our choice) The simulator builds profiles from the models (a ProfileBook),
    so a `--jobs-file` profile that is not a model's is not simulated.
    """
    trace = [TraceJob(j.name, j.model, j.workers, iterations) for j in jobs]
    scheduler = GivenSchedule(
        {j.name: j.servers for j in jobs},
        {j.name: j.shift_ms for j in jobs},
        {j.name: j.period_ms for j in jobs if j.period_ms is not None},
    )
    book = ProfileBook(models, nic_gbps=topo.nic_gbps())
    result = simulate(trace, topo, scheduler, SimSettings(fast_forward=False), book=book)
    return {r.name: float(r.iteration_ms.mean()) for r in result.jobs if r.iteration_ms.size}
