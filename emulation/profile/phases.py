"""When is a job's Up phase, iteration by iteration, in its 10 ms link samples?

The paper profiles each model alone on its testbed, reading iteration time
and link utilisation from port counters. Here the counters are the switch's
10 ms per-job samples (`telemetry.csv`): a job's bytes on its busiest link
per sample, as a fraction of that link's capacity, is its utilisation
series. Everything below is a pure function of that series and of the
job's iteration starts (the agents' records, `iterations.csv`), on one clock.

Rules (the paper gives none; each is ours):

- (our choice) A sample is Up when the job's utilisation in it exceeds half
  its own peak (the 99th percentile of its samples, so one odd sample does
  not set it): a 10 ms sample the Up phase covers for more than half is
  counted, one it covers for less is not, so the duration's error from the
  edges averages out instead of always lengthening it.
- (our choice) Up samples separated by at most `gap_samples` (default 1)
  samples below the threshold are one Up phase: a one-sample dip of TCP
  inside a transfer is not a Down phase.
- (our choice) An Up phase belongs to the iteration its first sample falls
  in (iteration k runs from its start to the next one's); its start offset
  is the start of its first sample (`time_s` is a sample's end) minus the
  iteration's start, so offsets are known to one sample (10 ms).

Example: a 100 ms iteration with 30 ms of Up 50 ms in, sampled every 10 ms:

    >>> t = np.arange(1, 41) * 0.01
    >>> u = np.where(((t > 0.06) & (t <= 0.09)) | ((t > 0.16) & (t <= 0.19)), 0.9, 0.0)
    >>> s = up_segments(t, u, 0.01)
    >>> s.starts_s.tolist(), s.durations_s.tolist()
    ([0.06, 0.16], [0.03, 0.03])
    >>> p = per_iteration(s, np.array([0.01, 0.11, 0.21]))
    >>> p.up_ms.tolist(), p.offset_ms.tolist()
    ([30.0, 30.0], [50.0, 50.0])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

UP_FRACTION_OF_PEAK = 0.5  # (our choice) see the module docstring
PEAK_PERCENTILE = 99.0
GAP_SAMPLES = 1


@dataclass(frozen=True)
class UpSegments:
    """The Up phases of one series: start (s, run clock), duration (s), mean utilisation."""

    starts_s: FloatArray
    durations_s: FloatArray
    mean_share: FloatArray  # mean utilisation over the phase's samples (0-1 of the link)
    threshold: float  # the utilisation above which a sample was Up


def up_threshold(share: FloatArray, fraction: float = UP_FRACTION_OF_PEAK) -> float:
    """Half the series' peak (its 99th percentile); 0 for a series that never moved.

    >>> up_threshold(np.array([0.0, 0.8, 0.8, 0.0]))
    0.4
    """
    if share.size == 0 or not np.any(share > 0):
        return 0.0
    return round(float(np.percentile(share, PEAK_PERCENTILE)) * fraction, 12)


def up_segments(
    times_s: FloatArray,
    share: FloatArray,
    interval_s: float,
    threshold: float | None = None,
    gap_samples: int = GAP_SAMPLES,
) -> UpSegments:
    """The Up phases of a utilisation series sampled every `interval_s` (`times_s` the
    ends of the samples, ascending; a sample without a row may be missing).

    `threshold` None: `up_threshold(share)`. Runs of Up samples joined across at most
    `gap_samples` samples below it; a phase lasts its Up samples plus the gaps inside it.

    >>> t = np.arange(1, 9) * 0.01
    >>> s = up_segments(t, np.array([0, 1, 1, 0, 1, 0, 0, 1.0]), 0.01)
    >>> s.starts_s.tolist(), s.durations_s.tolist()
    ([0.01, 0.07], [0.04, 0.01])
    """
    if times_s.shape != share.shape:
        raise ValueError(f"times ({times_s.size}) and shares ({share.size}) differ in length")
    if interval_s <= 0:
        raise ValueError(f"sampling interval {interval_s} s, not positive")
    level = up_threshold(share) if threshold is None else threshold
    up = share > level if level > 0 else np.zeros(share.shape, dtype=bool)
    index = np.flatnonzero(up)
    if index.size == 0:
        empty = np.zeros(0)
        return UpSegments(empty, empty, empty, level)
    # a run ends where more than `gap_samples` samples are below the threshold, counted
    # in rows or, where samples without traffic have no row, in time
    far = np.diff(times_s[index]) > (gap_samples + 1.5) * interval_s
    breaks = np.flatnonzero((np.diff(index) > gap_samples + 1) | far)
    firsts = np.concatenate(([index[0]], index[breaks + 1]))
    lasts = np.concatenate((index[breaks], [index[-1]]))
    starts = times_s[firsts] - interval_s
    durations = times_s[lasts] - times_s[firsts] + interval_s
    means = np.array([float(share[a : b + 1].mean()) for a, b in zip(firsts, lasts, strict=True)])
    return UpSegments(np.round(starts, 9), np.round(durations, 9), means, level)


@dataclass(frozen=True)
class IterationPhases:
    """Per iteration that had an Up phase: its Up time (summed over its phases, ms), the
    first phase's start offset from the iteration's start (ms), the iteration's length
    (start to next start, ms) and the mean utilisation while Up."""

    iteration: npt.NDArray[np.int64]
    up_ms: FloatArray
    offset_ms: FloatArray
    length_ms: FloatArray
    share: FloatArray


def per_iteration(segments: UpSegments, starts_s: FloatArray) -> IterationPhases:
    """Each Up phase in the iteration its start falls in (iteration k from `starts_s[k]` to
    `starts_s[k+1]`; the last start only closes the one before it). Iterations without an
    Up phase are left out (a job's first iterations before its connections carry data).
    """
    if starts_s.size < 2:
        empty = np.zeros(0)
        return IterationPhases(np.zeros(0, dtype=np.int64), empty, empty, empty, empty)
    which = np.searchsorted(starts_s, segments.starts_s, side="right") - 1
    inside = (which >= 0) & (which < starts_s.size - 1)
    rows = []
    for k in range(starts_s.size - 1):
        mine = inside & (which == k)
        if not np.any(mine):
            continue
        up = float(segments.durations_s[mine].sum())
        weighted = float((segments.durations_s[mine] * segments.mean_share[mine]).sum())
        rows.append(
            (
                k,
                up * 1e3,
                (float(segments.starts_s[mine].min()) - float(starts_s[k])) * 1e3,
                (float(starts_s[k + 1]) - float(starts_s[k])) * 1e3,
                weighted / up if up > 0 else 0.0,
            )
        )
    cols = list(zip(*rows, strict=True)) if rows else [()] * 5
    return IterationPhases(
        np.array(cols[0], dtype=np.int64),
        np.round(np.array(cols[1], dtype=float), 6),
        np.round(np.array(cols[2], dtype=float), 6),
        np.round(np.array(cols[3], dtype=float), 6),
        np.array(cols[4], dtype=float),
    )


@dataclass(frozen=True)
class Spread:
    """Mean, median and 90/95/99th percentiles of a measured quantity (ms)."""

    mean: float
    p50: float
    p90: float
    p95: float
    p99: float

    @classmethod
    def of(cls, values: FloatArray) -> Spread:
        """
        >>> Spread.of(np.array([10.0, 20.0, 30.0]))
        Spread(mean=20.0, p50=20.0, p90=28.0, p95=29.0, p99=29.8)
        """
        if values.size == 0:
            raise ValueError("no values to take a spread of")
        q = np.percentile(values, [50, 90, 95, 99])
        return cls(*(round(float(v), 3) for v in (values.mean(), *q)))

    def as_dict(self) -> dict[str, float]:
        return {"mean": self.mean, "p50": self.p50, "p90": self.p90, "p95": self.p95,
                "p99": self.p99}  # fmt: skip


# (our choice) The agents' grid period: the 95th percentile of the job's measured
# iteration times alone (all of them by default: `measure`'s `calm_grid` leaves out
# those its host witness calls starved), rounded up to 0.5 ms. A grid at the mean leaves a job late for about half its
# slots, and lateness carries over (a late start ends late), so it crosses the drift
# threshold about every second iteration; at the 95th percentile an iteration
# overruns its slot one time in twenty, and the threshold (5% of the iteration)
# absorbs most of those. The benchmarks README gives the measurements.
GRID_PERCENTILE = 95.0
GRID_ROUND_MS = 0.5


def grid_period_ms(iteration_ms: FloatArray, percentile: float = GRID_PERCENTILE) -> float:
    """The grid period from a job's measured iteration times (see GRID_PERCENTILE).

    >>> grid_period_ms(np.array([200.0] * 19 + [230.0]))
    201.5
    """
    if iteration_ms.size == 0:
        raise ValueError("no iteration times to choose a grid period from")
    value = float(np.percentile(iteration_ms, percentile))
    return float(np.ceil(value / GRID_ROUND_MS - 1e-9) * GRID_ROUND_MS)
