"""What did each port send per job, and how deep did its queue get, every 10 ms?

The packet loop samples the per-(port, job class) counts (the job_tx and
job_ecn_marked counters of the P4 program) and the deepest queue each port's
frames found (the max_qdepth register, reset at each sample) every
SAMPLE_INTERVAL_S into a ring in the shared statistics memory
(`shared_counters.SharedCounters`): in C where the loop runs in C
(`_fastpath.Pipeline.run`), with `SampleRing.write` where it runs in Python.
The loop never waits for a reader: it overwrites the oldest slot, and a
`SampleReader` that fell more than a ring behind is told how many samples it
lost. No protobuf and no Python object per packet are involved; a gNMI
Subscribe STREAM handler calls `SampleReader.read` at its sample interval.

The ring is int64 words: a header (samples written, slots, ports, classes,
interval in ns, words per slot), the sampled ports, then the slots. A slot
holds its sample number + 1 (0 while it is written), the loop's monotonic
clock and the wall clock (ns), then per (port, class) the cumulative
transmitted packets, bytes and CE-marked packets, then per port the deepest
queue in cells since the previous sample. Counts are cumulative in the ring
and turned into per-sample deltas by the reader, so a lost sample loses time
resolution, never bytes: the sums of the deltas a reader got equal the
counters at its last sample.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .state import JOB_CLASSES

SAMPLE_INTERVAL_S = 0.01
# (our choice) 2.56 s of samples: a reader looking in every second loses none.
RING_SLOTS = 256
HEADER_WORDS = 8
_WRITTEN, _SLOTS, _PORTS, _CLASSES, _INTERVAL_NS, _SLOT_WORDS = range(6)
SLOT_HEAD_WORDS = 4  # sample number + 1, loop clock ns, wall clock ns, reserved
VALUES = 3  # per (port, class): packets, bytes, CE-marked packets


def slot_words(n_ports: int) -> int:
    """Words of one slot: its head, VALUES per (port, class), one depth per port."""
    return SLOT_HEAD_WORDS + n_ports * (JOB_CLASSES * VALUES + 1)


def ring_words(n_ports: int, slots: int = RING_SLOTS) -> int:
    """Words of the whole ring: header, the ports, the slots.

    >>> ring_words(2, 4) == 8 + 2 + 4 * (4 + 2 * 49)
    True
    """
    return HEADER_WORDS + n_ports + slots * slot_words(n_ports)


class SampleRing:
    """The ring over int64 words of shared memory (`ring_words` of them)."""

    def __init__(
        self,
        words: np.ndarray,
        ports: Sequence[int],
        slots: int = RING_SLOTS,
        interval_s: float = SAMPLE_INTERVAL_S,
    ) -> None:
        n = len(ports)
        if words.dtype != np.int64 or words.shape != (ring_words(n, slots),):
            raise ValueError(
                f"a ring of {n} ports and {slots} slots needs {ring_words(n, slots)} words"
            )
        self.words = words
        self.ports = tuple(ports)
        self.slots = slots
        self.interval_s = interval_s
        self.header = words[:HEADER_WORDS]
        geometry = (slots, n, JOB_CLASSES, round(interval_s * 1e9), slot_words(n))
        if int(self.header[_SLOTS]) == 0:  # a new block: its geometry (the same on both sides)
            self.header[_SLOTS : _SLOT_WORDS + 1] = geometry
            words[HEADER_WORDS : HEADER_WORDS + n] = self.ports
        elif (
            tuple(int(v) for v in self.header[_SLOTS : _SLOT_WORDS + 1]) != geometry
            or tuple(int(v) for v in words[HEADER_WORDS : HEADER_WORDS + n]) != self.ports
        ):
            raise ValueError("the shared ring was laid out for other ports or another interval")
        self.slot_rows = words[HEADER_WORDS + n :].reshape(slots, slot_words(n))

    @property
    def written(self) -> int:
        """Samples written since the loop started (the next sample's number)."""
        return int(self.header[_WRITTEN])

    def write(
        self,
        loop_time: float,
        wall_time: float,
        packets: np.ndarray,
        byte_counts: np.ndarray,
        marks: np.ndarray,
        depths: np.ndarray,
    ) -> None:
        """One sample (the Python loop's writer; `_fastpath.Pipeline` has its own in C):
        cumulative counts [ports * JOB_CLASSES] each, depths [ports]."""
        number = self.written
        row = self.slot_rows[number % self.slots]
        cells = len(self.ports) * JOB_CLASSES
        row[0] = 0  # being written
        row[1] = round(loop_time * 1e9)
        row[2] = round(wall_time * 1e9)
        at = SLOT_HEAD_WORDS
        for values in (packets, byte_counts, marks):
            row[at : at + cells] = values
            at += cells
        row[at:] = depths
        row[0] = number + 1
        self.header[_WRITTEN] = number + 1


@dataclass(frozen=True)
class Sample:
    """One sample: what each (port, job class) sent and had CE-marked since the reader's
    previous sample (`intervals` sampling intervals: more than 1 after lost samples),
    and the deepest queue each port had in its own interval."""

    number: int
    time_s: float  # the packet loop's monotonic clock
    wall_s: float  # the wall clock (time.time) at the same instant
    intervals: int
    ports: tuple[int, ...]
    packets: np.ndarray  # [ports, JOB_CLASSES]
    bytes: np.ndarray  # [ports, JOB_CLASSES]
    ce_marks: np.ndarray  # [ports, JOB_CLASSES], packets
    max_depth_cells: np.ndarray  # [ports]


@dataclass(frozen=True)
class Samples:
    """What one read returned, and how many samples were lost before it or in it."""

    samples: tuple[Sample, ...]
    lost: int


class SampleReader:
    """A reader of the ring with its own place in it: each `read` returns the samples
    written since the previous one. `from_start` reads from the loop's first sample
    (as far as the ring still holds it); else from the next one written."""

    def __init__(self, ring: SampleRing, from_start: bool = False) -> None:
        self.ring = ring
        n = len(ring.ports)
        self._cells = n * JOB_CLASSES
        self._next = 0 if from_start else ring.written
        self._last_number = self._next - 1
        # Cumulative counts at the last sample read (zeros before the first one).
        self._last = np.zeros(VALUES * self._cells, dtype=np.int64)
        if not from_start and self._next > 0:
            taken = self._copy(self._next - 1)
            if taken is not None:
                self._last = taken[SLOT_HEAD_WORDS : SLOT_HEAD_WORDS + VALUES * self._cells]

    def _copy(self, number: int) -> np.ndarray | None:
        """A copy of sample `number`'s slot, or None if it was overwritten meanwhile."""
        slot = self.ring.slot_rows[number % self.ring.slots]
        if int(slot[0]) != number + 1:
            return None
        taken = slot.copy()
        if int(slot[0]) != number + 1 or int(taken[0]) != number + 1:
            return None
        return taken

    def read(self) -> Samples:
        """The samples since the last read, oldest first, and how many were lost."""
        ring = self.ring
        written = ring.written
        first, lost = self._next, 0
        if written - first > ring.slots:
            lost = written - ring.slots - first
            first = written - ring.slots
        n, cells = len(ring.ports), self._cells
        out = []
        for number in range(first, written):
            taken = self._copy(number)
            if taken is None:  # the loop came round and overwrote it while we read
                lost += 1
                continue
            counts = taken[SLOT_HEAD_WORDS : SLOT_HEAD_WORDS + VALUES * cells]
            delta = (counts - self._last).reshape(VALUES, n, JOB_CLASSES)
            out.append(
                Sample(
                    number=number,
                    time_s=int(taken[1]) / 1e9,
                    wall_s=int(taken[2]) / 1e9,
                    intervals=number - self._last_number,
                    ports=ring.ports,
                    packets=delta[0],
                    bytes=delta[1],
                    ce_marks=delta[2],
                    max_depth_cells=taken[SLOT_HEAD_WORDS + VALUES * cells :],
                )
            )
            self._last = counts
            self._last_number = number
        self._next = written
        return Samples(tuple(out), lost)
