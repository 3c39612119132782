"""What runs the switch program at compiled speed, with the reference's answers?

`FastSwitchProgram` is a `switch_program.SwitchProgram` (ingress, receive,
advance, counters, statistics) over the compiled `_fastpath.Pipeline`, a port
of `ReferenceSwitchProgram.ingress` and `TrafficManager` that is also its
`CompiledPath` (it reads the port rings and sends by itself). The Python
classes stay the reference: the same frames at the same times give the same
frames out, at the same times, with the same counters
(tests/softswitch/test_fast_pipeline.py).
Every derived setting (rates in seconds per byte, queue limits, cables, PFC
frames and pause times, the WRED random stream, the queue classes' limits,
WRED profiles, PFC and pause frames) is taken from a reference
`TrafficManager` built over the same config, so nothing is computed twice.

A profile of the Python loop under the 12-flow fabric load put 64% of its
time in the pipeline (traffic manager 40%, ingress 26%, heap 10%), 14% in
send(), 7% reading the ring and 7% copying counters; the compiled path moves
all of that but the kernel's work into C, reads the ring and sends with
sendmmsg() per run of frames to one port, and keeps its counters in one int64
array that is copied out with numpy instead of port by port. At the fabric's
50 Mbit/s the loop sleeps toward almost every departure, so `Pipeline.run`
also does the sleeping (ppoll, nanosecond timeouts) and Python looks in only
about every millisecond (counters) or when the control socket has a Write.
What is left is mostly the kernel: sendmmsg() into a veth also runs the
receiving host's stack on the sender's core.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from .port_stats import LATENESS_BUCKETS, P4_COUNTED_STATS, STAT_NAMES, lateness_bucket
from .sample_ring import SampleRing
from .shared_counters import SharedCounters, checked_counter_names
from .state import COUNTER_CELLS, JOB_CLASSES, JOB_COUNTER_CELLS, DataplaneState
from .switch_program import program_ports
from .tm_config import CLASS_COUNTERS, QUEUE_CLASSES, TmConfig
from .traffic_manager import TrafficManager

try:
    from . import _fastpath
except ImportError:  # not built (scripts/setup.sh builds it)
    _fastpath = None  # type: ignore[assignment, unused-ignore]


def available() -> bool:
    """Is the compiled module built?"""
    return _fastpath is not None


class FastSwitchProgram:
    """The switch program over one DataplaneState, compiled (see the module docstring)."""

    def __init__(
        self,
        state: DataplaneState,
        config: TmConfig,
        interface_ports: Iterable[int],
        seed: int = 0,
        port_macs: Mapping[int, bytes] | None = None,
        counter_names: Sequence[str] | None = None,
        shared: SharedCounters | None = None,
    ) -> None:
        if _fastpath is None:
            raise RuntimeError("the compiled packet path is not built (run scripts/setup.sh)")
        self.state = state
        self.config = config
        self.shared = shared
        self.interface_ports, self.ports = program_ports(config, interface_ports)
        self.valid_ports = frozenset(self.ports)
        reference = TrafficManager(config, self.ports, state.wred, seed=seed, port_macs=port_macs)
        rows: tuple[str, ...] = _fastpath.ROW_NAMES
        self.rows = {name: i for i, name in enumerate(rows)}
        self.counts = np.zeros((len(rows), COUNTER_CELLS), dtype=np.int64)
        self.departure_lateness = np.zeros(LATENESS_BUCKETS, dtype=np.int64)
        self.wakeup_lateness = np.zeros(LATENESS_BUCKETS, dtype=np.int64)
        self.wakeup_max = 0.0
        # Per (port, job class): tx packets, tx bytes, marked packets, marked bytes
        # (traffic_manager.TrafficManager.job_*), and the deepest queue each port's
        # frames found since its reader zeroed it (TrafficManager.max_depth_cells).
        self.job_counts = np.zeros((4, JOB_COUNTER_CELLS), dtype=np.int64)
        self.max_depth_cells = np.zeros(COUNTER_CELLS, dtype=np.int64)
        # Per (port, queue class), the rows of tm_config.CLASS_COUNTERS.
        self.class_counts = np.zeros(
            (len(CLASS_COUNTERS), COUNTER_CELLS * QUEUE_CLASSES), dtype=np.int64
        )
        self.tm = _fastpath.Pipeline(
            COUNTER_CELLS,
            reference.seconds_per_byte,
            reference.queue_limit,
            reference.cable_peer,
            reference.cable_delay,
            reference.pause_seconds,
            self.ports,
            {p: frames[0] for p, frames in reference.pause_frames.items()},
            {p: frames[1] for p, frames in reference.pause_frames.items()},
            reference.wire_overhead,
            config.cell_bytes,
            config.buffer_cells,
            reference.pfc_enabled,
            reference.xoff_cells,
            reference.xon_cells,
            state.forward,
            state.wred,
            reference._random,  # the same seeded stream as the reference's WRED
            self.counts,
            self.departure_lateness,
            self.wakeup_lateness,
            state.job_by_dst,
            state.job_by_src,
            self.job_counts,
            self.max_depth_cells,
            state.queue_by_dscp,
            state.queue_by_flow,
            reference.class_limit,
            reference.class_wred,
            [c[:3] for c in reference.class_pfc],
            {k: frames[0] for k, frames in reference.class_pause_frames.items()},
            {k: frames[1] for k, frames in reference.class_pause_frames.items()},
            self.class_counts,
        )
        # The rows the packet loop adds to (numpy rows: `row[port] += n` works).
        self.rx_overruns = self.counts[self.rows["rx_overruns"]]
        self.port_down = self.counts[self.rows["port_down"]]  # the loop's, not the pipeline's
        self.send_errors = self.counts[self.rows["send_errors"]]
        names = tuple(counter_names) if counter_names is not None else checked_counter_names()
        row = self.rows
        self._counter_rows = [
            (state.counter(names[0]), row["rx_packets"], row["rx_bytes"]),
            (state.counter(names[1]), row["tx_packets"], row["tx_bytes"]),
            (state.counter(names[2]), row["ecn_marked"], row["ecn_marked_bytes"]),
            (state.counter(names[3]), row["wred_dropped"], row["wred_dropped_bytes"]),
        ]
        self._flushed = self.counts.copy()
        self._job_counters = [
            (state.counter(names[4]), 0, 1),
            (state.counter(names[5]), 2, 3),
        ]
        self._job_flushed = self.job_counts.copy()
        self.job_cells = np.array(
            [p * JOB_CLASSES + c for p in self.ports for c in range(JOB_CLASSES)], dtype=np.intp
        )
        self._stat_rows = [row[name] for name in STAT_NAMES]
        self.sample_ring: SampleRing | None = None

    # --- the pipeline (the reference's names) ----------------------------------------

    def start_sampling(self, ring: SampleRing, first_due: float) -> None:
        """Sample into `ring` every ring.interval_s from `first_due` on: `Pipeline.run`
        does it itself, in C; a Python loop calls `sample`."""
        self.sample_ring = ring
        self.tm.set_sampler(ring.words, ring.ports, ring.slots, ring.interval_s, first_due)

    def sample(self, loop_time: float, wall_time: float) -> None:
        """One sample into the ring now (resets each port's deepest queue)."""
        if self.sample_ring is not None:
            self.tm.sample(loop_time, wall_time)

    def compiled_path(self) -> _fastpath.Pipeline:
        """The compiled pipeline: it reads the port rings and sends by itself."""
        return self.tm

    def ingress(self, port: int, frame: bytes, now: float) -> None:
        self.tm.ingress(port, frame, now)

    def receive(self, port: int, frame: bytes, stamp: float) -> None:
        self.tm.receive(port, frame, stamp)

    def advance(self, now: float) -> None:
        self.tm.advance(now)

    def note_departures(self, now: float) -> None:
        """Frames in `tm.transmitted` handed over at `now` (send() does this itself)."""
        for due in self.tm.transmitted_due:
            self.departure_lateness[lateness_bucket(now - due)] += 1

    def counter(self, name: str) -> np.ndarray:
        """One row of the counts ({stat}, or {stat}_bytes for the byte-counted ones), per port."""
        return self.counts[self.rows[name]]

    # --- counters and statistics -------------------------------------------------

    def flush_counters(self) -> None:
        """Add what changed since the last flush to the shared P4 counter arrays."""
        shared = self.shared
        counts, flushed = self.counts, self._flushed
        if shared is not None:
            shared.begin()
        for array, packets, byte_counts in self._counter_rows:
            array[:, 0] += counts[packets] - flushed[packets]
            array[:, 1] += counts[byte_counts] - flushed[byte_counts]
        flushed[:] = counts
        jobs, job_flushed, cells = self.job_counts, self._job_flushed, self.job_cells
        for array, packets, byte_counts in self._job_counters:
            array[cells, 0] += jobs[packets, cells] - job_flushed[packets, cells]
            array[cells, 1] += jobs[byte_counts, cells] - job_flushed[byte_counts, cells]
        job_flushed[:, cells] = jobs[:, cells]
        if shared is not None:
            shared.end()

    def publish_stats(self) -> None:
        """Copy every per-port and per (port, queue class) statistic and the fidelity
        histograms into the shared block."""
        shared = self.shared
        if shared is None:
            return
        shared.begin()
        shared.stats[:] = self.counts[self._stat_rows]
        shared.class_stats[:] = self.class_counts  # one copy: the C loop counts in place
        shared.publish_fidelity(
            (self.departure_lateness, self.wakeup_lateness),
            (self.tm.late_max, max(self.wakeup_max, self.tm.wakeup_max)),
        )
        shared.end()

    def port_stats(self) -> dict[str, dict[int, int]]:
        """Every statistic of `STAT_NAMES`, per port (non-zero ones only)."""
        out = {}
        for name, row in zip(STAT_NAMES, self._stat_rows, strict=True):
            values = self.counts[row]
            out[name] = {int(p): int(values[p]) for p in np.flatnonzero(values)}
        return out

    def class_stats(self) -> dict[str, dict[tuple[int, int], int]]:
        """Per (port, queue class) counters (tm_config.CLASS_COUNTERS), non-zero ones."""
        return {
            name: {divmod(int(i), QUEUE_CLASSES): int(row[i]) for i in np.flatnonzero(row)}
            for name, row in zip(CLASS_COUNTERS, self.class_counts, strict=True)
        }

    def stats(self) -> dict[str, dict[int, int]]:
        """Drops and events that have no P4 counter, per port (for logs and tests)."""
        return {k: v for k, v in self.port_stats().items() if k not in P4_COUNTED_STATS}
