"""Several schedulers over one trace, summarised the way the paper reports them.

Per scheduler: mean / p50 / p90 / p99 iteration time (ms), mean iteration
slowdown (iteration time over the same job alone at the same size, which stays
comparable when Pollux changes worker counts), mean job completion time, and
the congestion stand-in for ECN marks (oversubscribed link-seconds and excess
Gbit, see `scheduler.simulator`). Each Cassini variant gets its speedup over
its base scheduler.
"""

from __future__ import annotations

import importlib.metadata
import platform
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numba
import numpy as np

from scheduler.baselines.base import Allocation, ClusterView, ProfileBook
from scheduler.baselines.registry import CASSINI_BASE, make_scheduler
from scheduler.simulator import SimResult, SimSettings, simulate
from scheduler.workloads.profiles import ModelSpec
from scheduler.workloads.sharing_model import IDENTITY, SharingModel
from scheduler.workloads.traces import TraceJob
from scheduler.workloads.traffic import JobRouter
from topologies.model import Topology


@dataclass(frozen=True)
class SchedulerSummary:
    name: str
    jobs: int
    iterations: int
    mean_ms: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_slowdown: float
    p99_slowdown: float
    mean_jct_s: float
    oversub_link_s: float
    excess_gbit: float
    marked_gbit: float
    per_model_mean_ms: Mapping[str, float]
    per_model_marked_gbit: Mapping[str, float]
    wall_s: float
    events: int
    fast_forwarded_s: float
    adjustments: int
    migrations: int
    makespan_s: float = 0.0
    comm_overhead: float = 0.0


@dataclass(frozen=True)
class Experiment:
    settings: Mapping[str, Any]
    summaries: tuple[SchedulerSummary, ...]
    speedups: Mapping[str, Mapping[str, float]]
    results: Mapping[str, SimResult] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "settings": dict(self.settings),
            "schedulers": {s.name: _summary_dict(s) for s in self.summaries},
            "speedups": {k: dict(v) for k, v in self.speedups.items()},
        }


def _summary_dict(s: SchedulerSummary) -> dict[str, Any]:
    d = dict(s.__dict__)
    d["per_model_mean_ms"] = dict(s.per_model_mean_ms)
    d["per_model_marked_gbit"] = dict(s.per_model_marked_gbit)
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in d.items()}


def summarise(result: SimResult, wall_s: float = 0.0) -> SchedulerSummary:
    """Reduce one run to the paper's figures."""
    its = [j.iteration_ms for j in result.jobs if len(j.iteration_ms)]
    slow = [j.slowdown for j in result.jobs if len(j.iteration_ms)]
    it = np.concatenate(its) if its else np.zeros(1)
    sd = np.concatenate(slow) if slow else np.ones(1)
    per_model: dict[str, list[np.ndarray]] = {}
    for j in result.jobs:
        per_model.setdefault(j.model, []).append(j.iteration_ms)
    return SchedulerSummary(
        name=result.scheduler,
        jobs=len(result.jobs),
        iterations=int(it.size),
        mean_ms=float(it.mean()),
        p50_ms=float(np.percentile(it, 50)),
        p90_ms=float(np.percentile(it, 90)),
        p99_ms=float(np.percentile(it, 99)),
        mean_slowdown=float(sd.mean()),
        p99_slowdown=float(np.percentile(sd, 99)),
        mean_jct_s=result.mean_jct_s,
        oversub_link_s=float(result.links.oversub_ms.sum() / 1e3),
        excess_gbit=float(result.links.excess_mbit.sum() / 1e3),
        marked_gbit=float(sum(j.marked_mbit for j in result.jobs) / 1e3),
        per_model_mean_ms={
            m: float(np.concatenate(v).mean())
            for m, v in sorted(per_model.items())
            if sum(map(len, v))
        },
        per_model_marked_gbit={
            m: float(sum(j.marked_mbit for j in result.jobs if j.model == m) / 1e3)
            for m in sorted(per_model)
        },
        wall_s=wall_s,
        events=result.events,
        fast_forwarded_s=result.fast_forwarded_ms / 1e3,
        adjustments=sum(j.adjustments for j in result.jobs),
        migrations=sum(j.migrations for j in result.jobs),
        makespan_s=result.makespan_s,
        comm_overhead=result.comm_overhead,
    )


def _ratio(base: float, variant: float) -> float:
    """base / variant; inf when only the base has any, 1 when neither has."""
    if variant > 0:
        return base / variant
    return float("inf") if base > 0 else 1.0


