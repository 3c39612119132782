"""Schedulers and cluster views the scheduler's tests share."""

from __future__ import annotations

from scheduler.baselines.base import (
    ClusterInfo,
    ClusterView,
    JobStatus,
    ProfileBook,
)
from scheduler.baselines.given import GivenScheduler
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


# Places, shifts and paces jobs as told (the library's; tests call it by this name).
FixedScheduler = GivenScheduler


def dynamic_arrival_view(seed: int) -> tuple[ClusterView, dict[str, tuple[str, ...]]]:
    """The dynamic trace at the newcomers' arrival: background placed by Themis at t = 0."""
    from scheduler.workloads.traces import dynamic_trace

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
