"""How do jobs that may share links advance in time together? The per-component state machine.

Each job cycles through its profile's phases; in an Up phase its flows share
links max-min fairly (the compiled event loop, `scheduler.simulator.fluid_events`);
Python handles what happens once per iteration: recording it, the agent's
decision when the next one starts, snapshots to rewind to a scheduler decision.

Agents: a schedule from Cassini gives job j a time-shift t_j and a period
Q_j >= T_j (`scheduler.cassini.periods`) at decision time t; the agent starts
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

import math
import zlib
from typing import Any

import numpy as np
import numpy.typing as npt

from scheduler.simulator.fluid_events import DONE as _DONE
from scheduler.simulator.fluid_events import DOWN as _DOWN
from scheduler.simulator.fluid_events import TOL_MS as _TOL_MS
from scheduler.simulator.fluid_events import UP as _UP
from scheduler.simulator.fluid_events import WAIT as _WAIT
from scheduler.simulator.fluid_events import begin_phase, flush_all, log_segment, retime, run_events
from scheduler.workloads.sharing_model import IDENTITY, SharingModel
from scheduler.workloads.traffic import nic_shares

from .fastforward import (
    Window,
    repeat_records,
    warmed_up,
    window_complete,
    window_records,
    windows_before_end,
    windows_to_skip,
)
from .jobrun import Carry, Member
from .results import FloatArray, LinkStats, SimSettings


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


class Component:
    """Jobs that may share links, simulated together from `clock` on."""

    always_full = False  # re-solve every flow at every event (the reference the tests use)

    def __init__(
        self,
        members: list[Member],
        capacity: FloatArray,
        settings: SimSettings,
        clock: float,
        stats: LinkStats,
        dedicated: bool,
        sharing: SharingModel = IDENTITY,
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
        klass: list[int] = []
        for j, m in enumerate(members):
            klass += list(m.flow_class) if m.flow_class else [0] * len(m.flows)
            # A profile's gbps is one worker's NIC demand, split over the flows a
            # worker sends or receives (`nic_shares`). A flow's first link is its
            # source's NIC uplink and its last link its destination's NIC downlink.
            share += nic_shares([(f[0], f[-1]) if f else None for f in m.flows])
            for f in m.flows:
                flow_job.append(j)
                rows.append([local[g] for g in f])
        self.flow_job = np.array(flow_job, dtype=np.int64)
        self.flow_share = np.array(share, dtype=np.float64)
        # strict-priority class per flow (`scheduler.policies`); all 0 is plain max-min
        self.flow_class = np.array(klass, dtype=np.int64)
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
        # the sharing model's factor by jobs sending on a link (`scheduler.workloads.sharing_model`)
        self.factor = sharing.table()
        self.ecap = self.cap.copy()  # each link's capacity under it, as last solved
        self.bind = offered_peak > self.cap * sharing.lowest() * (1 + 1e-9)
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
        # time alone per iteration (recorded as the ideal; a time-shared job's is its own profile's)
        self.period = np.array([m.alone_ms or m.profile.iteration_ms for m in members])
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
        self.window: Window | None = None
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
    def _enter(self, j: int, m: Member) -> None:
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
                self.job_t, self.ended, self.flow_class, self.factor, self.ecap,
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

    # -- the steady-state fast-forward (`fastforward`)
    def _track_window(self) -> None:
        """After an iteration: open the window after warm-up, close it when every job did enough."""
        if self.window is not None:
            return
        live = [j for j in range(len(self.runs)) if self.mode[j] != _DONE]
        if not live:
            return
        if self.w0 is None:
            if warmed_up(self.runs, live, self.epoch_iters, self.settings.warmup_iterations):
                self._flush()
                self.w0 = (self.clock, self.tot.copy(), self.job_marked.copy())
                self.w0_idx = [len(r.starts) for r in self.runs]
            return
        if window_complete(self.runs, live, self.w0_idx, self.settings.window_iterations):
            self._flush()
            t0, tot0, marked0 = self.w0
            self.window = Window(
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
        done = (self.mode == _DONE).tolist()
        records = window_records(self.runs, done, self.clock, length)
        if records is None:
            return False
        most = windows_before_end(self.runs, records)
        if most < 1:
            # a job is within two windows of its end: no skip until the epoch resets
            self.blocked = True
            return False
        k = windows_to_skip(most, self.clock, limit, length, exact_stop)
        if k < 1:
            return False
        if self.snap_before_jump:
            self.take_snapshot()
        self._flush()
        shift = k * length
        repeat_records(self.runs, records, k, length)
        for times in (self.iter_start, self.wait_until, self.grid_due, self.jt, self.fin, self.due):
            times += shift
        self.jt_min += shift
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
            left = run.iterations_left()
            best = min(best, base + max(left - 1, 0) * float(self.period[j]))
        return best

    def carry_out(self, j: int) -> Carry:
        self._sync_down()
        fl = self.job_flows[j]
        return Carry(
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
