"""How does one schedule run on the fabric: iterations, deadline, drift rule, polling?"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .agent import DEFAULT_DRIFT_FRACTION
from .launch import BASE_PORT, JobPlan

# kernel TCP with ECN (`transport`), or RoCEv2 with DCQCN and PFC (`roce_links`)
TRANSPORTS = ("tcp", "roce")
# Network policies the fabric runs: none; MLTCP (issue 30), the replicas' RoCE
# DCQCN with an iteration-aware increase (`roce.mltcp`) and no agent pacing; Crux and
# EchelonFlow's classes as queue_class_by_flow entries over TCP (`policy_entries`)
FABRIC_POLICIES = ("none", "mltcp", "crux", "echelon")
CLASS_POLICIES = ("crux", "echelon")
# (our choice) Without a deadline a run may take 3x its ideal time plus 30 s
# to connect: long enough for a contended job, short enough that a stall ends.
DEADLINE_FACTOR = 3.0
STARTUP_ALLOWANCE_S = 30.0


@dataclass(frozen=True)
class RunSettings:
    """How one schedule runs: iterations, deadline, agents' drift rule, polling."""

    iterations: int = 40
    deadline_s: float | None = None  # None: DEADLINE_FACTOR x the ideal run + STARTUP_ALLOWANCE_S
    drift_fraction: float | None = DEFAULT_DRIFT_FRACTION  # None: the drift rule is off
    poll_interval_s: float = 0.5  # counter snapshots
    socket_timeout_s: float = 5.0  # a silent peer is lost after this long
    transport: str = "tcp"
    gnmi: bool = True  # also read the interface counters (loss by cause)
    base_port: int = BASE_PORT
    policy: str = "none"  # one of FABRIC_POLICIES

    def __post_init__(self) -> None:
        if self.iterations < 1:
            raise ValueError(f"iterations must be >= 1, got {self.iterations}")
        if self.transport not in TRANSPORTS:
            raise ValueError(f"transport {self.transport!r}: one of {', '.join(TRANSPORTS)}")
        if self.policy not in FABRIC_POLICIES:
            raise ValueError(f"policy {self.policy!r}: one of {', '.join(FABRIC_POLICIES)}")
        if self.policy == "mltcp" and self.transport != "roce":
            raise ValueError(f"policy mltcp needs transport roce, not {self.transport!r}")
        if self.policy in CLASS_POLICIES and self.transport != "tcp":
            raise ValueError(f"policy {self.policy} needs transport tcp, not {self.transport!r}")
        if self.poll_interval_s <= 0 or self.socket_timeout_s <= 0:
            raise ValueError("poll_interval_s and socket_timeout_s must be > 0")

    def deadline_for(self, jobs: Sequence[JobPlan]) -> float:
        """Seconds the run may take (see `deadline_s`)."""
        if self.deadline_s is not None:
            return self.deadline_s
        slowest = max(max(j.period_ms or 0.0, j.profile.iteration_ms) for j in jobs)
        return DEADLINE_FACTOR * self.iterations * slowest / 1e3 + STARTUP_ALLOWANCE_S
