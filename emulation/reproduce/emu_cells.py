"""What does one emulation cell of a scenario measure? Figures by name, from `cassini emulate`'s runner.

A cell is one run of a scenario's `EmulationWorkload` on the fabric (root,
the whole machine): each pair aligned and shifted, or the trace under its
schedulers, through `emulation.emulate.runner.emulate` (the library call
behind `cassini emulate`), each case in a folder of its own. Figures are
named as the simulator's, so one check reads both columns. The fidelity
monitor's verdict comes back with them: a run it does not trust is kept on
disk but left out of the figures (`aggregate`). Unless the workload says
otherwise, a cell first profiles its models alone on a fabric of its own
(DIR/profiling/, DIR/profiles.json) and plans with what it measured
(`EmulationWorkload.profile_iterations`).

(our choice) Iteration 0 of every job is left out (connections' slow start),
as benchmarks/bench_shift_cases.py does.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from .pair_plan import link_share, pair_plan, ratio
from .sim_cells import scenario_trace
from .workloads import EmulationWorkload

WARMUP = 1


def emulate_cell(workload: EmulationWorkload, run: int, out_dir: str) -> dict[str, Any]:
    """Run one emulation cell into `out_dir`; its figures and the fidelity verdicts."""
    if os.geteuid() != 0:
        raise PermissionError("emulation cells need root (network namespaces, the fabric)")
    out = Path(out_dir)
    if workload.pairs:
        return _pairs(workload, run, out)
    if workload.trace is not None:
        return _trace(workload, run, out)
    raise ValueError("an emulation workload names pairs or a trace")


def _emulate(settings: Any, folder: Path) -> dict[str, Any]:
    from emulation.emulate.runner import emulate

    report, stopped = emulate(settings, folder)
    if stopped is not None:
        # The user's Ctrl-C (or a TERM): the whole reproduction stops, the cell is not
        # retried or counted as failed (`grid.attempt` retries only Exceptions).
        raise KeyboardInterrupt(f"the emulation in {folder.name} was stopped by {stopped}")
    if report.summary.get("settings", {}).get("failed"):
        raise RuntimeError(str(report.summary["settings"]["failed"]))
    return report.summary


def job_iterations(path: Path, scheduler: str) -> dict[str, dict[int, tuple[float, float]]]:
    """Per job and iteration (after the warm-up): mean iteration ms over its workers and
    their summed CE marks, from a report's iterations.csv."""
    rows: dict[str, dict[int, list[tuple[float, float]]]] = {}
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            if row["scheduler"] != scheduler or int(row["iteration"]) < WARMUP:
                continue
            # the step's time, the agent's idle included (`IterationRecord.iteration_ms`)
            ms = float(row["wait_ms"]) + float(row["end_ms"]) - float(row["start_ms"])
            marks = float(row["ce_marks"]) if row.get("ce_marks") else 0.0
            rows.setdefault(row["job"], {}).setdefault(int(row["iteration"]), []).append(
                (ms, marks)
            )
    return {
        job: {
            k: (float(np.mean([m for m, _ in v])), float(sum(c for _, c in v)))
            for k, v in its.items()
        }
        for job, its in rows.items()
    }


def _trust(summary: Mapping[str, Any]) -> tuple[bool | None, list[str]]:
    """The run's fidelity verdict and, when it is not trusted, the reasons the monitor gave."""
    reasons = []
    for name, s in summary.get("schedulers", {}).items():
        if s.get("trustworthy") is False:
            why = "; ".join(s.get("fidelity", {}).get("reasons") or [])
            reasons.append(f"{name}: {why}" if why else name)
    return summary.get("trustworthy"), reasons


def _pairs(workload: EmulationWorkload, run: int, out: Path) -> dict[str, Any]:
    from emulation.emulate.runner import EmulateSettings
    from scheduler.workloads.traces import TraceJob, write_trace

    figures: dict[str, float] = {}
    trusted: list[bool | None] = []
    flags: list[str] = []
    profiles = _profile_pairs(workload, out)
    for models in workload.pairs:
        plan = pair_plan(models, profiles=profiles)
        cases = {}
        for case, shifted in (("aligned", False), ("shifted", True)):
            folder = out / plan.key / case
            folder.mkdir(parents=True, exist_ok=True)
            trace = write_trace(
                [
                    TraceJob(j, m, 4, workload.iterations)
                    for j, m in zip(plan.jobs, plan.models, strict=True)
                ],
                folder / "trace.csv",
            )
            settings = EmulateSettings(
                trace=str(trace), schedulers=("given",), iterations=workload.iterations,
                seed=run, schedule=plan.schedule(shifted),
                profiles=None if profiles is None else str(profiles),
            )  # fmt: skip
            summary = _emulate(settings, folder / "report")
            ok, why = _trust(summary)
            trusted.append(ok)
            flags += [f"{plan.key} {case}: {w}" for w in why]
            cases[case] = (summary, job_iterations(folder / "report" / "iterations.csv", "given"))
        figures.update(_pair_figures(plan, cases))
    return {"figures": figures, "trustworthy": _all(trusted), "flags": flags,
            "transport": workload.transport}  # fmt: skip


