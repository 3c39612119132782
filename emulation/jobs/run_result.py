"""What did one schedule's run on the fabric measure, per job and in all?

`RunResult` is what `supervisor.run_schedule` returns (frozen): the
records, the counter series, per-job summaries (`summarize_job`, pure) and
fidelity figures; `Progress` is what its progress callback is told.
`host_lateness` (pure) is the fidelity monitor's host witness over a run's
records (`emulation.emulate.fidelity` judges it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from controlplane.telemetry import LinkDelta, PortDelta

from .launch import JobPlan
from .records import IterationRecord, job_adjustments
from .run_settings import RunSettings
from .telemetry_rows import QueueRow, TelemetryRow
from .witness_limits import HOST_LATE_MS, SLOW_PACE


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
    cnps: int | None = None  # RoCE: CNPs its receivers sent; None under TCP


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
    # The switch's 10 ms per-job samples (telemetry.csv, queues.csv: `telemetry_rows`)
    # and how they were measured (source, samples, lost_samples, rate_hz, interval_s).
    telemetry: tuple[TelemetryRow, ...] = ()
    queues: tuple[QueueRow, ...] = ()
    telemetry_info: dict[str, Any] = field(default_factory=dict)
    # The network policy and, per segment, its flow classes (`policy_entries.run_record`)
    network_policy: dict[str, Any] = field(default_factory=dict)

    @property
    def switch_ecn_marked(self) -> int:
        """The sum of every port's ecn_marked deltas over the run."""
        return sum(r.ecn_marked_packets for r in self.ports)

    @property
    def host_ce_marks(self) -> int | None:
        counted = [r.ce_marks for r in self.records if r.ce_marks is not None]
        return sum(counted) if counted else None

    @property
    def drops(self) -> int:
        """Every loss the switch's ports counted over the run (`PortDelta.lost_packets`)."""
        return sum(r.lost_packets for r in self.ports)

    @property
    def cnps(self) -> int | None:
        """The CNPs the replicas' receivers sent over the run; None under TCP."""
        return _total(r.cnps for r in self.records)

    @property
    def pfc_pause_frames(self) -> int | None:
        """The switch's pause frames the hosts' RoCE senders honoured; None under TCP."""
        return _total(r.pfc_pause_frames for r in self.records)

    @property
    def pfc_paused_ms(self) -> float | None:
        """How long those pauses stopped the hosts' senders, summed; None under TCP."""
        paused = _total(r.pfc_paused_ms for r in self.records)
        return None if paused is None else round(paused, 3)

    @property
    def switch_pfc_pauses(self) -> int | None:
        """The pause frames the switch's ports sent over the run (refreshes included; a
        pause between logical switches counts once), from gNMI; None without it."""
        return _total(r.pfc_pauses_sent for r in self.ports)

    @property
    def switch_pfc_paused_ms(self) -> float | None:
        """How long the switch held its ports' ingress paused, summed over ports (gNMI)."""
        paused = _total(r.pfc_paused_us for r in self.ports)
        return None if paused is None else round(paused / 1e3, 3)

    def schedule(self) -> dict[str, Any]:
        """The schedule that ran, in the schedule file's keys."""
        doc: dict[str, Any] = {
            "placement": {j.name: list(j.servers) for j in self.jobs},
            "shifts_ms": {j.name: j.shift_ms for j in self.jobs},
            "periods_ms": {j.name: j.period_ms for j in self.jobs if j.period_ms is not None},
            "models": {j.name: j.model for j in self.jobs},
        }
        groups = dict.fromkeys(j.sharing for j in self.jobs if j.sharing)
        return doc | ({"sharing": [list(g) for g in groups]} if groups else {})

    def summary(self) -> dict[str, Any]:
        """summary.json."""
        return {
            "jobs": {s.name: asdict(s) for s in self.summaries},
            "switch_ecn_marked": self.switch_ecn_marked,
            "host_ce_marks": self.host_ce_marks,
            "drops": self.drops,
            "pfc_pause_frames": self.pfc_pause_frames,
            "pfc_paused_ms": self.pfc_paused_ms,
            "switch_pfc_pauses": self.switch_pfc_pauses,
            "switch_pfc_paused_ms": self.switch_pfc_paused_ms,
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
            "telemetry": self.telemetry_info,
            "network_policy": self.network_policy,
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
        cnps=_total(r.cnps for r in mine),
    )


def _total(values: Iterable[int | float | None]) -> Any:
    """The sum of the values counted; None when none was (not measured)."""
    counted = [v for v in values if v is not None]
    return sum(counted) if counted else None


def host_lateness(
    records: Sequence[IterationRecord], late_ms: float = HOST_LATE_MS, slow: float = SLOW_PACE
) -> dict[str, Any]:
    """The host witness of a run (`fidelity.FidelityFigures`' host fields) from its records.

    An iteration's wake-up lateness is its latest wake-up (`late_max_ms`, our
    choice: a single late wake is what a starved host shows, while the sum grows
    with the number of Down phases a profile has). An Up phase is judged only when
    nothing was in its way, our choice: no worker of its job received a CE mark
    in that iteration (a mark slows the whole ring, so the job's marks count, not
    the worker's own), nor in any other iteration of the run (a job ever marked
    shares a bottleneck, and sharing halves a phase's rate with or without a
    mark: the shift benchmark's aligned pair ran unmarked phases at 50-66% of
    their pacing rate); nor a job a PFC pause ever stopped (RoCE: a pause stops
    the sender for the network's reason, and spreads hop by hop to flows that share
    no congested link, PFC's victim flows); losses are not counted (the switch marks
    long before it drops). Iterations whose marks were not counted are not judged. Figures of records without the
    fields (written before them) are None: not measured.

    >>> r = [IterationRecord(j, "m", w, k, 0.0, 1.0, 0, 0.0, 0.0, False, k * (j == "b"),
    ...                      late_ms=6.0 if (w, k) == (0, 0) else 0.5,
    ...                      late_max_ms=6.0 if (w, k) == (0, 0) else 0.5,
    ...                      up_pace=(0.5 if w == 1 else 0.95,))
    ...      for j in "ab" for w in (0, 1) for k in range(2)]
    >>> f = host_lateness(r)  # worker 0 woke 6 ms late in iteration 0; worker 1 at half rate
    >>> f["host_iterations"], f["host_late_iterations"], f["host_late_p99_ms"]
    (8, 2, 6.0)
    >>> f["up_phases"], f["slow_up_phases"]  # job b was marked (iteration 1): not judged
    (4, 2)
    """
    woke = [r.late_max_ms for r in records if r.late_max_ms is not None]
    marked = {r.job for r in records if r.ce_marks or r.pfc_pause_frames}
    uncounted = {(r.job, r.iteration) for r in records if r.ce_marks is None}
    paces = [
        p
        for r in records
        if r.up_pace is not None and r.job not in marked and (r.job, r.iteration) not in uncounted
        for p in r.up_pace
    ]
    measured_pace = any(r.up_pace is not None for r in records)
    return {
        "host_iterations": len(woke) if woke else None,
        "host_late_iterations": sum(1 for w in woke if w > late_ms) if woke else None,
        "host_late_p99_ms": round(float(np.percentile(woke, 99)), 3) if woke else None,
        "up_phases": len(paces) if measured_pace else None,
        "slow_up_phases": sum(1 for p in paces if p < slow) if measured_pace else None,
    }
