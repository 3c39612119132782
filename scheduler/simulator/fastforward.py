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
true periodicity; tests/scheduler/simulator/test_simulator.py checks it against the exact mode.

Pure decisions over the jobs' records; the component (`component`) keeps the
window and moves its own clocks when it skips.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from scheduler.simulator.fluid_events import TOL_MS as _TOL_MS

from .jobrun import JobRun
from .results import FloatArray

# Per job, the records a skip repeats: (index of the first, how many); (0, 0) for a finished job.
Records = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Window:
    """One measured steady-state period: its length and the counters it added."""

    length: float
    tot: FloatArray  # per link: carried Mbit, oversubscribed ms, excess Mbit
    marked: FloatArray  # per job: Mbit sent through oversubscribed links


def warmed_up(
    runs: Sequence[JobRun], live: Sequence[int], epoch_iters: npt.NDArray[np.int64], warmup: int
) -> bool:
    """Has every live job run `warmup` iterations since the job set last changed?"""
    return min(len(runs[j].starts) - int(epoch_iters[j]) for j in live) >= warmup


def window_complete(
    runs: Sequence[JobRun], live: Sequence[int], opened_at: Sequence[int], iterations: int
) -> bool:
    """Has every live job run `iterations` iterations since the window opened (`opened_at`)?"""
    return all(len(runs[j].starts) - opened_at[j] >= iterations for j in live)


def window_records(
    runs: Sequence[JobRun], done: Sequence[bool], clock: float, length: float
) -> Records | None:
    """Each job's records inside the window that ends at `clock`; None if a running job has none.

    A record ending on the window's opening edge (up to rounding) belongs to
    the window before: copying it too would repeat one iteration per skipped
    window, overlapping records and ending the job early.
    """
    edge = clock - length + max(_TOL_MS, 1e-9 * abs(clock))
    out: list[tuple[int, int]] = []
    for run, finished in zip(runs, done, strict=True):
        if finished:
            out.append((0, 0))
            continue
        lo = bisect.bisect_right(run.ends, edge)
        n = len(run.ends) - lo
        if n <= 0:
            return None
        out.append((lo, n))
    return tuple(out)


def windows_before_end(runs: Sequence[JobRun], records: Records) -> int:
    """How many windows may be skipped so that every job keeps two windows' iterations to run."""
    most = 10**12
    for run, (_, n) in zip(runs, records, strict=True):
        if n:
            most = min(most, (run.iterations_left() - 2 * n) // n)
    return most


def windows_to_skip(most: int, clock: float, limit: float, length: float, exact: bool) -> int:
    """Whole windows to skip towards `limit`: up to it with `exact`, else past it by less than one.

    >>> windows_to_skip(100, 0.0, 250.0, 100.0, exact=True)
    2
    >>> windows_to_skip(100, 0.0, 250.0, 100.0, exact=False)
    3
    """
    span = (limit - clock) / length
    return min(most, math.floor(span) if exact else math.ceil(span))


def repeat_records(runs: Sequence[JobRun], records: Records, k: int, length: float) -> None:
    """Append `k` copies of each job's window records, copy i shifted by i x `length`."""
    offsets = (np.arange(1, k + 1) * length)[:, None]
    for run, (lo, n) in zip(runs, records, strict=True):
        if n == 0:
            continue
        ws = np.asarray(run.starts[lo:])
        we = np.asarray(run.ends[lo:])
        run.starts.extend((ws[None, :] + offsets).ravel().tolist())
        run.ends.extend((we[None, :] + offsets).ravel().tolist())
        run.ideal.extend(run.ideal[lo:] * k)
        run.work_done += k * n * run.work_per_iter