def _profile_pairs(workload: EmulationWorkload, out: Path) -> Path | None:
    """The pairs' models profiled alone on a fabric of their own (`EmulationWorkload`'s
    `profile_iterations`), into out/profiles.json; None when the workload plans with the
    derived profiles."""
    if workload.profile_iterations <= 0:
        return None
    from emulation.fabric.scaling import DEFAULT_SCALE
    from emulation.jobs.run_settings import RunSettings
    from emulation.profile.session import profile_into
    from scheduler.workloads.profiles import load_models

    from .pair_plan import WORKERS
    from .workloads import PAIR_TOPOLOGY

    models = list(dict.fromkeys(m for pair in workload.pairs for m in pair))
    run = RunSettings(iterations=workload.profile_iterations, transport=workload.transport)
    return profile_into(out, PAIR_TOPOLOGY, {WORKERS: models}, run, DEFAULT_SCALE, load_models())


def _pair_figures(plan: Any, cases: Mapping[str, Any]) -> dict[str, float]:
    def times(case: str) -> np.ndarray:
        return np.array([ms for its in cases[case][1].values() for ms, _ in its.values()])

    def marks(case: str) -> float:
        per = [c for its in cases[case][1].values() for _, c in its.values()]
        return float(np.mean(per)) if per else 0.0

    a, s = times("aligned"), times("shifted")
    means = {
        job: float(np.mean([ms for ms, _ in its.values()]))
        for job, its in cases["aligned"][1].items()
    }
    jobs = cases["shifted"][0]["schedulers"]["given"]["jobs"]
    k = plan.key
    return {
        f"{k}.p90_ratio": float(np.percentile(a, 90) / np.percentile(s, 90)),
        f"{k}.mean_ratio": float(a.mean() / s.mean()),
        f"{k}.p99_ratio": float(np.percentile(a, 99) / np.percentile(s, 99)),
        f"{k}.marks_ratio": ratio(marks("aligned"), marks("shifted")),
        f"{k}.aligned_share": link_share(plan, means),
        f"{k}.adjustments_per_min": float(
            np.mean([j["adjustments_per_minute"] for j in jobs.values()])
        ),
    }


def _trace(workload: EmulationWorkload, run: int, out: Path) -> dict[str, Any]:
    from emulation.emulate.runner import EmulateSettings
    from scheduler.workloads.traces import write_trace
    from topologies.library import load_topology

    assert workload.trace is not None
    topo = load_topology(workload.trace.topology)
    out.mkdir(parents=True, exist_ok=True)
    trace = write_trace(
        scenario_trace(workload.trace, topo.total_gpus(), run, None), out / "trace.csv"
    )
    settings = EmulateSettings(
        topology=workload.trace.topology, trace=str(trace), schedulers=workload.schedulers,
        iterations=workload.iterations, seed=run, compress=workload.compress,
        transport=workload.transport,
    )  # fmt: skip
    if workload.profile_iterations > 0:
        from emulation.profile.session import profile_trace

        found = profile_trace(settings, out, workload.profile_iterations)
        if found is not None:
            settings = replace(settings, profiles=str(found))
    summary = _emulate(settings, out / "report")
    ok, why = _trust(summary)
    return {"figures": trace_figures(summary), "trustworthy": ok, "flags": why,
            "transport": workload.transport}  # fmt: skip


def trace_figures(summary: Mapping[str, Any]) -> dict[str, float]:
    """Base / Cassini ratios of an emulate summary: mean, p99, CE marks per iteration per model."""
    from scheduler.baselines.registry import CASSINI_BASE

    scheds = summary["schedulers"]
    out: dict[str, float] = {}
    for variant, base in CASSINI_BASE.items():
        if variant not in scheds or base not in scheds:
            continue
        b, v = scheds[base], scheds[variant]
        out[f"{variant}.mean"] = ratio(b["mean_iteration_ms"] or 0.0, v["mean_iteration_ms"] or 0.0)
        out[f"{variant}.p99"] = ratio(b["p99_iteration_ms"] or 0.0, v["p99_iteration_ms"] or 0.0)
        per_b, per_v = _marks_per_iteration(b["jobs"]), _marks_per_iteration(v["jobs"])
        models = {m: ratio(per_b.get(m, 0.0), x) for m, x in per_v.items()}
        out.update({f"{variant}.marks.{m}": r for m, r in models.items()})
        if models:
            out[f"{variant}.marks.max"] = max(models.values())
    return out


def _marks_per_iteration(jobs: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    marks: dict[str, float] = {}
    iterations: dict[str, int] = {}
    for j in jobs.values():
        marks[j["model"]] = marks.get(j["model"], 0.0) + float(j.get("ce_marks") or 0)
        iterations[j["model"]] = iterations.get(j["model"], 0) + int(j.get("iterations") or 0)
    return {m: marks[m] / iterations[m] for m in marks if iterations[m]}


def _all(values: list[bool | None]) -> bool | None:
    if any(v is False for v in values):
        return False
    return None if any(v is None for v in values) else True
