"""What does one iteration of one worker record, and in what form is it written?

One JSON object per line (JSON lines), flushed per iteration, so a replica
that dies mid-run leaves every finished iteration readable. Times are epoch
ms of the machine's clock, which every namespace shares.

Besides what the network did to it, a record carries the replica's own
lateness, the host witness of the fidelity monitor: how much later than
asked the worker woke from its sleeps (the agent's slot, each Down phase),
summed and the largest, and per Up phase the rate it achieved over the rate
its connections are paced at (1.0: the pacing rate). Fields added later have
defaults, so files written before them still read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import IO

from .agent import adjustments_per_minute

# The column order of the iterations.csv.
COLUMNS = (
    "job", "model", "worker", "iteration", "start_ms", "end_ms",
    "bytes", "comm_ms", "wait_ms", "adjusted", "ce_marks",
    "late_ms", "late_max_ms",
)  # fmt: skip
# (our choice) `up_pace`, a list per record, stays in the replicas' JSON lines: a
# flat table has no place for a variable number of phases.


@dataclass(frozen=True)
class IterationRecord:
    """One worker's iteration: when, how many bytes it sent, time in the collective,
    time the agent idled before it, and whether the agent re-aligned after it; then the
    host witness (see the module docstring): None where the replica did not measure it."""

    job: str
    model: str
    worker: int
    iteration: int
    start_ms: float
    end_ms: float
    bytes: int
    comm_ms: float
    wait_ms: float
    adjusted: bool
    ce_marks: int | None = None  # None: not counted by this replica
    late_ms: float | None = None  # summed lateness of the iteration's wake-ups (ms)
    late_max_ms: float | None = None  # the latest of them (ms)
    # per Up phase, in order: achieved rate / pacing rate (None: unpaced or not measured)
    up_pace: tuple[float, ...] | None = None
    # RoCE only (None under TCP): CNPs this worker sent for the CE-marked packets it
    # received (`ce_marks` counts those), rate cuts and go-back-N retransmits at its
    # senders, PFC pause frames its NIC honoured and the time they paused it
    cnps: int | None = None
    rate_cuts: int | None = None
    retransmits: int | None = None
    pfc_pause_frames: int | None = None
    pfc_paused_ms: float | None = None

    @property
    def iteration_ms(self) -> float:
        """The training step's time: from when the worker was ready (the previous
        iteration's end) to this one's end, so the agent's idle before it counts, as
        the fluid simulator counts it ("agent waits are its cost"). Iteration 0's wait
        is the job's start shift, counted there by both alike."""
        return self.wait_ms + self.end_ms - self.start_ms

    @property
    def busy_ms(self) -> float:
        """Start to end: the iteration's work alone, without the agent's idle before it."""
        return self.end_ms - self.start_ms


def write_record(stream: IO[str], record: IterationRecord) -> None:
    """Append one record as a JSON line and flush it."""
    stream.write(json.dumps(asdict(record)) + "\n")
    stream.flush()


def read_records(path: str | Path) -> list[IterationRecord]:
    """The records of a JSON-lines file. A line that is no record is skipped: a torn last
    line from a kill (which may still parse, as a number), or an object without a
    record's fields."""
    names = {f.name for f in fields(IterationRecord)}
    out = []
    for line in Path(path).read_text().splitlines():
        try:
            raw = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(raw, dict):
            continue
        known = {k: v for k, v in raw.items() if k in names}
        if isinstance(known.get("up_pace"), list):  # JSON has no tuples
            known["up_pace"] = tuple(known["up_pace"])
        try:
            out.append(IterationRecord(**known))
        except TypeError:  # a required field missing
            continue
    return out


def csv_rows(records: Iterable[IterationRecord]) -> Iterator[list[str]]:
    """The header, then one row per record, in the issue's column order (the host
    witness's scalars after it)."""
    yield list(COLUMNS)
    for record in records:
        values = asdict(record)
        yield ["" if values[c] is None else str(values[c]) for c in COLUMNS]


@dataclass(frozen=True)
class JobAdjustments:
    """A job's agent re-alignments over a run: the paper's per-minute figure."""

    job: str
    adjustments: int  # the most any one worker's agent made (our choice, see below)
    duration_ms: float  # first start to last end over the job's workers
    per_minute: float


def job_adjustments(records: Iterable[IterationRecord]) -> dict[str, JobAdjustments]:
    """Per job, the adjustments per minute from its records.

    (our choice) Every worker runs its own agent on the shared clock, and
    they re-align together when the job drifts; a job's count is the largest
    of its workers' counts, so a worker that drifted alone still shows.

    >>> r = [IterationRecord("j", "m", w, k, k * 100.0, k * 100.0 + 90, 0, 0.0, 0.0, k == 1 and w == 0)
    ...      for w in (0, 1) for k in range(600)]
    >>> job_adjustments(r)["j"]
    JobAdjustments(job='j', adjustments=1, duration_ms=59990.0, per_minute=1.0001666944490748)
    """
    per_worker: dict[str, dict[int, int]] = {}
    spans: dict[str, tuple[float, float]] = {}
    for record in records:
        counts = per_worker.setdefault(record.job, {})
        counts[record.worker] = counts.get(record.worker, 0) + int(record.adjusted)
        first, last = spans.get(record.job, (record.start_ms, record.end_ms))
        spans[record.job] = (min(first, record.start_ms), max(last, record.end_ms))
    out = {}
    for job, counts in per_worker.items():
        most = max(counts.values())
        duration = spans[job][1] - spans[job][0]
        out[job] = JobAdjustments(job, most, duration, adjustments_per_minute(most, duration))
    return out
