"""What did one `cassini emulate` run measure, per scheduler, as plain data?

`SchedulerRun` is one scheduler's measurement on the fabric (the replicas'
iteration records, the switch's counter series, the fidelity figures) beside
its plan (`plan.SchedulerPlan`: decisions and the simulator's prediction).
The figures a report states are functions of these (`job_iterations`,
`summarise`), so the summary, the CSVs and the plots cannot disagree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from controlplane.telemetry import TelemetryLog
from emulation.jobs.records import IterationRecord
from emulation.jobs.run_result import RunResult
from emulation.jobs.telemetry_rows import overlap

from .fidelity import FidelityFigures, Verdict, verdict
from .plan import SchedulerPlan

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class SchedulerRun:
    """One scheduler's run on the fabric: its plan and what `run_schedule` measured."""

    scheduler: str
    plan: SchedulerPlan
    result: RunResult
    shared_links: Mapping[str, tuple[str, ...]]  # "a->b" -> jobs crossing it
    link_gbps: Mapping[str, float] = field(default_factory=dict)  # scaled rate per link
    switch_lateness: Mapping[str, Any] = field(default_factory=dict)  # the switch's figures

    @property
    def telemetry(self) -> TelemetryLog:
        return TelemetryLog(list(self.result.ports), list(self.result.links))

    @property
    def records(self) -> tuple[IterationRecord, ...]:
        return self.result.records

    @property
    def partial(self) -> bool:
        """Interrupted, or a job failed: what the report shows is what completed."""
        return self.result.interrupted is not None or self.result.error is not None

    @property
    def fidelity(self) -> FidelityFigures:
        return fidelity_figures(self.result.fidelity, self.switch_lateness)

    @property
    def verdict(self) -> Verdict:
        return verdict(self.fidelity)


def fidelity_figures(
    measured: Mapping[str, Any], lateness: Mapping[str, Any] | None = None
) -> FidelityFigures:
    """The monitor's figures from `RunResult.fidelity` (CPU, and the replicas' lateness
    under "hosts") and the switch's lateness figures.

    >>> f = fidelity_figures({"switch_cpu_cores": 0.4, "machine_cpu": {"busy": 0.7},
    ...                       "hosts": {"host_iterations": 8, "host_late_iterations": 1}},
    ...                      {"frames": 10, "late_frames": 1})
    >>> f.switch_cpu_mean, f.machine_cpu_mean, f.late_frames, f.host_late_iterations
    (0.4, 0.7, 1, 1)
    """
    names = FidelityFigures.__dataclass_fields__
    late = dict(lateness or {})
    known = {k: late.pop(k) for k in list(late) if k in names}
    hosts = {k: v for k, v in (measured.get("hosts") or {}).items() if k in names}
    machine = measured.get("machine_cpu") or {}
    return FidelityFigures(
        **known,
        **hosts,
        machine_cpu_mean=machine.get("busy"),
        machine_steal=machine.get("steal"),
        switch_cpu_mean=measured.get("switch_cpu_cores"),
        extra={**{k: v for k, v in measured.items() if k not in ("machine_cpu", "hosts")},
               **late},
    )  # fmt: skip


@dataclass(frozen=True)
class JobIterations:
    """One job's iterations as a whole (every worker's record of iteration k together)."""

    job: str
    model: str
    workers: int
    iteration_ms: FloatArray  # per iteration: the mean of its workers' iteration times
    ce_marks: FloatArray  # per iteration: CE-marked packets its workers received (NaN: uncounted)
    adjustments: int  # iterations after which an agent of the job re-aligned