def speedups(summaries: Sequence[SchedulerSummary]) -> dict[str, dict[str, float]]:
    """Base / Cassini ratios (>1 means the Cassini variant is better)."""
    by = {s.name: s for s in summaries}
    out: dict[str, dict[str, float]] = {}
    for variant, base in CASSINI_BASE.items():
        if variant in by and base in by:
            v, b = by[variant], by[base]
            out[variant] = {
                "base": base,  # type: ignore[dict-item]
                "mean": b.mean_ms / v.mean_ms,
                "p50": b.p50_ms / v.p50_ms,
                "p90": b.p90_ms / v.p90_ms,
                "p99": b.p99_ms / v.p99_ms,
                "jct": b.mean_jct_s / v.mean_jct_s,
                "makespan": _ratio(b.makespan_s, v.makespan_s),
                "mean_slowdown": b.mean_slowdown / v.mean_slowdown,
                "p99_slowdown": b.p99_slowdown / v.p99_slowdown,
                "congestion": _ratio(b.oversub_link_s, v.oversub_link_s),
                "marked": _ratio(b.marked_gbit, v.marked_gbit),
            }
    return out


def run_experiment(
    trace: Sequence[TraceJob],
    topology: Topology,
    schedulers: Sequence[str],
    seed: int = 0,
    settings: SimSettings | None = None,
    candidates: int = 10,
    trace_label: str = "",
    progress: Callable[[str, int, int], None] | None = None,
    models: Mapping[str, ModelSpec] | None = None,
    models_label: str = "built-in",
    precision_deg: float = 5.0,
    aggregate: str = "total",
    pace: bool = True,
    trace_kind: str = "file",
    on_decision: Callable[[str, float, ClusterView, Allocation], None] | None = None,
    policy: str = "none",
    sharing: SharingModel | None = None,
) -> Experiment:
    """Simulate every scheduler on the same trace and topology (sequentially).

    `models` replaces the built-in catalogue (a user's measured profiles);
    `models_label` says where it came from in the run's metadata.
    `precision_deg`, `aggregate` and `pace` go to the Cassini variants, so a
    sweep can vary them (`scheduler.sweep`). `trace_kind` (a generator of
    `scheduler.workloads.traces.TRACE_KINDS`, or "file") lets a report cite the paper's
    figures for that kind of trace. `on_decision(scheduler, now_s, view,
    allocation)` sees every decision (`scheduler.simulator.decisions` records them).
    `policy` (a `scheduler.policies` name) is the network side every scheduler runs
    under: its flows' priority classes at each decision. `sharing`
    (`scheduler.workloads.sharing_model`) replaces ideal max-min on shared links; None is ideal.
    """
    from scheduler.policies import make_policy, parse_policy

    policy = parse_policy(policy)
    settings = settings or SimSettings(seed=seed)
    router = JobRouter(topology)
    book = ProfileBook(models, nic_gbps=topology.nic_gbps())
    results: dict[str, SimResult] = {}
    summaries: list[SchedulerSummary] = []
    for name in schedulers:
        sched = make_scheduler(
            name,
            topology,
            seed,
            candidates,
            router,
            precision_deg=precision_deg,
            book=book,
            aggregate=aggregate,
            pace=pace,
        )
        hook = (lambda done, total, _n=name: progress(_n, done, total)) if progress else None
        t0 = time.perf_counter()
        seen = (
            (lambda now_s, view, alloc, _n=name: on_decision(_n, now_s, view, alloc))
            if on_decision
            else None
        )
        res = simulate(
            trace,
            topology,
            sched,
            settings,
            router,
            progress=hook,
            book=book,
            on_decision=seen,
            policy=None if policy == "none" else make_policy(policy),
            sharing=sharing or IDENTITY,
        )
        results[name] = res
        summaries.append(summarise(res, time.perf_counter() - t0))
    meta = {
        "topology": topology.name,
        "servers": len(topology.servers),
        "gpus": topology.total_gpus(),
        "trace": trace_label,
        "trace_kind": trace_kind,
        "jobs": len(trace),
        "seed": seed,
        "candidates": candidates,
        "policy": policy,
        **({"sharing": sharing.describe()} if sharing and not sharing.identity else {}),
        "models": models_label,
        "simulator": dict(settings.__dict__),
        "harness": importlib.metadata.version("cassini-harness"),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
    }
    return Experiment(meta, tuple(summaries), speedups(summaries), results)
