"""What does the fluid simulator predict for the schedule a run emulates?

The same placement, shifts, periods and profiles, all jobs arriving at 0,
for the run's iteration count: `scheduler.simulator.simulate` under a
scheduler that answers with the given schedule once and never re-decides.
The emulated mean iteration time is compared with this per job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from scheduler.baselines.base import ProfileBook
from scheduler.baselines.given import GivenScheduler
from scheduler.simulator import SimSettings, simulate
from scheduler.workloads.profiles import ModelSpec
from scheduler.workloads.traces import TraceJob
from topologies.model import Topology

from .launch import JobPlan


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
    scheduler = GivenScheduler(
        {j.name: j.servers for j in jobs},
        {j.name: j.shift_ms for j in jobs},
        {j.name: j.period_ms for j in jobs if j.period_ms is not None},
    )
    book = ProfileBook(models, nic_gbps=topo.nic_gbps())
    result = simulate(trace, topo, scheduler, SimSettings(fast_forward=False), book=book)
    return {r.name: float(r.iteration_ms.mean()) for r in result.jobs if r.iteration_ms.size}
