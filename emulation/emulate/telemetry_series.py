"""What do a run's 10 ms samples say per job, per link and per iteration, as plain arrays?

A run folder's `telemetry.csv` (`time_s, link, job, bytes, packets,
ce_marks`: a row per sample, link and job with traffic in it) and
`queues.csv` (`time_s, link, max_depth_cells`) are read into column arrays
(`Telemetry`, `Queues`); everything the report draws from them is a pure
function of those arrays and of the iteration records: each job's share of
a link over a window of a few iterations, the marks a job took per
iteration, CDF points, one colour range for several schedulers, and a
series thinned to a size a figure file can hold. `time_s` is on the run's
clock, the clock of `iterations.csv` (whose `start_ms` is that clock in ms).

(our choice) A sample's `time_s` is the end of its interval, as in the
counter series of `controlplane.telemetry`.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from emulation.jobs.records import IterationRecord

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
StrArray = npt.NDArray[np.str_]

TELEMETRY_FILE = "telemetry.csv"
QUEUES_FILE = "queues.csv"
TELEMETRY_COLUMNS = ("time_s", "link", "job", "bytes", "packets", "ce_marks")
QUEUE_COLUMNS = ("time_s", "link", "max_depth_cells")
NOMINAL_INTERVAL_S = 0.01  # the switch's sampling period, when a file has too few samples to say
OTHER_JOB = "other"  # the `job` of traffic that belongs to no job


@dataclass(frozen=True)
class Telemetry:
    """The rows of telemetry.csv as columns, in file order."""

    time_s: FloatArray
    link: StrArray
    job: StrArray
    bytes: IntArray
    packets: IntArray
    ce_marks: IntArray

    @classmethod
    def of(cls, rows: Iterable[tuple[float, str, str, int, int, int]]) -> Telemetry:
        """From (time_s, link, job, bytes, packets, ce_marks) tuples."""
        cols = list(zip(*rows, strict=True)) or [()] * 6
        return cls(
            np.array(cols[0], dtype=float),
            np.array(cols[1], dtype=str),
            np.array(cols[2], dtype=str),
            np.array(cols[3], dtype=np.int64),
            np.array(cols[4], dtype=np.int64),
            np.array(cols[5], dtype=np.int64),
        )

    def __len__(self) -> int:
        return int(self.time_s.size)


@dataclass(frozen=True)
class Queues:
    """The rows of queues.csv as columns."""

    time_s: FloatArray
    link: StrArray
    max_depth_cells: IntArray

    @classmethod
    def of(cls, rows: Iterable[tuple[float, str, int]]) -> Queues:
        cols = list(zip(*rows, strict=True)) or [()] * 3
        return cls(
            np.array(cols[0], dtype=float),
            np.array(cols[1], dtype=str),
            np.array(cols[2], dtype=np.int64),
        )


class TelemetryFileError(ValueError):
    """A telemetry or queue file without the columns this module reads."""


def _read(path: Path, columns: Sequence[str]) -> list[list[str]]:
    with path.open(newline="") as fh:
        reader = csv.reader(fh)
        header = [h.strip() for h in next(reader, [])]
        missing = [c for c in columns if c not in header]
        if missing:
            raise TelemetryFileError(f"{path.name}: no column {', '.join(missing)} (has {header})")
        idx = [header.index(c) for c in columns]
        return [[row[i] for i in idx] for row in reader if row]


def read_telemetry(paths: Sequence[Path]) -> Telemetry:
    """The rows of every telemetry.csv in `paths` (a run's segments share one clock)."""
    rows = [r for p in paths for r in _read(p, TELEMETRY_COLUMNS)]
    return Telemetry.of(
        (float(t), link, job, int(b), int(p), int(m)) for t, link, job, b, p, m in rows
    )


def read_queues(paths: Sequence[Path]) -> Queues:
    """The rows of every queues.csv in `paths`."""
    rows = [r for p in paths for r in _read(p, QUEUE_COLUMNS)]
    return Queues.of((float(t), link, int(d)) for t, link, d in rows)


def sample_interval(times: FloatArray) -> float:
    """The sampling period: the median step between distinct sample times (a sample in
    which nothing moved has no row, so the smallest common step, not the mean).

    >>> sample_interval(np.array([0.01, 0.02, 0.02, 0.03, 0.06, 0.07]))
    0.01
    >>> sample_interval(np.array([5.0]))
    0.01
    """
    distinct = np.unique(times)
    steps = np.diff(distinct)
    steps = steps[steps > 1e-9]
    return round(float(np.median(steps)), 6) if steps.size else NOMINAL_INTERVAL_S


@dataclass(frozen=True)
class JobStarts:
    """One job's iterations on the run's clock (s): when its first worker started each and
    when its last worker ended it (the agents start a job's workers together)."""

    job: str
    model: str
    starts_s: FloatArray
    ends_s: FloatArray


def job_starts(records: Iterable[IterationRecord]) -> dict[str, JobStarts]:
    """Per job, its iterations in order, every iteration some worker recorded.

    >>> r = [IterationRecord("a", "vgg19", w, k, 1000.0 * k + w, 1000.0 * k + 900 + w, 1,
    ...                      0.0, 0.0, False) for w in range(2) for k in range(2)]
    >>> s = job_starts(r)["a"]
    >>> s.starts_s.tolist(), s.ends_s.tolist()
    ([0.0, 1.0], [0.901, 1.901])
    """
    spans: dict[str, dict[int, tuple[float, float]]] = {}
    models: dict[str, str] = {}
    for rec in records:
        models.setdefault(rec.job, rec.model)
        known = spans.setdefault(rec.job, {})
        start, end = known.get(rec.iteration, (rec.start_ms, rec.end_ms))
        known[rec.iteration] = (min(start, rec.start_ms), max(end, rec.end_ms))
    out = {}
    for job, by_k in sorted(spans.items()):
        ordered = [by_k[k] for k in sorted(by_k)]
        out[job] = JobStarts(
            job,
            models[job],
            np.array([s for s, _ in ordered], dtype=float) / 1000.0,
            np.array([e for _, e in ordered], dtype=float) / 1000.0,
        )
    return out


def same_clock(telemetry: Telemetry, starts: Mapping[str, JobStarts]) -> bool:
    """Do the samples and the iterations share a clock: does some iteration start within
    the samples' span? (A run without iterations has nothing to disagree with.)

    >>> t = Telemetry.of([(100.01, "l", "a", 1, 1, 0), (101.5, "l", "a", 1, 1, 0)])
    >>> a = JobStarts("a", "m", np.array([100.2, 100.5]), np.array([100.5, 100.8]))
    >>> same_clock(t, {"a": a}), same_clock(t, {"a": JobStarts("a", "m", a.starts_s - 99,
    ...                                                         a.ends_s - 99)})
    (True, False)
    """
    spans = [s.starts_s for s in starts.values() if s.starts_s.size]
    if not spans or not len(telemetry):
        return True
    every = np.concatenate(spans)
    first, last = float(telemetry.time_s.min()), float(telemetry.time_s.max())
    return bool(np.any((every >= first - 1.0) & (every <= last)))


def choose_window(
    starts: Mapping[str, JobStarts], first_s: float, last_s: float, iterations: int = 4
) -> tuple[float, float]:
    """A window of about `iterations` iterations of the slowest of `starts`' jobs, in the
    middle of the stretch where all of them run (the steady state, away from start-up and
    the last stragglers), inside the samples' span [first_s, last_s].

    (our choice) The slowest job's median iteration sets the length, so each job shows at
    least `iterations` starts; without two iterations of every job, the first 2 s of samples.

    >>> a = JobStarts("a", "m", np.arange(0.0, 10.0, 0.5), np.arange(0.5, 10.5, 0.5))
    >>> b = JobStarts("b", "m", np.arange(1.0, 9.0, 0.25), np.arange(1.25, 9.25, 0.25))
    >>> choose_window({"a": a, "b": b}, 0.0, 10.0)
    (4.0, 6.0)
    """
    runs = [s for s in starts.values() if s.starts_s.size >= 2]
    if not runs or len(runs) < len(starts):
        return first_s, min(last_s, first_s + 2.0)
    period = max(float(np.median(np.diff(s.starts_s))) for s in runs)
    length = period * iterations
    begin = max(float(s.starts_s[0]) for s in runs)
    end = min(float(s.ends_s[-1]) for s in runs)
    if end - begin < length:  # the jobs overlap less than a window: the middle of the run
        begin, end = min(float(s.starts_s[0]) for s in runs), max(float(s.ends_s[-1]) for s in runs)
    middle = (begin + end) / 2
    low = max(first_s, middle - length / 2)
    high = min(last_s, low + length)
    return round(max(first_s, high - length), 9), round(high, 9)


@dataclass(frozen=True)
class Utilisation:
    """Each job's share of one link per sample: `share[j, i]` is job `jobs[j]`'s bytes in
    the sample ending at `times_s[i]` over what the link could carry in a sample."""

    link: str
    times_s: FloatArray
    jobs: tuple[str, ...]
    share: FloatArray  # [job, sample]


def link_utilisation(
    telemetry: Telemetry,
    link: str,
    capacity_gbps: float,
    window: tuple[float, float],
    interval_s: float,
) -> Utilisation:
    """Per job (`other` last), its utilisation of `link` in every sample of the window,
    bytes * 8 / (interval_s * capacity_gbps * 1e9), zero where a job had no row.

    (our choice) A sample is a distinct `time_s` (every row of one sample carries its
    time), so a period that drifts from `interval_s` never puts two samples in one slot;
    where no sample came for longer than 1.5 periods (nothing moved anywhere) a zero is
    put one period before the next, so a step plot does not stretch a sample over it.

    >>> t = Telemetry.of([(0.01, "l", "a", 625, 1, 0), (0.02, "l", "b", 1250, 1, 0),
    ...                   (0.02, "x", "a", 99, 1, 0), (0.04, "l", "a", 1250, 1, 0)])
    >>> u = link_utilisation(t, "l", 1e-3, (0.0, 0.04), 0.01)
    >>> u.jobs, u.times_s.tolist(), u.share.tolist()
    (('a', 'b'), [0.01, 0.02, 0.03, 0.04], [[0.5, 0.0, 0.0, 1.0], [0.0, 1.0, 0.0, 0.0]])
    """
    if capacity_gbps <= 0:
        raise ValueError(f"link {link}: capacity {capacity_gbps} Gbit/s, not positive")
    times, index_of = _samples(telemetry.time_s, window, interval_s)
    on_link = telemetry.link == link
    slot, inside = index_of(telemetry.time_s[on_link])
    slot, who = slot[inside], telemetry.job[on_link][inside]
    nbytes = telemetry.bytes[on_link][inside]
    jobs = sorted(set(who.tolist()) - {OTHER_JOB}) + ([OTHER_JOB] if OTHER_JOB in who else [])
    share = np.zeros((len(jobs), times.size))
    full = interval_s * capacity_gbps * 1e9 / 8  # bytes a sample can carry
    for j, job in enumerate(jobs):
        mine = who == job
        np.add.at(share[j], slot[mine], nbytes[mine] / full)
    return Utilisation(link, times, tuple(jobs), share)


def queue_depth(
    queues: Queues, link: str, window: tuple[float, float], interval_s: float
) -> tuple[FloatArray, IntArray]:
    """The link's deepest queue in every sample of the window (as `link_utilisation`
    takes samples), zero where the file has no row for it (an idle link has none).

    >>> q = Queues.of([(0.02, "l", 5), (0.01, "l", 3), (0.01, "x", 9), (0.04, "x", 2),
    ...                (0.5, "l", 1)])
    >>> [a.tolist() for a in queue_depth(q, "l", (0.0, 0.04), 0.01)]
    [[0.01, 0.02, 0.03, 0.04], [3, 5, 0, 0]]
    """
    times, index_of = _samples(queues.time_s, window, interval_s)
    mine = queues.link == link
    slot, inside = index_of(queues.time_s[mine])
    depth = np.zeros(times.size, dtype=np.int64)
    np.maximum.at(depth, slot[inside], queues.max_depth_cells[mine][inside])
    return times, depth


def _samples(
    row_times: FloatArray, window: tuple[float, float], interval_s: float
) -> tuple[FloatArray, Any]:
    """The window's sample times (the rows' distinct times in (lo, hi], a zero point one
    period before a sample that follows a gap), and a function from row times to
    (index, inside the window)."""
    lo, hi = window
    seen = np.unique(row_times[(row_times > lo) & (row_times <= hi + 1e-9)])
    after_gap = seen[1:][np.diff(seen) > 1.5 * interval_s]
    times = np.union1d(seen, np.round(after_gap - interval_s, 9))

    def index_of(t: FloatArray) -> tuple[IntArray, npt.NDArray[np.bool_]]:
        k = np.clip(np.searchsorted(times, t), 0, max(0, times.size - 1))
        inside = (t > lo) & (t <= hi + 1e-9) & (times.size > 0)
        return k.astype(np.int64), inside

    return times, index_of


def iteration_marks(
    telemetry: Telemetry, starts: JobStarts, interval_s: float
) -> FloatArray:
    """CE marks the switch counted on the job's traffic (every link) in each of its
    iterations: a sample belongs to the iteration its middle falls in, iteration k running
    from its start to the next one's (the last one to its end).

    >>> t = Telemetry.of([(0.01, "l", "a", 1, 1, 2), (0.02, "m", "a", 1, 1, 3),
    ...                   (0.02, "l", "b", 1, 1, 7), (0.11, "l", "a", 1, 1, 4),
    ...                   (0.31, "l", "a", 1, 1, 5)])
    >>> s = JobStarts("a", "m", np.array([0.0, 0.1]), np.array([0.1, 0.2]))
    >>> iteration_marks(t, s, 0.01).tolist()
    [5.0, 4.0]
    """
    n = starts.starts_s.size
    if n == 0:
        return np.zeros(0)
    edges = np.append(starts.starts_s, starts.ends_s[-1])
    mine = telemetry.job == starts.job
    middle = telemetry.time_s[mine] - interval_s / 2
    k = np.searchsorted(edges, middle, side="right") - 1
    inside = (k >= 0) & (k < n)
    marks = np.zeros(n)
    np.add.at(marks, k[inside], telemetry.ce_marks[mine][inside])
    return marks


def cdf_points(values: FloatArray) -> tuple[FloatArray, FloatArray]:
    """The empirical CDF's steps: sorted values and the fraction at or below each (NaN out).

    >>> [a.tolist() for a in cdf_points(np.array([3.0, np.nan, 1.0, 2.0, 2.0]))]
    [[1.0, 2.0, 2.0, 3.0], [0.25, 0.5, 0.75, 1.0]]
    """
    x = np.sort(values[np.isfinite(values)])
    return x, np.arange(1, x.size + 1) / max(1, x.size)


def shared_range(arrays: Iterable[FloatArray], floor: float | None = 0.0) -> tuple[float, float]:
    """One (vmin, vmax) for every array, so two schedulers' heatmaps read on one scale;
    `floor` (None: the data's minimum) is vmin; an empty or flat range is widened by one.

    >>> shared_range([np.array([[0, 4], [2, 1]]), np.array([9.0, np.nan])])
    (0.0, 9.0)
    >>> shared_range([np.zeros(3)]), shared_range([], floor=None)
    ((0.0, 1.0), (0.0, 1.0))
    """
    finite = [a[np.isfinite(a)] for a in (np.asarray(a, dtype=float) for a in arrays)]
    values = np.concatenate([a.ravel() for a in finite]) if finite else np.zeros(0)
    if not values.size:
        return (floor or 0.0), (floor or 0.0) + 1.0
    low = float(values.min()) if floor is None else floor
    high = float(values.max())
    return low, high if high > low else low + 1.0


def downsample(x: FloatArray, y: FloatArray, max_points: int) -> tuple[FloatArray, FloatArray]:
    """At most `max_points` points that keep every bucket's lowest and highest y (its
    spikes), in x order: a long run's series stays small in a vector file.

    >>> x = np.arange(8.0); y = np.array([0, 5, 1, 1, 2, 9, 3, 0.0])
    >>> [a.tolist() for a in downsample(x, y, 4)]
    [[0.0, 1.0, 5.0, 7.0], [0.0, 5.0, 9.0, 0.0]]
    """
    if x.size <= max_points:
        return x, y
    buckets = max(1, max_points // 2)
    keep = []
    for part in np.array_split(np.arange(x.size), buckets):
        lo, hi = part[np.argmin(y[part])], part[np.argmax(y[part])]
        keep += sorted({int(lo), int(hi)})
    idx = np.array(keep)
    return x[idx], y[idx]
