"""What did one `cassini emulate` run measure, per scheduler, as plain data?

`SchedulerRun` is one scheduler's measurement on the fabric (the replicas'
iteration records, the switch's counter series, the fidelity figures) beside
its plan (`plan.SchedulerPlan`: decisions and the simulator's prediction).
The figures a report states are functions of these (`job_iterations`,
`summarise`), so the summary, the CSVs and the plots cannot disagree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from controlplane.telemetry import TelemetryLog
from emulation.jobs.records import IterationRecord

from .fidelity import FidelityFigures, Verdict, verdict
from .plan import SchedulerPlan

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class SchedulerRun:
    """One scheduler's run on the fabric."""

    scheduler: str
    plan: SchedulerPlan
    schedule: Mapping[str, Any]  # what the runner ran (`Decision.as_schedule`)
    records: tuple[IterationRecord, ...]
    telemetry: TelemetryLog
    fidelity: FidelityFigures
    shared_links: Mapping[str, tuple[str, ...]]  # "a->b" -> jobs crossing it
    wall_s: float
    partial: bool = False
    error: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def verdict(self) -> Verdict:
        return verdict(self.fidelity)


@dataclass(frozen=True)
class JobIterations:
    """One job's iterations as a whole (every worker's record of iteration k together)."""

    job: str
    model: str
    workers: int
    iteration_ms: FloatArray  # per iteration: last worker's end - first worker's start
    ce_marks: FloatArray  # per iteration: CE-marked packets its workers received (NaN: uncounted)
    adjustments: int  # iterations after which an agent of the job re-aligned


def job_iterations(records: Iterable[IterationRecord]) -> dict[str, JobIterations]:
    """Per job, its iterations in order; an iteration only some workers finished is dropped.

    >>> r = [IterationRecord("a", "vgg19", w, 0, 10.0 + w, 20.0 + 2 * w, 1, 5.0, 0.0, w == 1, 3)
    ...      for w in range(2)]
    >>> it = job_iterations(r)["a"]
    >>> it.iteration_ms.tolist(), it.ce_marks.tolist(), it.adjustments
    ([12.0], [6.0], 1)
    """
    by_job: dict[str, dict[int, list[IterationRecord]]] = {}
    for rec in records:
        by_job.setdefault(rec.job, {}).setdefault(rec.iteration, []).append(rec)
    out = {}
    for job, iterations in sorted(by_job.items()):
        workers = len({r.worker for its in iterations.values() for r in its})
        times, marks, adjusted = [], [], 0
        for k in sorted(iterations):
            recs = iterations[k]
            adjusted += any(r.adjusted for r in recs)  # the workers' agents re-align together
            if len(recs) < workers:
                continue
            times.append(max(r.end_ms for r in recs) - min(r.start_ms for r in recs))
            counted = [r.ce_marks for r in recs if r.ce_marks is not None]
            marks.append(float(sum(counted)) if len(counted) == len(recs) else np.nan)
        model = next(iter(iterations.values()))[0].model
        out[job] = JobIterations(
            job, model, workers, np.array(times, dtype=float), np.array(marks, dtype=float),
            adjusted,
        )  # fmt: skip
    return out


def _p99(values: FloatArray) -> float | None:
    return float(np.percentile(values, 99)) if values.size else None


def _mean(values: FloatArray) -> float | None:
    return float(values.mean()) if values.size else None


def switch_marks(telemetry: TelemetryLog, links: Sequence[str] | None = None) -> int:
    """ecn_marked the switch counted: on every port, or on the named links only."""
    if links is None:
        return sum(row.ecn_marked_packets for row in telemetry.ports)
    wanted = set(links)
    return sum(row.ecn_marked_packets for row in telemetry.links if row.link in wanted)


def summarise(run: SchedulerRun) -> dict[str, Any]:
    """The `schedulers.<name>` object of summary.json (the issue's schema)."""
    jobs = job_iterations(run.records)
    all_times = np.concatenate([j.iteration_ms for j in jobs.values()]) if jobs else np.array([])
    host = [float(np.nansum(j.ce_marks)) for j in jobs.values() if not np.all(np.isnan(j.ce_marks))]
    duration_min = run.wall_s / 60.0 if run.wall_s > 0 else None
    verdict_ = run.verdict
    return {
        "mean_iteration_ms": _mean(all_times),
        "p99_iteration_ms": _p99(all_times),
        "iterations": int(all_times.size),
        "ecn_marks": switch_marks(run.telemetry),
        "ecn_marks_shared_links": switch_marks(run.telemetry, list(run.shared_links)),
        "shared_links": {k: list(v) for k, v in run.shared_links.items()},
        "host_ce_marks": int(sum(host)) if host else None,
        "sim_mean_iteration_ms": run.plan.sim_mean_ms,
        "sim_p99_iteration_ms": run.plan.sim_p99_ms,
        "trustworthy": verdict_.trustworthy,
        "fidelity": {**run.fidelity.as_dict(), **verdict_.as_dict()},
        "partial": run.partial,
        "error": run.error,
        "wall_s": round(run.wall_s, 3),
        "schedule": dict(run.schedule),
        "jobs": {
            name: {
                "model": j.model,
                "workers": j.workers,
                "iterations": int(j.iteration_ms.size),
                "mean_iteration_ms": _mean(j.iteration_ms),
                "p99_iteration_ms": _p99(j.iteration_ms),
                "sim_mean_iteration_ms": run.plan.sim_job_mean_ms.get(name),
                "ce_marks": None if np.all(np.isnan(j.ce_marks)) else int(np.nansum(j.ce_marks)),
                "adjustments": j.adjustments,
                "adjustments_per_minute": (
                    round(j.adjustments / duration_min, 3) if duration_min else None
                ),
            }
            for name, j in jobs.items()
        },
        **dict(run.extra),
    }
