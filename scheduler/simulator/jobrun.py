"""What does the simulator keep about one job while components form and dissolve around it?

A component (`component`) lives from one scheduler decision to the next; a
job outlives it. `JobRun` is the job's record across them (its iterations,
counters, agent period), `Carry` the state of its in-flight iteration when a
decision regroups it without moving it, and `Member` what a new component is
given for each of its jobs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from scheduler.workloads.traces import TraceJob
from scheduler.workloads.types import Profile

from .results import FloatArray


class JobRun:
    """A job's mutable bookkeeping across components (records, counters)."""

    __slots__ = (
        "trace",
        "starts",
        "ends",
        "ideal",
        "work_done",
        "work_per_iter",
        "servers",
        "since_s",
        "grid_period",
        "finish_ms",
        "adjustments",
        "migrations",
        "carry",
        "resume_ms",
        "load_links",
        "load_gbps",
        "marked_mbit",
    )

    def __init__(self, trace: TraceJob) -> None:
        self.trace = trace
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.ideal: list[float] = []  # profile iteration time alone, per record
        self.work_done = 0.0
        self.work_per_iter = 1.0
        self.servers: tuple[str, ...] = ()
        self.since_s = 0.0
        self.grid_period = math.nan  # the agent's pacing period; nan: runs free
        self.finish_ms: float | None = None
        self.adjustments = 0
        self.migrations = 0
        self.carry: Carry | None = None  # in-flight iteration state when unchanged
        self.resume_ms = 0.0  # earliest time the next iteration may start
        self.load_links: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self.load_gbps = 0.0  # peak per-flow demand this job puts on each of load_links
        self.marked_mbit = 0.0  # sent through oversubscribed links (the ECN stand-in)

    def iterations_left(self) -> int:
        """Whole iterations still to run at the current work per iteration."""
        return math.ceil((self.trace.iterations - self.work_done) / self.work_per_iter - 1e-9)


@dataclass
class Carry:
    """A job's in-flight iteration, handed from a dissolved component to the next."""

    mode: int
    phase: int
    down_rem: float
    wait_until: float
    iter_start: float
    flow_rem: FloatArray
    grid_due: float


@dataclass
class Member:
    """One job as a new component takes it: its run, profile, routes and grid."""

    run: JobRun
    profile: Profile
    flows: list[list[int]]  # per flow, global link ids
    first_due: float  # first grid point of a new schedule; nan: no grid, or keep the carried one
    new_grid: bool  # a new schedule replaces the carried grid
    alone_ms: float = 0.0  # iteration time alone when `profile` is a time-shared one; 0: its own
    flow_class: tuple[int, ...] = ()  # per flow, a network policy's class (higher first); (): all 0