def job_iterations(records: Iterable[IterationRecord]) -> dict[str, JobIterations]:
    """Per job, its iterations in order; an iteration only some workers finished is dropped.

    >>> r = [IterationRecord("a", "vgg19", w, 0, 10.0 + w, 20.0 + 2 * w, 1, 5.0, 0.0, w == 1, 3)
    ...      for w in range(2)]
    >>> it = job_iterations(r)["a"]
    >>> it.iteration_ms.tolist(), it.ce_marks.tolist(), it.adjustments
    ([10.5], [6.0], 1)
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
            times.append(sum(r.iteration_ms for r in recs) / len(recs))
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


def link_marks(telemetry: TelemetryLog, links: Sequence[str]) -> int:
    """ecn_marked the switch counted on the named links (all ports: `RunResult.switch_ecn_marked`)."""
    wanted = set(links)
    return sum(row.ecn_marked_packets for row in telemetry.links if row.link in wanted)


# The switch's sampling interval, for runs whose telemetry does not say (none collected).
SAMPLE_INTERVAL_S = 0.01


def link_overlap(run: SchedulerRun) -> dict[str, Any]:
    """The overlap on each shared link (`telemetry_rows.overlap`: of the samples in which a
    job used more than a quarter of the link, the fraction in which two or more did),
    and pooled over the shared links; capacities are the topology's, as the fabric scales
    them (`link_gbps`). None where a link was never busy or no telemetry was collected.

    >>> from emulation.jobs.telemetry_rows import TelemetryRow
    >>> rows = [TelemetryRow(0.01, "l", j, 40_000, 1, 0) for j in "ab"]
    >>> rows += [TelemetryRow(0.02, "l", "a", 40_000, 1, 0)]
    >>> link_overlap_of(rows, {"l": ("a", "b")}, {"l": 0.05}, 0.01)
    {'overlap': {'l': 0.5}, 'overlap_shared_links': 0.5, 'overlap_samples': {'l': [2, 1]}}
    """
    interval = run.result.telemetry_info.get("interval_s") or SAMPLE_INTERVAL_S
    return link_overlap_of(run.result.telemetry, run.shared_links, run.link_gbps, interval)


def link_overlap_of(
    rows: Sequence[Any],
    shared: Mapping[str, Sequence[str]],
    link_gbps: Mapping[str, float],
    interval_s: float,
) -> dict[str, Any]:
    """`link_overlap` over telemetry rows (see there)."""
    if not rows:
        return {"overlap": dict.fromkeys(shared), "overlap_shared_links": None,
                "overlap_samples": {}}  # fmt: skip
    found = overlap(rows, {k: link_gbps[k] for k in shared if k in link_gbps}, interval_s)
    busy = sum(o.busy_samples for o in found.values())
    both = sum(o.overlapped_samples for o in found.values())
    return {
        "overlap": {k: None if o.fraction is None else round(o.fraction, 4)
                    for k, o in sorted(found.items())},
        "overlap_shared_links": round(both / busy, 4) if busy else None,
        "overlap_samples": {k: [o.busy_samples, o.overlapped_samples]
                            for k, o in sorted(found.items())},
    }  # fmt: skip


def summarise(run: SchedulerRun) -> dict[str, Any]:
    """The `schedulers.<name>` object of summary.json (the issue's schema).

    Per job the figures are the runner's (`emulation.jobs.run_result.summarize_job`);
    the scheduler's mean and p99 are over every worker's iterations, the same
    definition one level up.
    """
    result = run.result
    times = np.array([r.iteration_ms for r in result.records], dtype=float)
    verdict_ = run.verdict
    return {
        "mean_iteration_ms": _mean(times),
        "p99_iteration_ms": _p99(times),
        "iterations": int(times.size),
        "ecn_marks": result.switch_ecn_marked,
        "ecn_marks_shared_links": link_marks(run.telemetry, list(run.shared_links)),
        "shared_links": {k: list(v) for k, v in run.shared_links.items()},
        **link_overlap(run),
        "telemetry": dict(result.telemetry_info),
        "network_policy": dict(result.network_policy),
        "host_ce_marks": result.host_ce_marks,
        "sim_mean_iteration_ms": run.plan.sim_mean_ms,
        "sim_p99_iteration_ms": run.plan.sim_p99_ms,
        "trustworthy": verdict_.trustworthy,
        "fidelity": {**run.fidelity.as_dict(), **verdict_.as_dict()},
        "partial": run.partial,
        "error": result.error,
        "interrupted": result.interrupted,
        "duration_s": round(result.duration_s, 3),
        "schedule": result.schedule(),
        "jobs": {
            s.name: {
                **asdict(s),
                "servers": list(s.servers),
                "sim_mean_iteration_ms": run.plan.sim_job_mean_ms.get(s.name),
            }
            for s in result.summaries
        },
    }
