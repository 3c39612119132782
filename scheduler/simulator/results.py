"""What does one simulation run measure? Its settings and its results.

Congestion stand-in for ECN marks: per directed link, the time during which
the offered demand (sum of the active flows' line-rate demands) exceeds
capacity, and the Mbit offered beyond capacity (integral of the excess). A
switch would mark ECN in exactly those periods; the simulator has no queues,
so it reports these as "oversubscribed ms" and "excess Mbit", not as marks.
Per job, "marked Mbit" is the traffic it sent through a link while that link
was oversubscribed: the packets a marking switch would have marked, which is
how the paper counts a job's ECN marks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from topologies.model import DirectedLink

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class SimSettings:
    """Knobs of one simulation run (recorded in the run metadata)."""

    fast_forward: bool = True
    warmup_iterations: int = 2
    window_iterations: int = 8
    drift_sigma: float = 0.0
    realign_tolerance: float = 0.05
    bucket_s: float = 5.0
    horizon_s: float = 60.0
    seed: int = 0
    max_sim_s: float = 10.0 * 24 * 3600


@dataclass(frozen=True)
class JobResult:
    """Everything measured about one job."""

    name: str
    model: str
    workers: int
    arrival_s: float
    finish_s: float
    iteration_start_ms: FloatArray
    iteration_end_ms: FloatArray
    ideal_iteration_ms: FloatArray
    adjustments: int
    migrations: int
    marked_mbit: float = 0.0

    @property
    def completion_s(self) -> float:
        return self.finish_s - self.arrival_s

    @property
    def iteration_ms(self) -> FloatArray:
        return self.iteration_end_ms - self.iteration_start_ms

    @property
    def slowdown(self) -> FloatArray:
        """Each iteration's time over the same job's time alone at that size."""
        return self.iteration_ms / self.ideal_iteration_ms


@dataclass(frozen=True)
class LinkSeries:
    """Per directed link, per time bucket: carried Mbit, oversubscribed ms, excess Mbit."""

    links: tuple[DirectedLink, ...]
    capacity_gbps: FloatArray
    bucket_s: float
    carried_mbit: FloatArray
    oversub_ms: FloatArray
    excess_mbit: FloatArray

    def utilization(self) -> FloatArray:
        """Fraction of capacity used per bucket and link."""
        return self.carried_mbit / (self.capacity_gbps[None, :] * self.bucket_s * 1e3)


@dataclass(frozen=True)
class SimResult:
    scheduler: str
    jobs: tuple[JobResult, ...]
    links: LinkSeries
    events: int
    decisions: int
    simulated_ms: float
    fast_forwarded_ms: float
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def makespan_s(self) -> float:
        """From the first arrival to the last job's end: the time to train every job."""
        return makespan_s(self.jobs)

    @property
    def mean_jct_s(self) -> float:
        """Mean job completion time, arrival to end (queueing included)."""
        return float(np.mean([j.completion_s for j in self.jobs])) if self.jobs else 0.0

    @property
    def comm_overhead(self) -> float:
        """Share of all iteration time above the jobs' profiles alone (`communication_overhead`)."""
        return communication_overhead(self.jobs)


def makespan_s(jobs: tuple[JobResult, ...]) -> float:
    """Last end minus first arrival; 0 without jobs.

    >>> z = np.zeros(0)
    >>> makespan_s((JobResult("a", "m", 1, 10.0, 50.0, z, z, z, 0, 0),
    ...             JobResult("b", "m", 1, 20.0, 90.0, z, z, z, 0, 0)))
    80.0
    """
    if not jobs:
        return 0.0
    return max(j.finish_s for j in jobs) - min(j.arrival_s for j in jobs)


def communication_overhead(jobs: tuple[JobResult, ...]) -> float:
    """Time iterations took beyond their profile alone, over all iteration time.

    The profile's time alone already holds the job's own communication, so
    what is above it is what sharing the network added (contention, and for
    Cassini's agents the pacing idle): the stand-in for the communication
    overhead under congestion that delay-scheduling papers report. An
    iteration faster than its profile counts 0.

    >>> z = np.zeros(0)
    >>> j = JobResult("a", "m", 1, 0.0, 1.0, np.array([0.0, 100.0]), np.array([100.0, 250.0]),
    ...               np.array([100.0, 100.0]), 0, 0)
    >>> communication_overhead((j,))   # 50 ms above the profile out of 250 ms
    0.2
    """
    total = sum(float(j.iteration_ms.sum()) for j in jobs)
    extra = sum(float(np.maximum(j.iteration_ms - j.ideal_iteration_ms, 0.0).sum()) for j in jobs)
    return extra / total if total > 0 else 0.0


class LinkStats:
    """Run-wide per-link buckets, filled when components dissolve."""

    def __init__(self, n_links: int) -> None:
        self.n_links = n_links
        self.rows: dict[int, FloatArray] = {}

    def add(self, bucket: int, links: npt.NDArray[np.int64], row: FloatArray) -> None:
        dest = self.rows.get(bucket)
        if dest is None:
            dest = np.zeros((3, self.n_links))
            self.rows[bucket] = dest
        dest[:, links] += row

    def series(
        self, links: tuple[DirectedLink, ...], caps: FloatArray, bucket_s: float
    ) -> LinkSeries:
        n_b = (max(self.rows) + 1) if self.rows else 1
        data = np.zeros((3, n_b, self.n_links))
        for b, row in self.rows.items():
            data[:, b, :] = row
        return LinkSeries(links, caps, bucket_s, data[0], data[1], data[2])
