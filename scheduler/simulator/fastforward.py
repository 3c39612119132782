"""When may a component skip time, and how? The steady-state fast-forward.

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
true periodicity; tests/scheduler/test_simulator.py checks it against the exact mode.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..fluid_events import DONE as _DONE
from ..fluid_events import TOL_MS as _TOL_MS
from .results import FloatArray

if TYPE_CHECKING:
    from .component import _Component


@dataclass(frozen=True)
class _Window:
    length: float
    tot: FloatArray
    marked: FloatArray


def track_window(comp: _Component) -> None:
    """After an iteration: open the window after warm-up, close it when every job did enough."""
    if comp.window is not None:
        return
    live = [j for j in range(len(comp.runs)) if comp.mode[j] != _DONE]
    if not live:
        return
    if comp.w0 is None:
        done_since = [len(comp.runs[j].starts) - int(comp.epoch_iters[j]) for j in live]
        if min(done_since) >= comp.settings.warmup_iterations:
            comp._flush()
            comp.w0 = (comp.clock, comp.tot.copy(), comp.job_marked.copy())
            comp.w0_idx = [len(r.starts) for r in comp.runs]
        return
    t0, tot0, marked0 = comp.w0
    if all(
        len(comp.runs[j].starts) - comp.w0_idx[j] >= comp.settings.window_iterations for j in live
    ):
        comp._flush()
        comp.window = _Window(
            length=comp.clock - t0, tot=comp.tot - tot0, marked=comp.job_marked - marked0
        )
        comp.blocked = False


def try_jump(comp: _Component, limit: float, exact_stop: bool) -> bool:
    """Skip k whole windows: the last window's records repeat, shifted by k x length."""
    win = comp.window
    assert win is not None
    length = win.length
    if length <= 0:
        return False
    templates: list[tuple[int, int]] = []
    k_max = 10**12
    # A record ending on the window's opening edge (up to rounding) belongs
    # to the window before: copying it too would repeat one iteration per
    # skipped window, overlapping records and ending the job early.
    edge = comp.clock - length + max(_TOL_MS, 1e-9 * abs(comp.clock))
    for j, run in enumerate(comp.runs):
        if comp.mode[j] == _DONE:
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
        comp.blocked = True
        return False
    span = (limit - comp.clock) / length
    k = min(k_max, math.floor(span) if exact_stop else math.ceil(span))
    if k < 1:
        return False
    if comp.snap_before_jump:
        comp.take_snapshot()
    comp._flush()
    shift = k * length
    offsets = (np.arange(1, k + 1) * length)[:, None]
    for j, run in enumerate(comp.runs):
        lo, n = templates[j]
        if n == 0:
            continue
        ws = np.asarray(run.starts[lo:])
        we = np.asarray(run.ends[lo:])
        run.starts.extend((ws[None, :] + offsets).ravel().tolist())
        run.ends.extend((we[None, :] + offsets).ravel().tolist())
        run.ideal.extend(run.ideal[lo:] * k)
        run.work_done += k * n * run.work_per_iter
    comp.iter_start += shift
    comp.wait_until += shift
    comp.grid_due += shift
    comp.jt += shift
    comp.jt_min += shift
    comp.fin += shift
    comp.due += shift
    comp.fin_min += shift
    comp.due_min += shift
    comp.tot += k * win.tot
    comp.job_marked += k * win.marked
    comp._log(comp.clock, shift, win.tot / length)
    comp.clock += shift
    comp.link_t[:] = comp.clock
    comp.job_t[:] = comp.clock
    comp.ff_ms += shift
    for j in range(len(comp.runs)):  # iteration numbers moved on: new jitter draws
        comp._set_first(j)
    return True
