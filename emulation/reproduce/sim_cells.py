"""What does one simulator cell of a scenario measure? Figures by name, from the fluid simulator.

A cell is one seed (and, for a Poisson trace, one load) of one scenario. It
returns plain figures (`{"vgg19+vgg19.p90_ratio": 1.1, ...}`), named as the
scenario's checks name them; ratios are base over Cassini (or aligned over
shifted), so > 1 means Cassini is better, as in the paper.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .pair_plan import PairPlan, link_share, pair_plan, ratio
from .workloads import PairWorkload, SolverWorkload, TraceWorkload

LOW_SCORE = 0.6  # the paper's score below which gains fade (snapshots)


def simulate_cell(workload: Any, seed: int, load: float | None = None) -> dict[str, float]:
    """The figures of one cell (`workload` is one of `workloads`' simulator shapes)."""
    if isinstance(workload, PairWorkload):
        if workload.kind == "scheduler":
            return _scheduler_pairs(workload, seed)
        return _aligned_pairs(workload, seed)
    if isinstance(workload, TraceWorkload):
        return trace_figures(workload, seed, load)
    if isinstance(workload, SolverWorkload):
        return solver_figures(workload, seed)
    raise TypeError(f"no simulator cell for {type(workload).__name__}")


def _pair_trace(plan: PairPlan, iterations: int) -> tuple[Any, ...]:
    from scheduler.workloads.traces import TraceJob

    return tuple(
        TraceJob(job, model, 4, iterations)
        for job, model in zip(plan.jobs, plan.models, strict=True)
    )


def _run(trace: Sequence[Any], topology: Any, scheduler: Any, seed: int, drift: float) -> Any:
    from scheduler.baselines.base import ProfileBook
    from scheduler.simulator import SimSettings, simulate
    from scheduler.workloads.traffic import JobRouter

    settings = SimSettings(seed=seed, drift_sigma=drift)
    book = ProfileBook(nic_gbps=topology.nic_gbps())
    return simulate(trace, topology, scheduler, settings, JobRouter(topology), book=book)


def _iterations(result: Any) -> np.ndarray:
    return np.concatenate([j.iteration_ms for j in result.jobs if j.iteration_ms.size])


def _aligned_pairs(workload: PairWorkload, seed: int) -> dict[str, float]:
    """Each pair aligned and shifted on its given placement."""
    from scheduler.baselines.given import GivenScheduler
    from topologies.library import load_topology

    topo = load_topology(workload.topology)
    out: dict[str, float] = {}
    for models in workload.pairs:
        plan = pair_plan(models, topo.nic_gbps())
        trace = _pair_trace(plan, workload.iterations)
        runs = {}
        for case, shifted in (("aligned", False), ("shifted", True)):
            s = plan.schedule(shifted)
            sched = GivenScheduler(
                {k: tuple(v) for k, v in s["placement"].items()},
                s["shifts_ms"],
                s.get("periods_ms", {}),
            )
            runs[case] = _run(trace, topo, sched, seed, workload.drift)
        out.update(pair_figures(plan, runs["aligned"], runs["shifted"]))
    return out


def pair_figures(plan: PairPlan, aligned: Any, shifted: Any) -> dict[str, float]:
    """Ratios aligned / shifted of one pair's two simulated runs, and the aligned share."""
    a, s = _iterations(aligned), _iterations(shifted)
    means = {j.name: float(j.iteration_ms.mean()) for j in aligned.jobs}
    marked_a = sum(j.marked_mbit for j in aligned.jobs)
    marked_s = sum(j.marked_mbit for j in shifted.jobs)
    k = plan.key
    return {
        f"{k}.p90_ratio": float(np.percentile(a, 90) / np.percentile(s, 90)),
        f"{k}.mean_ratio": float(a.mean() / s.mean()),
        f"{k}.p99_ratio": float(np.percentile(a, 99) / np.percentile(s, 99)),
        f"{k}.marks_ratio": ratio(marked_a, marked_s),
        f"{k}.aligned_share": link_share(plan, means),
        f"{k}.shift_ms": plan.shift_ms,
        f"{k}.score": plan.score,
    }


def _scheduler_pairs(workload: PairWorkload, seed: int) -> dict[str, float]:
    """Each pair on its given placement under Themis (free) and Th+Cassini (its shift)."""
    from emulation.emulate.plan import on_schedule
    from scheduler.baselines.base import ProfileBook
    from scheduler.baselines.given import GivenScheduler
    from scheduler.workloads.traffic import JobRouter
    from topologies.library import load_topology

    topo = load_topology(workload.topology)
    router = JobRouter(topo)
    book = ProfileBook(nic_gbps=topo.nic_gbps())
    out: dict[str, float] = {}
    low: list[float] = []
    high: list[float] = []
    adjustments, job_minutes = 0, 0.0
    for models in workload.pairs:
        plan = pair_plan(models, topo.nic_gbps())
        trace = _pair_trace(plan, workload.iterations)
        given = GivenScheduler({k: tuple(v) for k, v in plan.placement().items()})
        runs = {
            name: _run(trace, topo, on_schedule(name, given, topo, book, router), seed,
                       workload.drift)
            for name in ("themis", "th+cassini")
        }  # fmt: skip
        gain = float(_iterations(runs["themis"]).mean() / _iterations(runs["th+cassini"]).mean())
        out[f"{plan.key}.score"] = plan.score
        out[f"{plan.key}.gain"] = gain
        (low if plan.score < LOW_SCORE else high).append(gain)
        cassini = runs["th+cassini"]
        adjustments += sum(j.adjustments for j in cassini.jobs)
        job_minutes += sum(j.completion_s for j in cassini.jobs) / 60.0
    if low:
        out["low.gain"] = float(np.mean(low))
    if high:
        out["high.gain"] = float(np.mean(high))
    out["adjustments_per_min"] = adjustments / job_minutes if job_minutes > 0 else 0.0
    return out


def scenario_trace(
    workload: TraceWorkload, total_gpus: int, seed: int, load: float | None
) -> tuple[Any, ...]:
    """The jobs of a trace workload for one seed (and load)."""
    from dataclasses import replace

    from scheduler.workloads.traces import TraceJob, poisson_trace

    if workload.trace == "poisson":
        jobs = poisson_trace(workload.jobs, total_gpus, load if load is not None else 0.9, seed)
    elif workload.trace == "arrivals":
        rng = np.random.default_rng(seed)
        bg = [
            TraceJob(f"bg{i:03d}-{m}", m, workload.background_workers,
                     int(rng.integers(900, 1001)), 0.0)
            for i, m in enumerate(workload.background)
        ]  # fmt: skip
        new = [
            TraceJob(f"new{i}-{m}", m, workload.newcomer_workers, 1000, workload.arrive_s)
            for i, m in enumerate(workload.newcomers)
        ]
        jobs = tuple(bg + new)
    else:
        raise ValueError(f"trace kind {workload.trace!r}: poisson or arrivals")
    if workload.iterations_cap is not None:
        cap = workload.iterations_cap
        jobs = tuple(replace(j, iterations=min(j.iterations, cap)) for j in jobs)
    return jobs


def trace_figures(workload: TraceWorkload, seed: int, load: float | None) -> dict[str, float]:
    """Base / Cassini ratios of one trace under the workload's schedulers."""
    from scheduler.simulator import SimSettings
    from scheduler.simulator.experiment import run_experiment
    from topologies.library import load_topology

    topo = load_topology(workload.topology)
    jobs = scenario_trace(workload, topo.total_gpus(), seed, load)
    exp = run_experiment(
        jobs, topo, list(workload.schedulers), seed,
        SimSettings(seed=seed, drift_sigma=workload.drift),
    )  # fmt: skip
    by = {s.name: s for s in exp.summaries}
    return speedup_figures(exp.speedups, by)


def speedup_figures(
    speedups: Mapping[str, Mapping[str, Any]], by: Mapping[str, Any]
) -> dict[str, float]:
    """`variant.mean`, `.p99`, `.congestion`, `.marks.<model>`, `.marks.max`, `.vs_ideal`."""
    out: dict[str, float] = {}
    for variant, sp in speedups.items():
        for key in ("mean", "p99", "congestion"):
            out[f"{variant}.{key}"] = float(sp[key])
        base, var = by[sp["base"]], by[variant]
        per_model = {
            m: ratio(base.per_model_marked_gbit.get(m, 0.0), var.per_model_marked_gbit.get(m, 0.0))
            for m in var.per_model_marked_gbit
        }
        out.update({f"{variant}.marks.{m}": r for m, r in per_model.items()})
        if per_model:
            out[f"{variant}.marks.max"] = max(per_model.values())
        if "ideal" in by:
            out[f"{variant}.vs_ideal"] = var.mean_slowdown / by["ideal"].mean_slowdown
    return out


def solver_figures(workload: SolverWorkload, seed: int) -> dict[str, float]:
    """Accuracy and time of the exact solver at each precision, on random mixes.

    A precision's shifts are accurate when, laid on the finest grid
    (`reference_deg`), they score within 0.01 of the finest grid's own best
    (our choice: the shifts are judged, not the coarse grid's own score).
    """
    from scheduler.cassini.compatibility import compatibility, discretize
    from scheduler.workloads.profiles import model_names, profiles_from_list

    rng = np.random.default_rng(seed)
    names = model_names()
    compatibility(profiles_from_list("vgg19,resnet50", 4), 50.0, 5.0, "exact")  # warm-up, untimed
    accurate: dict[float, list[bool]] = {p: [] for p in workload.precisions}
    times: dict[float, list[float]] = {p: [] for p in workload.precisions}
    for _ in range(workload.mixes):
        mix = [names[int(i)] for i in rng.integers(0, len(names), size=workload.jobs)]
        profiles = profiles_from_list(",".join(mix), 4)
        fine = discretize(profiles, workload.reference_deg)
        best = None
        for p in sorted(workload.precisions):
            t0 = time.perf_counter()
            sol = compatibility(profiles, 50.0, p, "exact")
            times[p].append((time.perf_counter() - t0) * 1e3)
            score = score_on_grid(fine, [sol.rotations_deg[x.name] for x in profiles], 50.0)
            best = score if best is None else best
            accurate[p].append(score >= best - 0.01)
    ref_ms = float(np.mean(times[workload.reference_deg]))
    out: dict[str, float] = {}
    for p in workload.precisions:
        out[f"accuracy.{p:g}"] = float(np.mean(accurate[p]))
        out[f"time_ms.{p:g}"] = float(np.mean(times[p]))
        out[f"time_ratio.{p:g}"] = float(np.mean(times[p])) / ref_ms if ref_ms > 0 else 0.0
    return out


def score_on_grid(problem: Any, rotations_deg: Sequence[float], capacity_gbps: float) -> float:
    """The compatibility score of jobs rotated by `rotations_deg`, on `problem`'s grid.

    >>> from scheduler.cassini.compatibility import discretize
    >>> from scheduler.workloads.types import Phase, Profile
    >>> half = Profile("a", "m", "data", 2, 100.0, (Phase(50.0, 50.0), Phase(50.0, 0.0)))
    >>> grid = discretize([half, Profile("b", "m", "data", 2, 100.0, half.phases)], 1.0)
    >>> score_on_grid(grid, [0.0, 180.0], 50.0), score_on_grid(grid, [0.0, 0.0], 50.0)
    (1.0, 0.5)
    """
    from scheduler.cassini.compatibility import excess_sum, score_from_excess

    step = 360.0 / problem.bins
    total = sum(
        np.roll(problem.demands[j], int(round(r / step))) for j, r in enumerate(rotations_deg)
    )
    return score_from_excess(
        excess_sum(np.asarray(total), capacity_gbps), problem.bins, capacity_gbps
    )
