"""How long does every iteration take under a scheduler? The fluid simulator.

Event-driven, not time-stepped. Each running job cycles through its profile's
phases. In an Up phase every flow of the job (src -> dst server pair, routed
over directed links) must send `gbps x duration` Mbit; flows share links
max-min fairly (`fluid.max_min_rates`), each capped at its phase's line-rate
demand, so a phase lasts until its slowest flow has sent its bytes and
contention stretches iterations. Down phases last their profile time.
Between two events every rate is constant, so time jumps from event to event.

Independence: jobs that share no link cannot slow each other, so running jobs
are grouped into components (connected through shared links) that simulate
independently; a scheduler decision rebuilds only the components it touches.
Inside a component the same holds at each instant for flows joined by links
whose offered demand reaches capacity, so an event re-solves max-min only for
the group of flows it changed (exact). The event loop itself is compiled
(`fluid_events`); Python handles what happens once per iteration.

Fast-forward (documented approximation, on by default, `fast_forward=False`
turns it off): once a component's job set has been unchanged for
`warmup_iterations`, the simulator measures a window in which every job
completes `window_iterations` iterations, then treats the window as the
period of a steady state and skips whole windows at once: iteration records
repeat the window's records shifted by the window length, link counters add
the window's totals (in the per-bucket link series, spread evenly over the
time skipped). Skipping stops two windows before any job of the
component would finish, and never crosses a scheduler decision that touches
the component (the component is rewound and re-simulated exactly to the
decision time instead). The error is bounded by the window's deviation from
true periodicity; tests/test_simulator.py checks it against the exact mode.

Congestion stand-in for ECN marks: per directed link, the time during which
the offered demand (sum of the active flows' line-rate demands) exceeds
capacity, and the Mbit offered beyond capacity (integral of the excess). A
switch would mark ECN in exactly those periods; the simulator has no queues,
so it reports these as "oversubscribed ms" and "excess Mbit", not as marks.
Per job, "marked Mbit" is the traffic it sent through a link while that link
was oversubscribed: the packets a marking switch would have marked, which is
how the paper counts a job's ECN marks.

Agents: a schedule from Cassini gives job j a time-shift t_j and a period
Q_j >= T_j (`scheduler.pacing`) at decision time t; the agent starts
iterations on the grid t + t_j + k x Q_j. A job ready early idles until its
grid point (pacing); a job ready late starts at once. With
`drift_sigma > 0` compute phases are jittered by N(0, sigma) per iteration
and a job later than `realign_tolerance` x Q_j waits for the next grid point
instead, counting one adjustment (the 5% rule). A new job waits exactly t_j;
a running job given a new schedule moves to the new grid after its
in-flight iteration. Jobs without a period (base schedulers, jobs on no
shared link, groups for which running free is as good) run free. An
iteration's time runs from when the job was ready to its end, so agent waits
count against it.
"""

from __future__ import annotations

import bisect
import math
import zlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from topologies.model import DirectedLink, Topology
from topologies.routing import Router

from .baselines.base import Allocation, ClusterView, JobStatus, ProfileBook, Scheduler, slots_used
from .fluid_events import DONE as _DONE
from .fluid_events import DOWN as _DOWN
from .fluid_events import TOL_MS as _TOL_MS
from .fluid_events import UP as _UP
from .fluid_events import WAIT as _WAIT
from .fluid_events import begin_phase, flush_all, log_segment, retime, run_events
from .traces import TraceJob, check_fits
from .types import Profile

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


# ------------------------------------------------------------------ internals


class _JobRun:
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
        self.carry: _Carry | None = None  # in-flight iteration state when unchanged
        self.resume_ms = 0.0  # earliest time the next iteration may start
        self.load_links: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self.load_gbps = 0.0  # peak per-flow demand this job puts on each of load_links
        self.marked_mbit = 0.0  # sent through oversubscribed links (the ECN stand-in)


@dataclass
class _Carry:
    mode: int
    phase: int
    down_rem: float
    wait_until: float
    iter_start: float
    flow_rem: FloatArray
    grid_due: float


@dataclass
class _Member:
    run: _JobRun
    profile: Profile
    flows: list[list[int]]  # per flow, global link ids
    first_due: float  # first grid point of a new schedule; nan: no grid, or keep the carried one
    new_grid: bool  # a new schedule replaces the carried grid


def _row_pointers(rows: npt.NDArray[np.int64], n_rows: int) -> npt.NDArray[np.int64]:
    """CSR pointers of pairs sorted by row: row r's pairs are ptr[r] : ptr[r + 1]."""
    return np.searchsorted(rows, np.arange(n_rows + 1)).astype(np.int64)


# The per-job and per-flow arrays a rewind restores: one list, so state added
# to the component cannot be snapshotted without being restored.
_REWOUND_STATE = (
    "mode",
    "phase",
    "down_rem",
    "wait_until",
    "iter_start",
    "grid_due",
    "flow_rem",
    "flow_on",
    "demand",
    "epoch_iters",
    "tot",
    "job_marked",
)


