"""Where do the packet loop's counters and statistics live, so the service reads them
without asking the loop?

In a block of shared memory (a memfd, so nothing is left behind in /dev/shm):
the P4 counters, which both switch programs (`reference_program` and
`fast_pipeline`) add to every millisecond, and the per-port statistics of
`port_stats.STAT_NAMES`, the per (port, queue class) counters of
`tm_config.CLASS_COUNTERS` and the lateness histograms, which they publish every
`datapath.STATS_PUBLISH_S`. One writer (the loop) changes the block under a
sequence lock, so a reader (the P4Runtime service, in another process) copies
a consistent snapshot without a lock or a message. At its end, the ring of
10 ms samples per (port, job class) (`sample_ring`), which has locks of its
own per slot.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from controlplane.p4info import load_p4info
from controlplane.p4names import COUNTERS as COUNTER_NAMES
from controlplane.p4names import check_p4_names

from .port_stats import (
    FIDELITY_NAMES,
    LATENESS_BUCKETS,
    STAT_NAMES,
    Lateness,
    lateness_summary,
)
from .sample_ring import RING_SLOTS, SAMPLE_INTERVAL_S, SampleRing, ring_words
from .state import COUNTER_CELLS, counter_cells
from .tm_config import CLASS_COUNTERS, QUEUE_CLASSES

# Header words of the shared block: the sequence lock, then room for figures of the loop.
_SEQUENCE, _HEADER_WORDS = 0, 8


def checked_counter_names() -> tuple[str, ...]:
    """The counter names the target writes, as the P4Info spells them."""
    index = load_p4info()
    check_p4_names(index)
    return tuple(index.counter(name).name for name in COUNTER_NAMES)


class SharedCounters:
    """The shared block: header, P4 counters (each [counter_cells(name), 2]), statistics
    [m, COUNTER_CELLS], class statistics [len(CLASS_COUNTERS), COUNTER_CELLS * QUEUE_CLASSES]
    (at port * QUEUE_CLASSES + class, as the traffic manager keeps them).

    One writer (the loop) brackets every change with `begin()`/`end()`, which
    make the sequence word odd, then even again; a reader copies and retries
    when the word was odd or moved meanwhile (a seqlock).
    """

    def __init__(
        self,
        fd: int,
        counter_names: Sequence[str],
        sample_ports: Sequence[int] = (),
        sample_slots: int = RING_SLOTS,
        sample_interval_s: float = SAMPLE_INTERVAL_S,
    ) -> None:
        """`sample_ports`: the ports the sample ring holds (both processes give the same)."""
        self.fd = fd
        self.counter_names = tuple(counter_names)
        header = _HEADER_WORDS * 8
        cells = [counter_cells(name) for name in self.counter_names]
        counters = sum(cells) * 2 * 8
        stats = len(STAT_NAMES) * COUNTER_CELLS * 8
        classes = len(CLASS_COUNTERS) * COUNTER_CELLS * QUEUE_CLASSES * 8
        fidelity = len(FIDELITY_NAMES) * (LATENESS_BUCKETS + 1) * 8
        ring = ring_words(len(sample_ports), sample_slots) * 8
        size = header + counters + stats + classes + fidelity + ring
        if os.fstat(fd).st_size < size:
            os.ftruncate(fd, size)
        self._memory = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        buffer = memoryview(self._memory)
        self.header = np.frombuffer(buffer, np.int64, _HEADER_WORDS, 0)
        self.counter_block = np.frombuffer(buffer, np.int64, counters // 8, header)
        self.counters: list[np.ndarray] = []
        at = 0
        for n in cells:
            self.counters.append(self.counter_block[at : at + 2 * n].reshape(n, 2))
            at += 2 * n
        self.stats = np.frombuffer(buffer, np.int64, stats // 8, header + counters).reshape(
            len(STAT_NAMES), COUNTER_CELLS
        )
        self.class_stats = np.frombuffer(
            buffer, np.int64, classes // 8, header + counters + stats
        ).reshape(len(CLASS_COUNTERS), COUNTER_CELLS * QUEUE_CLASSES)
        # Per FIDELITY_NAMES: its lateness histogram, then its largest lateness (float).
        at = header + counters + stats + classes
        self.lateness = np.frombuffer(
            buffer, np.int64, len(FIDELITY_NAMES) * LATENESS_BUCKETS, at
        ).reshape(len(FIDELITY_NAMES), LATENESS_BUCKETS)
        self.lateness_max = np.frombuffer(
            buffer, np.float64, len(FIDELITY_NAMES), at + self.lateness.nbytes
        )
        self.ring = SampleRing(
            np.frombuffer(buffer, np.int64, ring // 8, at + fidelity),
            sample_ports,
            sample_slots,
            sample_interval_s,
        )

    @classmethod
    def create(
        cls, counter_names: Sequence[str], sample_ports: Sequence[int] = ()
    ) -> SharedCounters:
        fd = os.memfd_create("cassini-counters", os.MFD_CLOEXEC)
        return cls(fd, counter_names, sample_ports)

    def counter_views(self) -> dict[str, np.ndarray]:
        """Writable views, one per counter (the loop's DataplaneState.counters)."""
        return {name: self.counters[i] for i, name in enumerate(self.counter_names)}

    def begin(self) -> None:
        self.header[_SEQUENCE] += 1

    def end(self) -> None:
        self.header[_SEQUENCE] += 1

    def _consistent(self, copy: Any) -> Any:
        header = self.header
        while True:
            before = int(header[_SEQUENCE])
            if before & 1:
                time.sleep(0)
                continue
            taken = copy()
            if int(header[_SEQUENCE]) == before:
                return taken

    def publish_fidelity(self, histograms: Sequence[np.ndarray], largest: Sequence[float]) -> None:
        """Copy the lateness histograms (FIDELITY_NAMES order); inside begin()/end()."""
        for i, histogram in enumerate(histograms):
            self.lateness[i] = histogram
        self.lateness_max[:] = largest

    def read_fidelity_histograms(self) -> dict[str, tuple[tuple[int, ...], float]]:
        """The lateness histograms and largest lateness (s), all from one instant: a reader
        that wants one interval's figures subtracts two of these."""
        taken = self._consistent(lambda: (self.lateness.copy(), self.lateness_max.copy()))
        return {
            name: (tuple(int(c) for c in taken[0][i]), float(taken[1][i]))
            for i, name in enumerate(FIDELITY_NAMES)
        }

    def read_fidelity(self) -> dict[str, Lateness]:
        """Summaries of the lateness histograms, all from one instant."""
        taken = self._consistent(lambda: (self.lateness.copy(), self.lateness_max.copy()))
        return {
            name: lateness_summary(taken[0][i], float(taken[1][i]))
            for i, name in enumerate(FIDELITY_NAMES)
        }

    def read_counters(self, names: Iterable[str]) -> dict[str, np.ndarray]:
        """Copies of the named counters, all from one instant."""
        wanted = list(names)
        known = [n for n in wanted if n in self.counter_names]
        rows = [self.counter_names.index(n) for n in known]
        taken = self._consistent(lambda: [self.counters[row].copy() for row in rows])
        out = dict(zip(known, taken, strict=True))
        for name in wanted:  # a P4Info counter this target does not count: zeros
            out.setdefault(name, np.zeros((counter_cells(name), 2), dtype=np.int64))
        return out

    def read_stats(self) -> dict[str, dict[int, int]]:
        """Per-port statistics ({name: {port: value}}, non-zero ones)."""
        taken = self._consistent(self.stats.copy)
        out: dict[str, dict[int, int]] = {}
        for i, name in enumerate(STAT_NAMES):
            row = taken[i]
            out[name] = {int(p): int(row[p]) for p in np.flatnonzero(row)}
        return out

    def read_class_stats(self) -> dict[str, dict[tuple[int, int], int]]:
        """Per (port, queue class) counters ({CLASS_COUNTERS name: {(port, class): value}},
        non-zero ones), all from one instant: what `class_stats()` of the switch program
        returned when it last published."""
        taken = self._consistent(self.class_stats.copy)
        return {
            name: {divmod(int(i), QUEUE_CLASSES): int(row[i]) for i in np.flatnonzero(row)}
            for name, row in zip(CLASS_COUNTERS, taken, strict=True)
        }

    def close(self) -> None:
        # Views into the mapping must go before it can close.
        del (
            self.header,
            self.counter_block,
            self.counters,
            self.stats,
            self.class_stats,
            self.lateness,
            self.lateness_max,
            self.ring,
        )
        with contextlib.suppress(BufferError):
            self._memory.close()
        with contextlib.suppress(OSError):
            os.close(self.fd)
