"""Data that crosses the scheduler's boundary: profiles, jobs, placements, schedules.

Frozen dataclasses so they can be hashed, compared and shipped to worker
processes; the algorithms that use them are pure functions elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Phase:
    """One stretch of an iteration with constant network demand per worker."""

    duration_ms: float
    gbps: float


@dataclass(frozen=True)
class Profile:
    """A job's network demand over one training iteration.

    `phases` cover exactly `iteration_ms`; `gbps` is the demand of one worker's
    traffic on each link it uses (ring neighbours for data parallel).
    """

    name: str
    model: str
    parallelism: str  # "data", "pipeline", "tensor" or "hybrid"
    workers: int
    iteration_ms: float
    phases: tuple[Phase, ...]
    batch_size: int = 0
    # Measured profiles: how much longer than its phase the Up phase runs at its 95th
    # percentile (plus the samples' resolution). Cassini plans paced grids with the Up
    # phase that long (`scheduler.workloads.up_slack.with_long_up`); the simulator runs the
    # phases as they are.
    up_slack_ms: float = 0.0
    # The GPU's compute per iteration (forward and backward), where it is known (derived
    # profiles; 0: unknown, as in measured ones): what `gpu_busy` is taken from.
    compute_ms: float = 0.0

    @property
    def gpu_busy(self) -> float | None:
        """The fraction of an iteration the GPU computes, alone (None: compute unknown)."""
        return self.compute_ms / self.iteration_ms if self.compute_ms > 0 else None

    @property
    def peak_gbps(self) -> float:
        """The highest demand of any phase: what the job can add to a link at worst."""
        return max((p.gbps for p in self.phases), default=0.0)

    def up_fraction(self) -> float:
        busy = sum(p.duration_ms for p in self.phases if p.gbps > 0)
        return busy / self.iteration_ms


@dataclass(frozen=True)
class Job:
    """A job to place: which profile, how many workers, how long it runs."""

    name: str
    profile: Profile
    workers: int
    iterations: int = 1000
    arrival_s: float = 0.0


# A placement maps job name -> the servers its workers run on (one per GPU slot,
# so a 2-GPU server may appear twice).
Placement = Mapping[str, tuple[str, ...]]


@dataclass(frozen=True)
class Schedule:
    """Cassini's answer: where jobs run, how much each delays its iterations,
    and the period each paced agent keeps (jobs absent from it run free).
    Any scheduler's decision hands its schedule on in this form (`Decision.as_schedule`)."""

    placement: Mapping[str, tuple[str, ...]]
    shifts_ms: Mapping[str, float]
    link_scores: Mapping[str, float] = field(default_factory=dict)
    score: float = 1.0
    periods_ms: Mapping[str, float] = field(default_factory=dict)
    groups: tuple[tuple[str, ...], ...] = ()  # jobs whose shifts only matter relative to each other
    models: Mapping[str, str] = field(default_factory=dict)  # job -> model, where known
    # jobs time-sharing GPU slots, each group in stage order (`scheduler.cassini.timeshare`)
    sharing: tuple[tuple[str, ...], ...] = ()
