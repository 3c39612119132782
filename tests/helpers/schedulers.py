"""Schedulers and cluster views the scheduler's tests share."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduler.baselines.base import (
    Allocation,
    ClusterInfo,
    ClusterView,
    JobStatus,
    ProfileBook,
)
from scheduler.baselines.themis import ThemisScheduler
from topologies.library import load_topology

TOPO = load_topology("cassini-testbed")
INFO = ClusterInfo.of(TOPO)
GPUS = {s.name: s.gpus for s in TOPO.servers}


def cluster_view(jobs: list[JobStatus], now: float, reason: str = "arrival") -> ClusterView:
    """A view of the testbed at `now` with `jobs` running (those with servers) or waiting."""
    used: dict[str, int] = {}
    for j in jobs:
        for s in j.servers:
            used[s] = used.get(s, 0) + 1
    return ClusterView(
        now, GPUS, {s: g - used.get(s, 0) for s, g in GPUS.items()}, tuple(jobs), reason
    )


@dataclass(frozen=True)
class FixedScheduler:
    """Places, shifts and paces jobs as told, once they have arrived; never re-decides."""

    placement: Mapping[str, tuple[str, ...]]
    shifts: Mapping[str, float] = field(default_factory=dict)
    periods: Mapping[str, float] = field(default_factory=dict)
    name: str = "fixed"
    dedicated: bool = False
    migration_s: float = 0.0

    def decide(self, view: ClusterView) -> Allocation:
        live = {j.name for j in view.jobs}
        p = {k: v for k, v in self.placement.items() if k in live}
        return Allocation(
            p,
            (p,),
            {k: v for k, v in self.shifts.items() if k in live},
            periods_ms={k: v for k, v in self.periods.items() if k in live},
            new_schedule=bool(self.periods),
        )

    def next_tick(self, now_s: float, view: ClusterView) -> float:
        return float("inf")


def dynamic_arrival_view(seed: int) -> tuple[ClusterView, dict[str, tuple[str, ...]]]:
    """The dynamic trace at the newcomers' arrival: background placed by Themis at t = 0."""
    from scheduler.traces import dynamic_trace

    trace = dynamic_trace(TOPO.total_gpus(), seed)
    book = ProfileBook()

    def status(t, servers=()):  # type: ignore[no-untyped-def]
        prof = book.get(t.model, t.workers)
        return JobStatus(
            t.name,
            t.model,
            t.workers,
            t.iterations,
            t.arrival_s,
            0.0,
            tuple(servers),
            ideal_iteration_ms=prof.iteration_ms,
        )

    background = [t for t in trace if t.arrival_s == 0.0]
    newcomers = [t for t in trace if t.arrival_s > 0.0]
    first = ThemisScheduler(INFO, seed=seed).decide(
        cluster_view([status(t) for t in background], 0.0)
    )
    running = [status(t, first.placement[t.name]) for t in background]
    view = cluster_view(running + [status(t) for t in newcomers], newcomers[0].arrival_s)
    return view, dict(first.placement)
