"""What did one schedule's run on the fabric measure, per job and in all?

`RunResult` is what `supervisor.run_schedule` returns (frozen): the
records, the counter series, per-job summaries (`summarize_job`, pure) and
fidelity figures; `Progress` is what its progress callback is told.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from controlplane.telemetry import LinkDelta, PortDelta

from .launch import JobPlan
from .records import IterationRecord, job_adjustments
from .run_settings import RunSettings


@dataclass(frozen=True)
class Progress:
    """What a progress callback is told about once a second."""

    elapsed_s: float
    records: int  # iterations recorded, summed over workers
    expected: int  # iterations x workers
    ecn_marked: int  # switch ecn_marked so far


@dataclass(frozen=True)
class JobSummary:
    """One job's figures over the run."""

    name: str
    model: str
    workers: int
    servers: tuple[str, ...]
    iterations: int  # iterations every worker recorded
    profile_iteration_ms: float
    mean_iteration_ms: float | None
    p99_iteration_ms: float | None
    ce_marks: int | None  # None: the replicas do not count CE
    adjustments: int
    adjustments_per_minute: float
    error: str | None = None


@dataclass(frozen=True)
class RunResult:
    """Everything one `run_schedule` call measured."""

    jobs: tuple[JobPlan, ...]
    summaries: tuple[JobSummary, ...]
    records: tuple[IterationRecord, ...]
    ports: tuple[PortDelta, ...]
    links: tuple[LinkDelta, ...]
    settings: RunSettings
    scale: float
    emulation_profile: str
    duration_s: float
    fidelity: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    interrupted: str | None = None  # the signal that stopped the run early

    @property
    def switch_ecn_marked(self) -> int:
        """The sum of every port's ecn_marked deltas over the run."""
        return sum(r.ecn_marked_packets for r in self.ports)

    @property
    def host_ce_marks(self) -> int | None:
        counted = [r.ce_marks for r in self.records if r.ce_marks is not None]
        return sum(counted) if counted else None

    def schedule(self) -> dict[str, Any]:
        """The schedule that ran, in the schedule file's keys."""
        return {
            "placement": {j.name: list(j.servers) for j in self.jobs},
            "shifts_ms": {j.name: j.shift_ms for j in self.jobs},
            "periods_ms": {j.name: j.period_ms for j in self.jobs if j.period_ms is not None},
            "models": {j.name: j.model for j in self.jobs},
        }

    def summary(self) -> dict[str, Any]:
        """summary.json."""
        return {
            "jobs": {s.name: asdict(s) for s in self.summaries},
            "switch_ecn_marked": self.switch_ecn_marked,
            "host_ce_marks": self.host_ce_marks,
            "duration_s": round(self.duration_s, 3),
            "error": self.error,
            "interrupted": self.interrupted,
            "settings": asdict(self.settings),
            "emulation_profile": {
                "scale": self.scale,
                "lines": self.emulation_profile.splitlines(),
            },
            "schedule": self.schedule(),
            "fidelity": self.fidelity,
        }


def summarize_job(
    job: JobPlan, records: Sequence[IterationRecord], error: str | None = None
) -> JobSummary:
    """A job's figures from its records (every worker's iterations count once each)."""
    mine = [r for r in records if r.job == job.name]
    times = np.array([r.iteration_ms for r in mine], dtype=float)
    per_worker = [sum(1 for r in mine if r.worker == w) for w in range(job.workers)]
    ce = [r.ce_marks for r in mine if r.ce_marks is not None]
    # One definition of a job's adjustments (records.job_adjustments: its busiest worker).
    counted = job_adjustments(mine).get(job.name)
    adjustments = counted.adjustments if counted else 0
    return JobSummary(
        name=job.name,
        model=job.model,
        workers=job.workers,
        servers=job.servers,
        iterations=min(per_worker, default=0),
        profile_iteration_ms=round(job.profile.iteration_ms, 3),
        mean_iteration_ms=round(float(times.mean()), 3) if times.size else None,
        p99_iteration_ms=round(float(np.percentile(times, 99)), 3) if times.size else None,
        ce_marks=sum(ce) if ce else None,
        adjustments=adjustments,
        adjustments_per_minute=round(counted.per_minute, 3) if counted else 0.0,
        error=error,
    )