class _Component:
    """Jobs that may share links, simulated together from `clock` on."""

    always_full = False  # re-solve every flow at every event (the reference the tests use)

    def __init__(
        self,
        members: list[_Member],
        capacity: FloatArray,
        settings: SimSettings,
        clock: float,
        stats: _Stats,
        dedicated: bool,
    ) -> None:
        self.settings = settings
        self.members = members
        self.runs = [m.run for m in members]
        self.stats = stats
        self.dedicated = dedicated
        self.clock = clock
        n = len(members)
        global_links = sorted({lk for m in members for f in m.flows for lk in f})
        local = {g: i for i, g in enumerate(global_links)}
        self.global_links = np.array(global_links, dtype=np.int64)
        self.cap = capacity[self.global_links] if global_links else np.zeros(0)
        flow_job: list[int] = []
        rows: list[list[int]] = []
        share: list[float] = []
        for j, m in enumerate(members):
            # (our choice) A profile's gbps is one worker's NIC demand. Where a
            # worker sends or receives several flows (pipeline stages talk to
            # both neighbours), each flow gets 1 / max(flows its source sends,
            # flows its destination receives), so a job never oversubscribes
            # its own NICs. A flow's first link is its source's NIC uplink and
            # its last link its destination's NIC downlink.
            out_deg = Counter(f[0] for f in m.flows if f)
            in_deg = Counter(f[-1] for f in m.flows if f)
            for f in m.flows:
                flow_job.append(j)
                rows.append([local[g] for g in f])
                share.append(1.0 / max(out_deg[f[0]], in_deg[f[-1]]) if f else 1.0)
        self.flow_job = np.array(flow_job, dtype=np.int64)
        self.flow_share = np.array(share, dtype=np.float64)
        # The incidence as (flow, link) pairs in flow order: a flow crosses a
        # handful of links, so per-event work is proportional to crossings,
        # not flows x links. `ent_ptr[f]:ent_ptr[f + 1]` are flow f's pairs.
        pairs = [(i, lk) for i, r in enumerate(rows) for lk in sorted(set(r))]
        self.ent_flow = np.array([f for f, _ in pairs], dtype=np.int64)
        self.ent_link = np.array([lk for _, lk in pairs], dtype=np.int64)
        self.ent_ptr = _row_pointers(self.ent_flow, len(flow_job))
        # Links whose summed peak demand in this component fits their capacity
        # can never bind: max-min only needs the others (fewer pairs, faster).
        peak = np.array([m.profile.peak_gbps for m in members])
        flow_peak = peak[self.flow_job] * self.flow_share if len(flow_job) else np.zeros(0)
        offered_peak = np.bincount(
            self.ent_link, weights=flow_peak[self.ent_flow], minlength=len(self.cap)
        )
        self.bind = offered_peak > self.cap * (1 + 1e-9)
        bound = self.bind[self.ent_link]
        bind_flow, bind_link = self.ent_flow[bound], self.ent_link[bound]
        self.bf_link = bind_link
        self.bf_ptr = _row_pointers(bind_flow, len(flow_job))
        by_link = np.argsort(bind_link, kind="stable")
        self.bl_flow = bind_flow[by_link]
        self.bl_ptr = _row_pointers(bind_link[by_link], len(global_links))
        # Incremental max-min: an event re-solves only the flows connected to
        # the flows it changed through links tight before or after it
        # (`fluid_events.run_events`); `always_full` re-solves every flow at
        # every event instead (tests compare the two).
        self.need_full = True
        self.prev_want = np.zeros(len(flow_job))
        self.tight = np.zeros(len(global_links), dtype=bool)  # offered demand reaches capacity
        self.offered = np.zeros(len(global_links))  # summed demand of the sending flows
        # the same crossings by link, flows in order: link l's are al_ptr[l] : al_ptr[l + 1]
        by_link_all = np.argsort(self.ent_link, kind="stable")
        self.al_flow = self.ent_flow[by_link_all]
        self.al_ptr = _row_pointers(self.ent_link[by_link_all], len(global_links))
        self.per_ms = np.zeros((3, len(global_links)))
        self.job_flows = [np.flatnonzero(self.flow_job == j) for j in range(n)]
        # a job's flows are contiguous: flows are numbered member by member
        self.flow_lo = np.array([f[0] if len(f) else 0 for f in self.job_flows], dtype=np.int64)
        self.flow_hi = np.array(
            [f[-1] + 1 if len(f) else 0 for f in self.job_flows], dtype=np.int64
        )
        self.has_flows = np.array([len(f) > 0 for f in self.job_flows])
        # every job's phases, end to end: job j's are ph_lo[j] : ph_lo[j] + ph_n[j]
        self.ph_n = np.array([len(m.profile.phases) for m in members], dtype=np.int64)
        self.ph_lo = np.concatenate(([0], np.cumsum(self.ph_n)[:-1])).astype(np.int64)
        self.ph_ms = np.array([p.duration_ms for m in members for p in m.profile.phases])
        self.ph_gbps = np.array([p.gbps for m in members for p in m.profile.phases])
        self.first_ms = self.ph_ms[self.ph_lo].copy() if n else np.zeros(0)  # see _set_first
        self.ended = np.zeros(n, dtype=np.int64)
        self.period = np.array([m.profile.iteration_ms for m in members])
        self.grid_period = np.array([m.run.grid_period for m in members])
        self.mode = np.full(n, _WAIT, dtype=np.int64)
        self.phase = np.zeros(n, dtype=np.int64)
        self.down_rem = np.zeros(n)
        self.wait_until = np.zeros(n)
        self.iter_start = np.zeros(n)
        self.grid_due = np.array([m.first_due for m in members])  # next scheduled start
        self.flow_rem = np.zeros(len(flow_job))
        self.flow_on = np.zeros(len(flow_job), dtype=bool)
        self.demand = np.zeros(len(flow_job))
        self.rates = np.zeros(len(flow_job))
        self.dirty = True
        self.completions: list[tuple[float, int]] = []
        self.events = 0
        self.ff_ms = 0.0
        self.window: _Window | None = None
        self.epoch_iters = np.zeros(n, dtype=np.int64)
        self.w0: tuple[float, FloatArray, FloatArray] | None = None
        self.tot = np.zeros((3, len(global_links)))
        self.job_marked = np.zeros(n)  # Mbit each job sent through oversubscribed links
        self.marked_rate = np.zeros(n)
        # Per time bucket from b0 on: carried Mbit, oversubscribed ms, excess Mbit per link.
        self.bucket_width = settings.bucket_s * 1e3
        self.b0 = int(clock // self.bucket_width)
        self.buckets = np.zeros((1, 3, len(global_links)))
        self.snapshot: dict[str, Any] | None = None
        self.snap_before_jump = False
        for j, m in enumerate(members):
            self._enter(j, m)
        self._reset_epoch()
        # Event times kept absolute so the next event is one `min` away: per
        # flow when it finishes at its current rate (`fin`) and from when it
        # counts as finished (`due`, the completion tolerance), per job its next
        # timed event (end of a compute phase or of a wait; inf otherwise).
        self.fin = np.full(len(flow_job), np.inf)
        self.due = np.full(len(flow_job), np.inf)
        self.fin_min = math.inf
        self.due_min = math.inf
        self.jt = np.full(n, np.inf)
        self.jt_min = math.inf
        self._retime_all()
        self.check_up = True  # an entering job may be Up with every flow already done
        # Counters change only when rates do: each link's since link_t, each
        # job's marked traffic since job_t, logged in one piece when they
        # change or are read.
        self.link_t = np.full(len(global_links), clock)
        self.job_t = np.full(n, clock)
        self.any_sending = False
        self.blocked = False  # the window cannot be skipped until the epoch changes

    # -- setup
    def _enter(self, j: int, m: _Member) -> None:
        carry = m.run.carry
        if carry is not None and len(carry.flow_rem) == len(self.job_flows[j]):
            self.mode[j] = carry.mode
            self.phase[j] = carry.phase
            self.down_rem[j] = carry.down_rem
            self.wait_until[j] = carry.wait_until
            self.iter_start[j] = carry.iter_start
            self.flow_rem[self.job_flows[j]] = carry.flow_rem
            if carry.mode == _UP and self.has_flows[j]:
                fl = self.job_flows[j]
                live = fl[self.flow_rem[fl] > _TOL_MS]
                self.flow_on[live] = True
                gbps = self.ph_gbps[self.ph_lo[j] + carry.phase]
                self.demand[fl] = gbps * self.flow_share[fl]
            if not m.new_grid:
                self.grid_due[j] = carry.grid_due
            else:  # the in-flight iteration ends first; the grid applies from the next
                self.grid_due[j] -= self.grid_period[j]
        else:
            self.mode[j] = _WAIT
            ready = max(self.clock, m.run.resume_ms)
            self.iter_start[j] = ready
            self.wait_until[j] = self._agent_start(j, ready)
        m.run.carry = None
        self._set_first(j)

    def _set_first(self, j: int) -> None:
        """How long job j's next iteration computes before its first phase ends.

        The profile's time, or under drift that time jittered by a draw seeded
        by (run seed, job, iteration number): the same iteration gets the same
        draw however often a rewind re-simulates it.
        """
        dur = float(self.ph_ms[self.ph_lo[j]])
        if self.settings.drift_sigma > 0:
            run = self.runs[j]
            rng = np.random.default_rng(
                [self.settings.seed, zlib.crc32(run.trace.name.encode()), len(run.starts)]
            )
            dur = max(0.0, dur * (1.0 + float(rng.normal(0.0, self.settings.drift_sigma))))
        self.first_ms[j] = dur

    def _agent_start(self, j: int, ready: float) -> float:
        """When job j's agent lets an iteration ready at `ready` start (due: `self.grid_due[j]`).

        Early: at its due grid point (pacing). Late: at once, and with drift
        noise on only if late by at most `realign_tolerance` x period; later
        than that, the next grid point (the 5% rule of section 6 of the
        design), counted as an adjustment. (our choice) Without noise a job is
        late only because contention stretched it; waiting most of a period
        to re-align then costs more than the overlap it avoids (measured:
        mean iteration time 0.93x Themis's with the rule, 1.05x without, on
        Poisson seeds 1-6), so the rule is left to the drift experiments.
        """
        due, q = float(self.grid_due[j]), float(self.grid_period[j])
        if math.isnan(due) or math.isnan(q):
            return ready
        late = ready - due
        if self.settings.drift_sigma <= 0 or late <= self.settings.realign_tolerance * q + _TOL_MS:
            return max(ready, due)
        due += math.ceil(late / q - 1e-9) * q
        self.grid_due[j] = due
        self.runs[j].adjustments += 1
        return due

    def _reset_epoch(self) -> None:
        self.window = None
        self.blocked = False
        self.w0 = None
        self.w0_idx: list[int] = []
        self.epoch_iters = np.array([len(r.starts) for r in self.runs], dtype=np.int64)

    # -- snapshots for rewinding
    def take_snapshot(self) -> None:
        self.snap_before_jump = False
        self._flush()
        self._sync_down()
        bucket_now = int(self.clock // (self.settings.bucket_s * 1e3))
        self.snapshot = {
            "clock": self.clock,
            "arrays": [getattr(self, name).copy() for name in _REWOUND_STATE],
            "records": [len(r.starts) for r in self.runs],
            "work": [r.work_done for r in self.runs],
            "adj": [r.adjustments for r in self.runs],
            "completions": len(self.completions),
            "buckets": self.buckets[max(bucket_now - self.b0, 0) :].copy(),
            "bucket_now": bucket_now,
            "window": self.window,
            "w0": self.w0,
            "w0_idx": list(self.w0_idx),
            "ff": self.ff_ms,
            "blocked": self.blocked,
        }

    def restore(self) -> None:
        snap = self.snapshot
        assert snap is not None
        self.clock = snap["clock"]
        for name, saved in zip(_REWOUND_STATE, snap["arrays"], strict=True):
            setattr(self, name, saved.copy())
        for r, n, w, a in zip(self.runs, snap["records"], snap["work"], snap["adj"], strict=True):
            del r.starts[n:]
            del r.ends[n:]
            del r.ideal[n:]
            r.work_done = w
            r.adjustments = a
            r.finish_ms = (
                None if r.finish_ms is not None and r.finish_ms > self.clock else r.finish_ms
            )
        del self.completions[snap["completions"] :]
        kept = self.buckets[: max(snap["bucket_now"] - self.b0, 0)]
        self.buckets = np.concatenate((kept, snap["buckets"]))
        self.window = snap["window"]
        self.w0 = snap["w0"]
        self.w0_idx = list(snap["w0_idx"])
        self.ff_ms = snap["ff"]
        self.blocked = snap["blocked"]
        self.need_full = True
        self.dirty = True
        self.link_t[:] = self.clock
        self.job_t[:] = self.clock
        self.any_sending = False
        self.fin[:] = np.inf
        self.due[:] = np.inf
        self.fin_min = math.inf
        self.due_min = math.inf
        self._retime_all()
        self.check_up = True
        for j in range(len(self.runs)):
            self._set_first(j)

    # -- the event loop
    def run_until(
        self, limit: float, exact_stop: bool = False, stop_at_completion: bool = False
    ) -> None:
        """Advance to `limit` (forward runs may overshoot by less than one skipped window).

        With `stop_at_completion` it returns right after the first event in
        which a job finished (a scheduler decision is due then).
        """
        done_before = len(self.completions)
        while self.clock < limit - _TOL_MS:
            if not (self.mode != _DONE).any():
                self._flush()
                self.clock = limit
                self.link_t[:] = limit
                self.job_t[:] = limit
                return
            if self.window is not None and not self.blocked and self._try_jump(limit, exact_stop):
                continue
            self._cover_buckets(limit)
            (
                n_ended, self.clock, self.any_sending, self.dirty, self.need_full,
                self.check_up, self.fin_min, self.due_min, self.jt_min, events,
            ) = run_events(
                limit, self.clock, self.any_sending, self.dirty, self.need_full,
                self.check_up, self.fin_min, self.due_min, self.jt_min, self.always_full,
                self.mode, self.phase, self.down_rem, self.wait_until, self.jt, self.has_flows,
                self.flow_lo, self.flow_hi, self.ph_lo, self.ph_n, self.ph_ms, self.ph_gbps,
                self.first_ms, self.marked_rate, self.job_marked,
                self.flow_job, self.flow_share, self.flow_rem, self.flow_on, self.demand,
                self.rates, self.fin, self.due, self.prev_want,
                self.ent_ptr, self.ent_link, self.al_ptr, self.al_flow,
                self.bf_ptr, self.bf_link, self.bl_ptr, self.bl_flow,
                self.cap, self.bind, self.tight, self.offered, self.per_ms, self.link_t,
                self.tot, self.buckets, self.b0, self.bucket_width,
                self.job_t, self.ended,
            )  # fmt: skip
            self.events += events
            if n_ended:
                for j in self.ended[:n_ended].tolist():
                    self._end_iteration(j)
                    retime(
                        j, self.clock, self.mode, self.has_flows, self.wait_until,
                        self.down_rem, self.jt,
                    )  # fmt: skip
                self.jt_min = float(self.jt.min())
            if stop_at_completion and len(self.completions) > done_before:
                break
        self._flush()

    def _timed(self) -> npt.NDArray[np.bool_]:
        """Jobs whose current phase ends after a fixed time (compute, or Up with no flows)."""
        return (self.mode == _DOWN) | ((self.mode == _UP) & ~self.has_flows)

    def _retime_all(self) -> None:
        """Each job's next timed event, from its mode (after entering or restoring)."""
        self.jt = np.where(
            self.mode == _WAIT,
            self.wait_until,
            np.where(self._timed(), self.clock + self.down_rem, np.inf),
        )
        self.jt_min = float(self.jt.min()) if len(self.jt) else math.inf

    def _sync_down(self) -> None:
        """Write the compute time left back into `down_rem` (read by snapshots and carries)."""
        timed = self._timed()
        self.down_rem[timed] = self.jt[timed] - self.clock

    def _flush(self) -> None:
        """Bring the link and job counters up to the clock (before reading them)."""
        self._cover_buckets(self.clock)
        flush_all(
            self.clock, self.per_ms, self.link_t, self.tot, self.buckets, self.b0,
            self.bucket_width, self.marked_rate, self.job_marked, self.job_t,
        )  # fmt: skip

    def _cover_buckets(self, until: float) -> None:
        """Grow the bucket log so it reaches the bucket holding time `until`."""
        need = int(until // self.bucket_width) - self.b0 + 1
        if need > len(self.buckets):
            grow = max(need, 2 * len(self.buckets)) - len(self.buckets)
            self.buckets = np.concatenate((self.buckets, np.zeros((grow, *self.buckets.shape[1:]))))

    def _log(self, t0: float, dt: float, per_ms: FloatArray) -> None:
        self._cover_buckets(t0 + dt)
        log_segment(t0, dt, per_ms, self.buckets, self.b0, self.bucket_width)

    def _end_iteration(self, j: int) -> None:
        """Job j ended its last phase: record the iteration, then let its agent start the next."""
        run = self.runs[j]
        now = self.clock
        run.starts.append(float(self.iter_start[j]))
        run.ends.append(now)
        run.ideal.append(float(self.period[j]))
        run.work_done += run.work_per_iter
        if run.work_done >= run.trace.iterations - 1e-9:
            self.mode[j] = _DONE
            run.finish_ms = now
            self.completions.append((now, j))
            self._reset_epoch()
            return
        self._set_first(j)
        self.grid_due[j] += self.grid_period[j]  # nan stays nan: no grid
        start = self._agent_start(j, now)
        # An iteration counts from when the job was ready: agent waits are its cost.
        self.iter_start[j] = now
        if start > now + _TOL_MS:
            self.mode[j] = _WAIT
            self.wait_until[j] = start
        elif begin_phase(
            j, 0, self.first_ms, self.phase, self.mode, self.down_rem, self.has_flows,
            self.flow_lo, self.flow_hi, self.ph_lo, self.ph_ms, self.ph_gbps,
            self.flow_share, self.demand, self.flow_rem, self.flow_on,
        ):  # fmt: skip
            self.dirty = True
        if self.settings.fast_forward:
            self._track_window()

    # -- steady-state windows and skipping
    def _track_window(self) -> None:
        if self.window is not None:
            return
        live = [j for j in range(len(self.runs)) if self.mode[j] != _DONE]
        if not live:
            return
        if self.w0 is None:
            done_since = [len(self.runs[j].starts) - int(self.epoch_iters[j]) for j in live]
            if min(done_since) >= self.settings.warmup_iterations:
                self._flush()
                self.w0 = (self.clock, self.tot.copy(), self.job_marked.copy())
                self.w0_idx = [len(r.starts) for r in self.runs]
            return
        t0, tot0, marked0 = self.w0
        if all(
            len(self.runs[j].starts) - self.w0_idx[j] >= self.settings.window_iterations
            for j in live
        ):
            self._flush()
            self.window = _Window(
                length=self.clock - t0, tot=self.tot - tot0, marked=self.job_marked - marked0
            )
            self.blocked = False

    def _try_jump(self, limit: float, exact_stop: bool) -> bool:
        """Skip k whole windows: the last window's records repeat, shifted by k x length."""
        win = self.window
        assert win is not None
        length = win.length
        if length <= 0:
            return False
        templates: list[tuple[int, int]] = []
        k_max = 10**12
        # A record ending on the window's opening edge (up to rounding) belongs
        # to the window before: copying it too would repeat one iteration per
        # skipped window, overlapping records and ending the job early.
        edge = self.clock - length + max(_TOL_MS, 1e-9 * abs(self.clock))
        for j, run in enumerate(self.runs):
            if self.mode[j] == _DONE:
                templates.append((0, 0))
                continue
            lo = bisect.bisect_right(run.ends, edge)
            n = len(run.ends) - lo
            if n <= 0:
                return False
            templates.append((lo, n))
            left = math.ceil((run.trace.iterations - run.work_done) / run.work_per_iter - 1e-9)
            k_max = min(k_max, (left - 2 * n) // n)
        if k_max < 1:
            # a job is within two windows of its end: no skip until the epoch resets
            self.blocked = True
            return False
        span = (limit - self.clock) / length
        k = min(k_max, math.floor(span) if exact_stop else math.ceil(span))
        if k < 1:
            return False
        if self.snap_before_jump:
            self.take_snapshot()
        self._flush()
        shift = k * length
        offsets = (np.arange(1, k + 1) * length)[:, None]
        for j, run in enumerate(self.runs):
            lo, n = templates[j]
            if n == 0:
                continue
            ws = np.asarray(run.starts[lo:])
            we = np.asarray(run.ends[lo:])
            run.starts.extend((ws[None, :] + offsets).ravel().tolist())
            run.ends.extend((we[None, :] + offsets).ravel().tolist())
            run.ideal.extend(run.ideal[lo:] * k)
            run.work_done += k * n * run.work_per_iter
        self.iter_start += shift
        self.wait_until += shift
        self.grid_due += shift
        self.jt += shift
        self.jt_min += shift
        self.fin += shift
        self.due += shift
        self.fin_min += shift
        self.due_min += shift
        self.tot += k * win.tot
        self.job_marked += k * win.marked
        self._log(self.clock, shift, win.tot / length)
        self.clock += shift
        self.link_t[:] = self.clock
        self.job_t[:] = self.clock
        self.ff_ms += shift
        for j in range(len(self.runs)):  # iteration numbers moved on: new jitter draws
            self._set_first(j)
        return True

    # -- reading state out
    def earliest_end(self) -> float:
        """A lower bound on when the first job still running here can finish.

        Its remaining iterations at full speed: contention and waiting only slow
        a job down. Jitter can shorten a compute phase, so with drift the bound
        is the clock (a component that ends earlier than expected is rewound).
        """
        if self.settings.drift_sigma > 0:
            return self.clock
        best = math.inf
        base = self.clock
        for j, run in enumerate(self.runs):
            if self.mode[j] == _DONE:
                continue
            left = math.ceil((run.trace.iterations - run.work_done) / run.work_per_iter - 1e-9)
            best = min(best, base + max(left - 1, 0) * float(self.period[j]))
        return best

    def carry_out(self, j: int) -> _Carry:
        self._sync_down()
        fl = self.job_flows[j]
        return _Carry(
            mode=int(self.mode[j]),
            phase=int(self.phase[j]),
            down_rem=float(self.down_rem[j]),
            wait_until=float(self.wait_until[j]),
            iter_start=float(self.iter_start[j]),
            flow_rem=self.flow_rem[fl].copy(),
            grid_due=float(self.grid_due[j]),
        )

    def commit_stats(self) -> None:
        """Hand the link and job counters to the run (once, when dissolved)."""
        self._flush()
        for run, marked in zip(self.runs, self.job_marked.tolist(), strict=True):
            run.marked_mbit += marked
        if self.dedicated:
            return
        for i, row in enumerate(self.buckets):
            if row.any():
                self.stats.add(self.b0 + i, self.global_links, row)
        self.buckets = self.buckets[:0]


@dataclass(frozen=True)
class _Window:
    length: float
    tot: FloatArray
    marked: FloatArray


class _Stats:
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


# ------------------------------------------------------------------ the driver

EventHook = Callable[[float, Mapping[str, int], Mapping[str, int]], None]
ProgressHook = Callable[[int, int], None]


class _Run:
    """One simulation: the trace, the cluster, the scheduler and their state."""

    def __init__(
        self,
        trace: Sequence[TraceJob],
        topology: Topology,
        scheduler: Scheduler,
        settings: SimSettings,
        router: Router | None,
        on_event: EventHook | None,
        progress: ProgressHook | None,
        book: ProfileBook | None = None,
    ) -> None:
        check_fits(trace, topology.total_gpus())
        self.trace = sorted(trace, key=lambda j: (j.arrival_s, j.name))
        self.topology = topology
        self.scheduler = scheduler
        self.settings = settings
        self.router = router or Router(topology)
        caps = topology.capacity_gbps()
        self.links: tuple[DirectedLink, ...] = tuple(sorted(caps))
        self.link_id = {lk: i for i, lk in enumerate(self.links)}
        self.capacity = np.array([caps[lk] for lk in self.links])
        self.gpus = {s.name: s.gpus for s in topology.servers}
        self.stats = _Stats(len(self.links))
        # Sum over running jobs of their peak demand per link. Only links whose
        # sum can exceed capacity ("coupling" links) can make jobs slow each
        # other down, so only they join jobs into one component: elsewhere the
        # max-min allocation never binds and jobs are independent exactly.
        self.peak_load = np.zeros(len(self.links))
        self.on_event = on_event
        self.progress = progress
        self.runs = {j.name: _JobRun(j) for j in self.trace}
        self.live: list[str] = []
        self.finished: set[str] = set()
        self.comps: list[_Component] = []
        self.book = book or ProfileBook(nic_gbps=topology.nic_gbps())
        self.flow_cache: dict[tuple[tuple[str, ...], str], list[list[int]]] = {}
        self.decisions = 0
        self.events_retired = 0
        self.ff_retired = 0.0

    def profile(self, model: str, workers: int, batch: int | None) -> Profile:
        return self.book.get(model, workers, batch)

    def flows(self, servers: tuple[str, ...], parallelism: str) -> list[list[int]]:
        key = (servers, parallelism)
        cached = self.flow_cache.get(key)
        if cached is None:
            cached = [
                [self.link_id[lk] for lk in self.router.path_links(self.router.path(src, dst))]
                for src, dst in self.router.job_flows(servers, parallelism)
            ]
            self.flow_cache[key] = cached
        return cached

    # -- the loop
    def execute(self) -> SimResult:
        now = 0.0
        ai = 0
        n = len(self.trace)
        horizon = self.settings.horizon_s * 1e3
        tick = math.inf
        while len(self.finished) < n:
            next_arrival = self.trace[ai].arrival_s * 1e3 if ai < n else math.inf
            grid = (math.floor(now / horizon) + 1) * horizon
            t_ext = min(next_arrival, tick, grid)
            if now > self.settings.max_sim_s * 1e3:
                raise RuntimeError(
                    f"simulation passed {self.settings.max_sim_s} s without finishing"
                )
            self._run_components(now, t_ext)
            completions = sorted(
                (t, comp.runs[j].trace.name)
                for comp in self.comps
                for t, j in comp.completions
                if comp.runs[j].trace.name not in self.finished
            )
            t_next = min(t_ext, completions[0][0]) if completions else t_ext
            now = t_next
            reason = ""
            for t, name in completions:
                if t <= now + _TOL_MS:
                    self._finish(name, t)
                    reason = reason or "departure"
            while ai < n and self.trace[ai].arrival_s * 1e3 <= now + _TOL_MS:
                self.live.append(self.trace[ai].name)
                ai += 1
                reason = "arrival"
            if tick <= now + _TOL_MS:
                reason = reason or "tick"
            if not reason:
                continue
            view = self._view(now, reason)
            alloc = self.scheduler.decide(view)
            self.decisions += 1
            self._apply(alloc, now)
            tick = self.scheduler.next_tick(now / 1e3, self._view(now, "tick")) * 1e3
            if tick <= now + _TOL_MS:
                tick = math.inf
            if self.progress is not None:
                self.progress(len(self.finished), n)
            if not self.comps and ai >= n and len(self.finished) < n and tick == math.inf:
                waiting = [j for j in self.live if j not in self.finished]
                raise RuntimeError(
                    f"scheduler {self.scheduler.name} left jobs waiting forever: {waiting[:5]}"
                )
        for comp in self.comps:
            self._retire(comp)
        return self._result(now)

    def _run_components(self, now: float, t_ext: float) -> None:
        """Bring every component up to the next decision: `t_ext` or the first job end.

        Each component stops at its first job end, which lowers the bound for
        the ones after it. Components go in order of the earliest time one of
        their jobs could end, so the ones most likely to end first set the
        bound early, and the others do not run past a decision that may rewind
        them (a component that cannot end before the bound runs straight to it).
        """
        bound = t_ext
        for comp in self.comps:
            for t, j in comp.completions:  # found in an earlier step, not yet decided on
                if comp.runs[j].trace.name not in self.finished:
                    bound = min(bound, t)
        ends = [comp.earliest_end() for comp in self.comps]
        for i in sorted(range(len(self.comps)), key=ends.__getitem__):
            comp = self.comps[i]
            if comp.clock < bound:
                if comp.clock <= now + _TOL_MS:
                    # Past the last component that could end before the bound,
                    # the bound is final: a component stops exactly at the
                    # decision and needs a snapshot only if it skips past it.
                    if ends[i] < bound:
                        comp.take_snapshot()
                    else:
                        comp.snapshot = None
                        comp.snap_before_jump = True
                n_done = len(comp.completions)
                comp.run_until(bound, stop_at_completion=True)
                if len(comp.completions) > n_done:
                    bound = min(bound, comp.completions[n_done][0])

    def _finish(self, name: str, t: float) -> None:
        run = self.runs[name]
        run.finish_ms = t
        self.finished.add(name)
        self.live.remove(name)
        run.servers = ()
        self._set_load(run, None)

    def _set_load(self, run: _JobRun, prof: Profile | None) -> None:
        """Replace a job's contribution to the per-link peak demand."""
        np.subtract.at(self.peak_load, run.load_links, run.load_gbps)
        if prof is None or not run.servers:
            run.load_links = np.zeros(0, dtype=np.int64)
            run.load_gbps = 0.0
            return
        flows = self.flows(run.servers, prof.parallelism)
        run.load_links = np.array([lk for f in flows for lk in f], dtype=np.int64)
        run.load_gbps = prof.peak_gbps
        np.add.at(self.peak_load, run.load_links, run.load_gbps)

    def coupling(self) -> npt.NDArray[np.bool_]:
        return self.peak_load > self.capacity * (1 + 1e-9)

    def _view(self, now: float, reason: str) -> ClusterView:
        used = slots_used({n: self.runs[n].servers for n in self.live})
        free = {s: g - used.get(s, 0) for s, g in self.gpus.items()}
        jobs = []
        for name in self.live:
            run = self.runs[name]
            tj = run.trace
            jobs.append(
                JobStatus(
                    name=name,
                    model=tj.model,
                    requested=tj.workers,
                    iterations=tj.iterations,
                    arrival_s=tj.arrival_s,
                    work_done=min(run.work_done, float(tj.iterations)),
                    servers=run.servers,
                    since_s=run.since_s,
                    ideal_iteration_ms=self.profile(
                        tj.model, tj.workers, tj.batch_size
                    ).iteration_ms,
                    batch_size=tj.batch_size,
                )
            )
        return ClusterView(now / 1e3, self.gpus, free, tuple(jobs), reason)

    def _apply(self, alloc: Allocation, now: float) -> None:
        placement = {k: tuple(v) for k, v in alloc.placement.items() if v}
        for name in placement:
            if name not in self.runs or name not in self.live:
                raise RuntimeError(f"scheduler placed unknown or finished job {name}")
        if not self.scheduler.dedicated:
            used = slots_used(placement)
            over = {s: u for s, u in used.items() if u > self.gpus.get(s, 0)}
            if over:
                raise RuntimeError(f"scheduler {self.scheduler.name} over-allocated servers {over}")
        if self.on_event is not None:
            self.on_event(now / 1e3, slots_used(placement), self.gpus)
        changed: set[str] = set()
        resync: set[str] = set()
        for name in self.live:
            run = self.runs[name]
            new = placement.get(name, ())
            if sorted(new) != sorted(run.servers):
                changed.add(name)
            paced_now = not math.isnan(run.grid_period)
            if new and alloc.new_schedule and (name in alloc.periods_ms or paced_now):
                resync.add(name)
        if not changed and not resync:
            return
        new_links: set[int] = set()
        for name in changed:
            run = self.runs[name]
            servers = placement.get(name, ())
            tj = run.trace
            prof = self.profile(tj.model, len(servers), tj.batch_size) if servers else None
            old_servers = run.servers
            run.servers = servers
            self._set_load(run, prof)
            run.servers = old_servers
            if prof is not None:
                new_links.update(lk for f in self.flows(servers, prof.parallelism) for lk in f)
        hot = self.coupling()
        hot_new = {lk for lk in new_links if hot[lk]}
        touched = []
        for comp in self.comps:
            names = {r.trace.name for r in comp.runs}
            if names & (changed | resync) or (
                not self.scheduler.dedicated and hot_new.intersection(comp.global_links.tolist())
            ):
                touched.append(comp)
        regroup: list[str] = []
        for comp in touched:
            self._rewind(comp, now)
            for j, run in enumerate(comp.runs):
                name = run.trace.name
                if name in self.finished:
                    continue
                run.carry = None if name in changed else comp.carry_out(j)
                regroup.append(name)
            self._retire(comp)
            self.comps.remove(comp)
        migration_ms = self.scheduler.migration_s * 1e3
        for name in changed:
            run = self.runs[name]
            new = placement.get(name, ())
            if run.servers or run.starts:
                # moved, preempted or resumed: the in-flight iteration is lost
                run.migrations += 1
                run.resume_ms = now + migration_ms
            else:
                run.resume_ms = now
            run.carry = None
            run.servers = new
            run.since_s = now / 1e3
            if name not in regroup:
                regroup.append(name)
        members: list[_Member] = []
        first_dues = self._first_dues(alloc, regroup, now) if alloc.new_schedule else {}
        for name in regroup:
            run = self.runs[name]
            if not run.servers:
                continue
            run.work_per_iter = float(alloc.work_per_iteration.get(name, 1.0))
            tj = run.trace
            prof = self.profile(tj.model, len(run.servers), tj.batch_size)
            first_due = math.nan
            new_grid = alloc.new_schedule or run.carry is None
            if alloc.new_schedule:
                run.grid_period = float(alloc.periods_ms.get(name, math.nan))
                first_due = first_dues.get(name, math.nan)
            elif run.carry is None:
                run.grid_period = math.nan  # moved without a schedule: runs free
            members.append(
                _Member(run, prof, self.flows(run.servers, prof.parallelism), first_due, new_grid)
            )
        for group in self._groups(members):
            comp = _Component(
                group, self.capacity, self.settings, now, self.stats, self.scheduler.dedicated
            )
            comp.take_snapshot()
            self.comps.append(comp)

    def _first_dues(self, alloc: Allocation, names: list[str], now: float) -> dict[str, float]:
        """First grid point of every paced job of a new schedule (see `first_grid_points`)."""
        ready: dict[str, float] = {}
        for name in names:
            run = self.runs[name]
            if name not in alloc.periods_ms or not run.servers:
                continue
            carry = run.carry
            if carry is None:  # new, moved or resumed
                ready[name] = max(now, run.resume_ms)
            elif carry.mode == _WAIT:
                ready[name] = now
            else:  # the in-flight iteration should end about one iteration after it began
                tj = run.trace
                own = self.profile(tj.model, len(run.servers), tj.batch_size).iteration_ms
                ready[name] = max(now, carry.iter_start + own)
        groups = alloc.groups or (tuple(sorted(ready)),)  # no groups: all shifts relative
        return first_grid_points(groups, alloc.shifts_ms, alloc.periods_ms, ready, now)

    def _groups(self, members: list[_Member]) -> list[list[_Member]]:
        """Connected components of jobs through shared links (union-find)."""
        if self.scheduler.dedicated:
            return [[m] for m in members]
        parent = list(range(len(members)))

        def root(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        owner: dict[int, int] = {}
        hot = self.coupling()
        for i, m in enumerate(members):
            for f in m.flows:
                for lk in f:
                    if not hot[lk]:
                        continue
                    if lk in owner:
                        a, b = root(owner[lk]), root(i)
                        if a != b:
                            parent[a] = b
                    else:
                        owner[lk] = i
        groups: dict[int, list[_Member]] = {}
        for i, m in enumerate(members):
            groups.setdefault(root(i), []).append(m)
        return list(groups.values())

    def _rewind(self, comp: _Component, now: float) -> None:
        if comp.clock > now + _TOL_MS:
            comp.restore()
        if comp.clock < now - _TOL_MS:
            comp.run_until(now, exact_stop=True)
        # keep the component consistent with completions already processed
        for j, run in enumerate(comp.runs):
            if run.trace.name in self.finished and comp.mode[j] != _DONE:
                comp.mode[j] = _DONE
                comp.flow_on[comp.job_flows[j]] = False

    def _retire(self, comp: _Component) -> None:
        comp.commit_stats()
        self.events_retired += comp.events
        self.ff_retired += comp.ff_ms

    def _result(self, now: float) -> SimResult:
        jobs = []
        for name, run in self.runs.items():
            tj = run.trace
            jobs.append(
                JobResult(
                    name=name,
                    model=tj.model,
                    workers=tj.workers,
                    arrival_s=tj.arrival_s,
                    finish_s=(run.finish_ms or now) / 1e3,
                    iteration_start_ms=np.array(run.starts),
                    iteration_end_ms=np.array(run.ends),
                    ideal_iteration_ms=np.array(run.ideal),
                    adjustments=run.adjustments,
                    migrations=run.migrations,
                    marked_mbit=run.marked_mbit,
                )
            )
        return SimResult(
            scheduler=self.scheduler.name,
            jobs=tuple(jobs),
            links=self.stats.series(self.links, self.capacity, self.settings.bucket_s),
            events=self.events_retired,
            decisions=self.decisions,
            simulated_ms=now,
            fast_forwarded_ms=self.ff_retired,
            metadata={"settings": self.settings.__dict__.copy(), "topology": self.topology.name},
        )


def first_grid_points(
    groups: Sequence[Sequence[str]],
    shifts_ms: Mapping[str, float],
    periods_ms: Mapping[str, float],
    ready_ms: Mapping[str, float],
    now: float,
) -> dict[str, float]:
    """When each job of a new schedule starts its first aligned iteration.

    Job j's grid is now + shift_j + c + k x Q_j; it starts at the first grid
    point at or after it is ready. Shifts within a group are relative, so
    (our choice, as agents reporting their phase would allow) each group
    takes the one offset c that makes its jobs wait least in total, trying
    the offsets that let one job start the moment it is ready.

    b should run 50 ms after a; a is ready at 130, b now. Moving the group by
    50 ms lets b start at once and a wait 20 ms (the cheapest of the offsets):

    >>> first_grid_points([("a", "b")], {"a": 0.0, "b": 50.0}, {"a": 100.0, "b": 100.0},
    ...                   {"a": 130.0, "b": 0.0}, 0.0)
    {'a': 150.0, 'b': 0.0}
    """
    out: dict[str, float] = {}
    for group in groups:
        jobs = [j for j in group if j in ready_ms and j in periods_ms]
        if not jobs:
            continue

        def grid_points(c: float, jobs: list[str] = jobs) -> dict[str, float]:
            points = {}
            for j in jobs:
                q, base = periods_ms[j], now + shifts_ms.get(j, 0.0) + c
                points[j] = base + math.ceil((ready_ms[j] - base) / q - 1e-9) * q
            return points

        offsets = [0.0] + [
            (ready_ms[j] - now - shifts_ms.get(j, 0.0)) % periods_ms[j] for j in jobs
        ]
        best = min(
            (grid_points(c) for c in offsets),
            key=lambda p: sum(p[j] - ready_ms[j] for j in jobs),
        )
        out.update(best)
    return out


def simulate(
    trace: Sequence[TraceJob],
    topology: Topology,
    scheduler: Scheduler,
    settings: SimSettings | None = None,
    router: Router | None = None,
    on_event: EventHook | None = None,
    progress: ProgressHook | None = None,
    book: ProfileBook | None = None,
) -> SimResult:
    """Run `trace` on `topology` under `scheduler`; deterministic for a given seed.

    `on_event(now_s, slots_used, gpus)` is called after every scheduler
    decision (tests use it to check capacity at every event).
    """
    run = _Run(
        trace, topology, scheduler, settings or SimSettings(), router, on_event, progress, book
    )
    return run.execute()
