"""What does the switch program do to a frame, in plain Python?

`ReferenceSwitchProgram` is the P4 program's ingress and egress: count, look
up (ingress_port, dst_mac) in `logical_forward`, find the frame's job class
(`job_class`: job_by_dst, then job_by_src), hand to the traffic manager,
count on transmit per port and per (port, job class). It is the reference: `fast_pipeline.FastSwitchProgram`
must give the same frames out at the same times with the same counters
(tests/softswitch/test_fast_pipeline.py). Its counters are Python ints, one
list per statistic, added to the shared P4 counter arrays only when the loop
flushes them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from operator import itemgetter

import numpy as np

from .packet import parse_mac_control
from .port_stats import LATENESS_BUCKETS, P4_COUNTED_STATS, STAT_NAMES, lateness_bucket
from .sample_ring import SampleRing
from .shared_counters import SharedCounters, checked_counter_names
from .state import COUNTER_CELLS, JOB_CLASSES, DataplaneState
from .switch_program import program_ports
from .tm_config import CLASS_COUNTERS, QUEUE_CLASSES, TmConfig
from .traffic_manager import TrafficManager

BROADCAST_MAC = b"\xff" * 6
_TCP, _UDP = 6, 17


def job_class(frame: bytes, by_dst: Mapping[int, int], by_src: Mapping[int, int]) -> int:
    """The class of a frame's job (0: none), as the P4 program finds it: for option-less
    IPv4 (first byte 0x45) carrying TCP or UDP at fragment offset 0, its (destination
    address, port) in job_by_dst, else its (source address, port) in job_by_src.

    >>> head = bytes(12) + bytes.fromhex("0800 4500 0000 0000 0000 0006 0000 0a000002 0a000001")
    >>> frame = head + (40000).to_bytes(2, "big") + (47000).to_bytes(2, "big")  # TCP, to :47000
    >>> job_class(frame, {0x0A000001 << 16 | 47000: 3}, {}), job_class(frame, {}, {})
    (3, 0)
    """
    if (
        len(frame) < 38
        or frame[12] != 8
        or frame[13] != 0
        or frame[14] != 0x45
        or frame[23] not in (_TCP, _UDP)
        or frame[20] & 0x1F
        or frame[21]
    ):
        return 0
    found = by_dst.get(int.from_bytes(frame[30:34], "big") << 16 | frame[36] << 8 | frame[37])
    if found is None:
        found = by_src.get(int.from_bytes(frame[26:30], "big") << 16 | frame[34] << 8 | frame[35])
    return found or 0


def queue_class(frame: bytes, by_dscp: Mapping[int, int], by_flow: Mapping[bytes, int]) -> int:
    """The queue class of a frame, as the P4 program's ingress finds it: for option-less
    IPv4 carrying TCP or UDP at fragment offset 0, its 5-tuple (state.flow_key) in
    queue_class_by_flow; else, for any parsed IPv4 (first byte 0x45), its DSCP in
    queue_class; else 0.

    >>> head = bytes(12) + bytes.fromhex("0800 45b8 0000 0000 0000 0011 0000 0a000001 0a000002")
    >>> frame = head + bytes.fromhex("12b7 12b7")  # UDP 4791 -> 4791, DSCP 46
    >>> queue_class(frame, {46: 5}, {}), queue_class(frame, {46: 5}, {frame[26:34] + b"\\x11" + frame[34:38]: 7})
    (5, 7)
    """
    if not by_dscp and not by_flow:
        return 0
    if len(frame) < 34 or frame[12] != 8 or frame[13] != 0 or frame[14] != 0x45:
        return 0
    if (
        by_flow
        and len(frame) >= 38
        and frame[23] in (_TCP, _UDP)
        and not (frame[20] & 0x1F or frame[21])
    ):
        found = by_flow.get(frame[26:34] + frame[23:24] + frame[34:38])
        if found is not None:
            return found
    return by_dscp.get(frame[15] >> 2, 0)


class ReferenceSwitchProgram:
    """The switch program over one DataplaneState and one TrafficManager, in Python
    (a `switch_program.SwitchProgram`; see the module docstring)."""

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
        self.state = state
        self.config = config
        # In a packet-loop process: the block the counters live in (state's arrays
        # are views of it) and the statistics are published to.
        self.shared = shared
        self.interface_ports, self.ports = program_ports(config, interface_ports)
        self.valid_ports = frozenset(self.ports)
        self.tm = TrafficManager(
            config, self.ports, state.wred, seed=seed, port_macs=port_macs, on_arrival=self.ingress
        )
        n = COUNTER_CELLS
        self.rx_packets = [0] * n
        self.rx_bytes = [0] * n
        self.rx_broadcast = [0] * n  # of rx_packets: to ff:ff:ff:ff:ff:ff
        self.rx_multicast = [0] * n  # of rx_packets: to any other group address
        self.forward_misses = [0] * n
        self.malformed = [0] * n
        self.pfc_received = [0] * n  # PFC and 802.3x PAUSE frames
        self.mac_control_ignored = [0] * n
        self.to_unknown_port = [0] * n
        self.rx_overruns = [0] * n  # frames the kernel dropped before we read them
        self.send_errors = [0] * n  # finished frames a host socket refused
        self.port_down = self.tm.port_down  # 1: interface gone or cable failed (the TM drops)
        names = tuple(counter_names) if counter_names is not None else checked_counter_names()
        tm = self.tm
        self._counter_sources = [
            (state.counter(names[0]), self.rx_packets, self.rx_bytes),
            (state.counter(names[1]), tm.tx_packets, tm.tx_bytes),
            (state.counter(names[2]), tm.marked_packets, tm.marked_bytes),
            (state.counter(names[3]), tm.wred_dropped_packets, tm.wred_dropped_bytes),
        ]
        self._flushed = [([0] * n, [0] * n) for _ in self._counter_sources]
        # The job counters, per (port, class) cell of the program's ports.
        self._job_sources = [
            (state.counter(names[4]), tm.job_tx_packets, tm.job_tx_bytes),
            (state.counter(names[5]), tm.job_marked_packets, tm.job_marked_bytes),
        ]
        self.job_cells = [p * JOB_CLASSES + c for p in self.ports for c in range(JOB_CLASSES)]
        class_cells = [p * QUEUE_CLASSES + c for p in self.ports for c in range(QUEUE_CLASSES)]
        # Published as (indices, a tuple of their values: 8 cells a port, never one value
        # alone); None without ports. A numpy index array: a list is converted every time.
        self._class_cells = (
            (np.array(class_cells, dtype=np.intp), itemgetter(*class_cells))
            if class_cells
            else None
        )
        cells = len(tm.job_tx_packets)
        self._job_flushed = [([0] * cells, [0] * cells) for _ in self._job_sources]
        # The lists behind every statistic, in STAT_NAMES order (they are updated in
        # place, never replaced, so the map is built once).
        self._stat_lists: dict[str, list[int]] = {
            "rx_packets": self.rx_packets,
            "rx_bytes": self.rx_bytes,
            "tx_packets": tm.tx_packets,
            "tx_bytes": tm.tx_bytes,
            "ecn_marked": tm.marked_packets,
            "wred_dropped": tm.wred_dropped_packets,
            "tail_dropped": tm.tail_dropped_packets,
            "forward_misses": self.forward_misses,
            "to_unknown_port": self.to_unknown_port,
            "malformed": self.malformed,
            "rx_overruns": self.rx_overruns,
            "send_errors": self.send_errors,
            "pfc_received": self.pfc_received,
            "mac_control_ignored": self.mac_control_ignored,
            "pfc_pauses_sent": tm.pfc_pauses_sent,
            "pfc_resumes_sent": tm.pfc_resumes_sent,
            "pfc_paused_us": tm.pfc_paused_us,
            "rx_broadcast": self.rx_broadcast,
            "rx_multicast": self.rx_multicast,
            "port_down": self.port_down,
        }
        assert tuple(self._stat_lists) == STAT_NAMES
        self.departure_lateness = np.zeros(LATENESS_BUCKETS, dtype=np.int64)
        self.wakeup_lateness = np.zeros(LATENESS_BUCKETS, dtype=np.int64)
        self.late_max = self.wakeup_max = 0.0
        self.sample_ring: SampleRing | None = None
        self._ring_cells: list[int] = []

    def start_sampling(self, ring: SampleRing, first_due: float) -> None:
        """Sample into `ring` from now on (the loop calls `sample` every ring.interval_s)."""
        self.sample_ring = ring
        self._ring_cells = [p * JOB_CLASSES + c for p in ring.ports for c in range(JOB_CLASSES)]

    def sample(self, loop_time: float, wall_time: float) -> None:
        """One sample into the ring: the job counts, and each port's deepest queue since
        the previous sample (reset here: the max_qdepth register's reader)."""
        ring = self.sample_ring
        if ring is None:
            return
        tm = self.tm
        cells = self._ring_cells
        depths = tm.max_depth_cells
        ring.write(
            loop_time,
            wall_time,
            np.array([tm.job_tx_packets[c] for c in cells], dtype=np.int64),
            np.array([tm.job_tx_bytes[c] for c in cells], dtype=np.int64),
            np.array([tm.job_marked_packets[c] for c in cells], dtype=np.int64),
            np.array([depths[p] for p in ring.ports], dtype=np.int64),
        )
        for port in ring.ports:
            depths[port] = 0

    def compiled_path(self) -> None:
        """None: this program reads and sends nothing itself (the loop does, in Python)."""
        return None

    def note_departures(self, now: float) -> None:
        """The frames in `tm.transmitted` are handed to their sockets at `now`."""
        histogram = self.departure_lateness
        for due in self.tm.transmitted_due:
            late = now - due
            histogram[lateness_bucket(late)] += 1
            if late > self.late_max:
                self.late_max = late

    def ingress(self, port: int, frame: bytes, now: float) -> None:
        """One received frame through parser, ingress counter, table and queue."""
        n = len(frame)
        if n < 14:
            self.malformed[port] += 1
            return
        if frame[12] == 0x88 and frame[13] == 0x08:
            # MAC control (PAUSE/PFC) ends in the MAC whatever its destination:
            # never counted as received, never looked up, never forwarded.
            self._mac_control(port, frame, now)
            return
        if frame[12] == 8 and frame[13] == 0:  # IPv4: header must be whole
            version_ihl = frame[14] if n > 14 else 0
            if (
                n < 34
                or version_ihl >> 4 != 4
                or version_ihl & 15 < 5
                or n < 14 + 4 * (version_ihl & 15)
            ):
                self.malformed[port] += 1
                return
        self.rx_packets[port] += 1
        self.rx_bytes[port] += n
        if frame[0] & 1:  # a group address: broadcast (all ones) or multicast
            if frame[:6] == BROADCAST_MAC:
                self.rx_broadcast[port] += 1
            else:
                self.rx_multicast[port] += 1
        out_port = self.state.forward.get((port, frame[:6]))
        if out_port is None:
            self.forward_misses[port] += 1
            return
        if out_port not in self.valid_ports:
            self.to_unknown_port[port] += 1
            return
        state = self.state
        self.tm.enqueue(
            frame,
            port,
            out_port,
            now,
            job_class(frame, state.job_by_dst, state.job_by_src),
            queue_class(frame, state.queue_by_dscp, state.queue_by_flow),
        )

    def _mac_control(self, port: int, frame: bytes, now: float) -> None:
        # The MAC consumes PAUSE/PFC frames before the pipeline sees them (so
        # they are in neither rx_packets nor port_rx).
        pause = parse_mac_control(frame)
        if pause is None:  # other MAC-control opcodes: consumed, nothing to do
            self.mac_control_ignored[port] += 1
            return
        self.pfc_received[port] += 1
        self.tm.receive_pause(port, pause[0], pause[1], now)

    def receive(self, port: int, frame: bytes, stamp: float) -> None:
        """A frame a host began sending at `stamp`; ingress runs when it is fully received."""
        self.tm.receive(port, frame, stamp)

    def advance(self, now: float) -> None:
        """Run everything due by `now` in time order: receptions (from hosts and
        cables) through ingress, departures, PFC refreshes."""
        self.tm.advance(now)

    def flush_counters(self) -> None:
        """Add what changed since the last flush to the shared P4 counter arrays."""
        ports = self.ports
        shared = self.shared
        if shared is not None:
            shared.begin()
        for sources, flushed, cells in (
            (self._counter_sources, self._flushed, ports),
            (self._job_sources, self._job_flushed, self.job_cells),
        ):
            for (array, packets, byte_counts), (seen_packets, seen_bytes) in zip(
                sources, flushed, strict=True
            ):
                for cell in cells:
                    delta = packets[cell] - seen_packets[cell]
                    if delta:
                        array[cell, 0] += delta
                        seen_packets[cell] = packets[cell]
                        array[cell, 1] += byte_counts[cell] - seen_bytes[cell]
                        seen_bytes[cell] = byte_counts[cell]
        if shared is not None:
            shared.end()

    def publish_stats(self) -> None:
        """Copy every per-port and per (port, queue class) statistic into the shared block
        (process mode only)."""
        shared = self.shared
        if shared is None:
            return
        ports = self.ports
        rows = shared.stats
        shared.begin()
        for i, values in enumerate(self._stat_lists.values()):
            rows[i, ports] = [values[p] for p in ports]
        if self._class_cells is not None:
            cells, take = self._class_cells
            for i, name in enumerate(CLASS_COUNTERS):
                shared.class_stats[i, cells] = take(getattr(self.tm, f"class_{name}"))
        shared.publish_fidelity(
            (self.departure_lateness, self.wakeup_lateness), (self.late_max, self.wakeup_max)
        )
        shared.end()

    def port_stats(self) -> dict[str, dict[int, int]]:
        """Every statistic of `STAT_NAMES`, per port (non-zero ones only)."""
        return {
            name: {p: v for p, v in enumerate(values) if v}
            for name, values in self._stat_lists.items()
        }

    def class_stats(self) -> dict[str, dict[tuple[int, int], int]]:
        """Per (port, queue class) counters (tm_config.CLASS_COUNTERS), non-zero ones."""
        stats = self.tm.class_stats()
        return {name: stats[name] for name in CLASS_COUNTERS}

    def stats(self) -> dict[str, dict[int, int]]:
        """Drops and events that have no P4 counter, per port (for logs and tests)."""
        return {
            name: per_port
            for name, per_port in self.port_stats().items()
            if name not in P4_COUNTED_STATS
        }
