"""When does a queued frame leave, get an ECN mark, or get dropped?

The traffic manager of the software target, free of sockets and clocks: the
caller passes `now` (seconds, any monotonic origin), so tests drive it with a
fake clock. One FIFO per egress port, depth in cells as on Tofino; each port
drains at its configured rate on a virtual clock (a frame starts when the
previous one has finished serialising); WRED/ECN on enqueue; tail drop at
the queue limit or the shared buffer; PFC per ingress port; loopback cables
carry frames from one port to its peer after the cable delay.

Everything the caller must act on is left in three lists it drains:
`transmitted` (port, frame) for frames leaving host-facing ports, `arrived`
(port, frame) for frames entering a port from a cable, and `control`
(port, frame) for PFC frames to send to a host.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Iterable, Mapping
from enum import IntEnum

from .packet import ECN_CE, build_pfc_frame, ipv4_offset, set_ce
from .state import COUNTER_CELLS, WredProfile
from .tm_config import TmConfig

# (our choice) A frame may leave this much before its virtual start time: the
# loop sleeps with ~50 us timer slack, and letting frames go slightly early
# keeps the long-run rate exact instead of losing the slack on every wake-up.
EARLY_TOLERANCE_S = 50e-6
PAUSE_QUANTUM_BITS = 512  # IEEE 802.3 Annex 31B
NEVER = math.inf


class Verdict(IntEnum):
    QUEUED = 0
    MARKED = 1
    WRED_DROPPED = 2
    TAIL_DROPPED = 3


class TrafficManager:
    """Queues, WRED, PFC and cables of one switch."""

    def __init__(
        self,
        config: TmConfig,
        ports: Iterable[int],
        wred: Mapping[int, WredProfile],
        seed: int = 0,
        port_macs: Mapping[int, bytes] | None = None,
    ) -> None:
        self.config = config
        self.wire_overhead = config.wire_overhead_bytes
        # Read live: the P4Runtime service replaces entries while we run.
        self.wred = wred
        self.ports = sorted(set(ports))
        self._random = random.Random(seed).random
        n = COUNTER_CELLS
        self.queues: list[deque[tuple[bytes, int, int]]] = [deque() for _ in range(n)]
        self.queue_cells = [0] * n
        self.queue_limit = [config.queue_cells(p) for p in range(n)]
        self.seconds_per_byte = [8.0 / (config.rate_gbps(p) * 1e9) for p in range(n)]
        self.tx_free_at = [0.0] * n  # virtual time the port's transmitter is free
        self.paused_until = [0.0] * n
        self.buffered_cells = 0
        self.active: set[int] = set()  # ports with a non-empty queue

        # Per-port totals (packets, bytes) the caller copies into P4 counters.
        self.tx_packets = [0] * n
        self.tx_bytes = [0] * n
        self.marked_packets = [0] * n
        self.marked_bytes = [0] * n
        self.wred_dropped_packets = [0] * n
        self.wred_dropped_bytes = [0] * n
        self.tail_dropped_packets = [0] * n
        self.tail_dropped_bytes = [0] * n

        # Cables: frames in flight per direction, (arrival time, frame), FIFO
        # because delay is constant per cable.
        self.cable_peer = [-1] * n
        self.cable_delay = [0.0] * n
        self.in_flight: list[deque[tuple[float, bytes]]] = [deque() for _ in range(n)]
        for port, (peer, delay) in config.cable_peers().items():
            self.cable_peer[port] = peer
            self.cable_delay[port] = delay
        self.cabled_ports = sorted(config.cable_peers())

        # PFC: cells each ingress port holds in egress queues.
        pfc = config.pfc
        self.pfc_enabled = pfc.enabled
        self.xoff_cells = pfc.xoff_cells
        self.xon_cells = pfc.xon_cells
        self.ingress_cells = [0] * n
        self.ingress_paused = [False] * n
        self.pause_refresh_at: dict[int, float] = {}  # host ports we keep paused
        self.pause_frames: dict[int, tuple[bytes, bytes]] = {}
        macs = port_macs or {}
        for port in self.ports:
            if self.cable_peer[port] < 0:
                mac = macs.get(port, bytes(6))
                self.pause_frames[port] = (
                    build_pfc_frame(mac, pfc.priority, pfc.pause_quanta),
                    build_pfc_frame(mac, pfc.priority, 0),
                )
        self.pause_seconds = [
            pfc.pause_quanta * PAUSE_QUANTUM_BITS * self.seconds_per_byte[p] / 8 for p in range(n)
        ]
        self.pfc_pauses_sent = [0] * n
        self.pfc_resumes_sent = [0] * n

        self.transmitted: list[tuple[int, bytes]] = []
        self.arrived: list[tuple[int, bytes]] = []
        self.control: list[tuple[int, bytes]] = []

    # --- enqueue ------------------------------------------------------------

    def enqueue(self, frame: bytes, in_port: int, out_port: int, now: float) -> int:
        """Admit a frame to out_port's queue (maybe CE-marked) or drop it; returns a Verdict."""
        depth = self.queue_cells[out_port]
        if depth == 0:
            # Fast path, the common case below saturation: an idle port whose
            # transmitter is free starts the frame now. An empty queue is never
            # above a WRED threshold, and (our choice) always takes one frame.
            start = self.tx_free_at[out_port]
            if start < now:
                start = now
            if start <= now + EARLY_TOLERANCE_S and self.paused_until[out_port] <= now:
                length = len(frame)
                end = start + (length + self.wire_overhead) * self.seconds_per_byte[out_port]
                self.tx_free_at[out_port] = end
                self.tx_packets[out_port] += 1
                self.tx_bytes[out_port] += length
                if self.cable_peer[out_port] >= 0:
                    self.in_flight[out_port].append((end + self.cable_delay[out_port], frame))
                else:
                    self.transmitted.append((out_port, frame))
                return Verdict.QUEUED
        cell_bytes = self.config.cell_bytes
        cells = (len(frame) + cell_bytes - 1) // cell_bytes
        verdict = Verdict.QUEUED
        profile = self.wred.get(out_port)
        if profile is not None and depth > profile.min_cells:
            if depth > profile.max_cells:
                mark = True
            else:
                # Linear from 0 at min_cells to max_prob at max_cells.
                mark = self._random() * 100.0 * (profile.max_cells - profile.min_cells) < (
                    profile.max_prob_percent * (depth - profile.min_cells)
                )
            if mark:
                offset = ipv4_offset(frame)
                ecn = frame[offset + 1] & 3 if offset >= 0 else -1
                if ecn == 1 or ecn == 2:
                    marked = bytearray(frame)
                    set_ce(marked, offset)
                    # Back to bytes: a frame may re-enter a pipeline through a cable
                    # and its destination MAC is a dict key there.
                    frame = bytes(marked)
                    self.marked_packets[out_port] += 1
                    self.marked_bytes[out_port] += len(frame)
                    verdict = Verdict.MARKED
                elif ecn != ECN_CE:
                    # Not ECN-capable (or not IPv4): RED drops where it would mark.
                    self.wred_dropped_packets[out_port] += 1
                    self.wred_dropped_bytes[out_port] += len(frame)
                    return Verdict.WRED_DROPPED
                # (our choice) already CE: passes unchanged and is not counted again.
        if (
            depth + cells > self.queue_limit[out_port]
            or self.buffered_cells + cells > self.config.buffer_cells
        ):
            self.tail_dropped_packets[out_port] += 1
            self.tail_dropped_bytes[out_port] += len(frame)
            return Verdict.TAIL_DROPPED

        if depth == 0 and self.tx_free_at[out_port] < now:
            self.tx_free_at[out_port] = now  # the port was idle: no credit for idle time
        self.queues[out_port].append((frame, in_port, cells))
        self.queue_cells[out_port] = depth + cells
        self.buffered_cells += cells
        self.active.add(out_port)
        held = self.ingress_cells[in_port] + cells
        self.ingress_cells[in_port] = held
        if held > self.xoff_cells and self.pfc_enabled and not self.ingress_paused[in_port]:
            self._pause_upstream(in_port, now)
        return verdict

    # --- time passes --------------------------------------------------------

    def advance(self, now: float) -> None:
        """Send every frame whose start time has come; deliver cable arrivals; refresh pauses."""
        if self.active:
            horizon = now + EARLY_TOLERANCE_S
            for port in list(self.active):
                paused_until = self.paused_until[port]
                if paused_until > horizon:
                    continue
                start = self.tx_free_at[port]
                if start < paused_until:
                    start = paused_until
                if start > horizon:
                    continue
                queue = self.queues[port]
                seconds_per_byte = self.seconds_per_byte[port]
                overhead = self.config.wire_overhead_bytes
                freed = 0
                while queue and start <= horizon:
                    frame, in_port, cells = queue.popleft()
                    end = start + (len(frame) + overhead) * seconds_per_byte
                    self._emit(port, frame, end)
                    start = end
                    freed += cells
                    held = self.ingress_cells[in_port] - cells
                    self.ingress_cells[in_port] = held
                    if self.ingress_paused[in_port] and held <= self.xon_cells:
                        self._resume_upstream(in_port, now)
                self.tx_free_at[port] = start
                self.queue_cells[port] -= freed
                self.buffered_cells -= freed
                if not queue:
                    self.active.discard(port)
        if self.pause_refresh_at:
            for port, when in list(self.pause_refresh_at.items()):
                if when <= now + EARLY_TOLERANCE_S:
                    self._send_pause(port, now)
        for port in self.cabled_ports:
            flight = self.in_flight[port]
            while flight and flight[0][0] <= now + EARLY_TOLERANCE_S:
                self.arrived.append((self.cable_peer[port], flight.popleft()[1]))

    def next_event_time(self) -> float | None:
        """Earliest time advance() has something to do; None when idle."""
        best = NEVER
        for port in self.active:
            start = self.tx_free_at[port]
            paused_until = self.paused_until[port]
            if paused_until > start:
                start = paused_until
            if start < best:
                best = start
        for when in self.pause_refresh_at.values():
            if when < best:
                best = when
        for port in self.cabled_ports:
            flight = self.in_flight[port]
            if flight and flight[0][0] < best:
                best = flight[0][0]
        return None if best == NEVER else best

    # --- PFC ----------------------------------------------------------------

    def receive_pause(
        self, port: int, enable_vector: int, quanta: Iterable[int], now: float
    ) -> None:
        """A host paused (or resumed) our egress on `port`.

        (our choice) One queue per port carries every priority, so the longest
        pause among the enabled classes applies; zero quanta resumes at once.
        """
        longest = max((q for i, q in enumerate(quanta) if enable_vector >> i & 1), default=None)
        if longest is None:
            return
        seconds = longest * PAUSE_QUANTUM_BITS * self.seconds_per_byte[port] / 8
        self.paused_until[port] = now + seconds

    def is_paused(self, port: int, now: float) -> bool:
        return self.paused_until[port] > now

    def _pause_upstream(self, in_port: int, now: float) -> None:
        self.ingress_paused[in_port] = True
        self.pfc_pauses_sent[in_port] += 1
        peer = self.cable_peer[in_port]
        if peer >= 0:
            # The upstream logical switch is this chip: its queue stops draining.
            self.paused_until[peer] = NEVER
        else:
            self._send_pause(in_port, now)

    def _send_pause(self, port: int, now: float) -> None:
        self.control.append((port, self.pause_frames[port][0]))
        # Refresh halfway through the pause so the sender never restarts early.
        self.pause_refresh_at[port] = now + self.pause_seconds[port] / 2

    def _resume_upstream(self, in_port: int, now: float) -> None:
        self.ingress_paused[in_port] = False
        self.pfc_resumes_sent[in_port] += 1
        peer = self.cable_peer[in_port]
        if peer >= 0:
            self.paused_until[peer] = now
        else:
            self.pause_refresh_at.pop(in_port, None)
            self.control.append((in_port, self.pause_frames[in_port][1]))

    # --- leaving a port -----------------------------------------------------

    def _emit(self, port: int, frame: bytes, end: float) -> None:
        self.tx_packets[port] += 1
        self.tx_bytes[port] += len(frame)
        if self.cable_peer[port] >= 0:
            self.in_flight[port].append((end + self.cable_delay[port], frame))
        else:
            self.transmitted.append((port, frame))
