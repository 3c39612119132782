"""When does a queued frame leave, get an ECN mark, or get dropped?

The traffic manager of the software target, free of sockets and clocks: the
caller passes times (seconds, any monotonic origin), so tests drive it with a
fake clock. One FIFO per egress port, depth in cells as on Tofino; each port
drains at its configured rate on a virtual clock (a frame starts when the
previous one has finished serialising); WRED/ECN on enqueue; tail drop at
the queue limit or the shared buffer; PFC per ingress port; loopback cables
carry frames from one port to its peer after the cable delay.

A frame WRED marks on enqueue is counted as marked only when it leaves:
a marked frame the queue limit then drops is a tail drop and nothing else,
so `marked_packets` never exceeds `tx_packets` and equals the CE frames
the port sent (the ecn_marked counter: "frames that left CE-marked").
The same counts are kept per (port, job class) (`job_tx_*`, `job_marked_*`,
at port * JOB_CLASSES + class: the job_tx and job_ecn_marked counters), the
class given with each frame at enqueue; and `max_depth_cells` keeps the
deepest queue each port's arriving frames found (the cells WRED sees, the P4
program's enq_qdepth) until its reader sets it back to 0 (the max_qdepth
register).

Everything happens on one event heap in virtual time, in time order: a frame
finishing its reception at a port (from a host, or from a cable at departure
end + cable delay), a port's transmitter taking the next queued frame, a
frame finishing serialisation toward a host, a PFC refresh. `advance(now)`
runs exactly the events due by `now`, each at its own time, so a frame
crossing several cabled hops takes the sum of its serialisation times and
cable delays however late the caller wakes up: lateness only delays the
hand-over of the finished frame to the host socket, it never shortens a hop.

Everything the caller must act on is left in lists it drains: `transmitted`
(port, frame) for frames that finished serialising on host-facing ports (and
`transmitted_due`, the time each finished),
`control` (port, frame) for PFC frames to send to a host, and - only when no
`on_arrival` callback is set - `arrived` (port, frame) for frames entering a
port from a cable.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from enum import IntEnum
from heapq import heappop, heappush

from .packet import ECN_CE, build_pfc_frame, ipv4_offset, set_ce
from .state import COUNTER_CELLS, JOB_CLASSES, JOB_COUNTER_CELLS, WredProfile
from .tm_config import TmConfig

# Virtual times are sums of float serialisation times; an event this close to
# `now` is due (1 ns: far below any serialisation time, far above float error).
TIME_EPSILON_S = 1e-9
PAUSE_QUANTUM_BITS = 512  # IEEE 802.3 Annex 31B
NEVER = math.inf

# Event kinds on the heap: (time, sequence, kind, port, frame or None).
_ARRIVE = 0  # frame fully received at `port` (from a host or a cable)
_DELIVER = 1  # frame finished serialising on host-facing `port`
_START = 2  # `port`'s transmitter may take the next queued frame
_REFRESH = 3  # re-send the PFC pause on host `port`

ArrivalHandler = Callable[[int, bytes, float], None]


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
        on_arrival: ArrivalHandler | None = None,
    ) -> None:
        self.config = config
        self.wire_overhead = config.wire_overhead_bytes
        # Read live: the P4Runtime service replaces entries while we run.
        self.wred = wred
        self.ports = sorted(set(ports))
        self._random = random.Random(seed).random
        # Called as on_arrival(port, frame, time) for every frame whose reception
        # completes (the pipeline's ingress); None leaves them in `arrived`.
        self.on_arrival = on_arrival
        n = COUNTER_CELLS
        # Queued (frame, ingress port, cells, CE-marked by this port's WRED, job class).
        self.queues: list[deque[tuple[bytes, int, int, bool, int]]] = [deque() for _ in range(n)]
        self.queue_cells = [0] * n
        self.peak_queue_cells = [0] * n  # deepest queue an arriving frame joined
        # Deepest queue an arriving frame found since the reader last zeroed it.
        self.max_depth_cells = [0] * n
        self.queue_limit = [config.queue_cells(p) for p in range(n)]
        self.seconds_per_byte = [8.0 / (config.rate_gbps(p) * 1e9) for p in range(n)]
        self.tx_free_at = [0.0] * n  # virtual time the port's transmitter is free
        self.paused_until = [0.0] * n
        self.buffered_cells = 0
        self.now = -NEVER  # virtual time of the latest event run
        self._limit = -NEVER  # while advance() runs: the time it runs events up to

        self.events: list[tuple[float, int, int, int, bytes | None]] = []
        self._sequence = itertools.count()  # FIFO among events at the same time
        self.start_at = [NEVER] * n  # the one valid pending _START per port
        self.last_reception = [-NEVER] * n  # when each port's last frame was received
        self.last_arrival = [-NEVER] * n  # ... and when by its stamp, had it been seen on time

        # Per-port totals (packets, bytes) the caller copies into P4 counters.
        self.tx_packets = [0] * n
        self.tx_bytes = [0] * n
        self.marked_packets = [0] * n
        self.marked_bytes = [0] * n
        self.wred_dropped_packets = [0] * n
        self.wred_dropped_bytes = [0] * n
        self.tail_dropped_packets = [0] * n
        self.tail_dropped_bytes = [0] * n
        # 1: the port is down (its interface gone, or its cable failed by an operator,
        # gNMI config/enabled false): frames sent to it are tail drops, as on a port
        # whose link is down. The packet loop's flag (port_stats' "port_down").
        self.port_down = [0] * n
        # ... and per (port, job class), at port * JOB_CLASSES + class.
        self.job_tx_packets = [0] * JOB_COUNTER_CELLS
        self.job_tx_bytes = [0] * JOB_COUNTER_CELLS
        self.job_marked_packets = [0] * JOB_COUNTER_CELLS
        self.job_marked_bytes = [0] * JOB_COUNTER_CELLS

        self.cable_peer = [-1] * n
        self.cable_delay = [0.0] * n
        for port, (peer, delay) in config.cable_peers().items():
            self.cable_peer[port] = peer
            self.cable_delay[port] = delay

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
        # When each of them finished serialising (its scheduled departure), for
        # the fidelity figures: how late the loop handed it to the host.
        self.transmitted_due: list[float] = []
        self.arrived: list[tuple[int, bytes]] = []
        self.control: list[tuple[int, bytes]] = []

    # --- frames coming in ---------------------------------------------------------

    def receive(self, port: int, frame: bytes, stamp: float) -> None:
        """A host started handing `frame` to `port` at `stamp`; it is received when
        its last bit is in, one serialisation time at the port's rate later.

        (our choice) The host link is store-and-forward like every other hop,
        so a lone frame pays its serialisation on all links of its path; but
        frames a host hands over faster than the link rate are not paced here
        (the veth carried them at memory speed), only kept in order: the
        overload shows up in the switch's queues, as with a faster NIC.

        A frame the kernel showed us after virtual time passed its reception
        (its receive softirq ran late, on a busy core) keeps its stamp's spacing
        behind the previous frame, at most one serialisation time: moved to `now`
        as a group, a few milliseconds of a host's paced frames would arrive at
        one instant and fill a queue the wire never had.
        """
        serialisation = (len(frame) + self.wire_overhead) * self.seconds_per_byte[port]
        arrival = stamp + serialisation
        spacing = arrival - self.last_arrival[port]
        self.last_arrival[port] = arrival
        if arrival < self.now:  # seen late: virtual time never runs backwards
            when = max(self.now, self.last_reception[port] + min(max(spacing, 0.0), serialisation))
        else:
            when = max(arrival, self.last_reception[port])
        self.last_reception[port] = when
        heappush(self.events, (when, next(self._sequence), _ARRIVE, port, frame))

    # --- enqueue ------------------------------------------------------------

    def enqueue(
        self, frame: bytes, in_port: int, out_port: int, now: float, job_class: int = 0
    ) -> int:
        """Admit a frame of `job_class` to out_port's queue (maybe CE-marked) or drop it;
        returns a Verdict."""
        events = self.events
        if events and events[0][0] < now:
            self.advance(now)  # the queue this frame joins is the queue at `now`
        if self.port_down[out_port]:
            self.tail_dropped_packets[out_port] += 1
            self.tail_dropped_bytes[out_port] += len(frame)
            return Verdict.TAIL_DROPPED
        depth = self.queue_cells[out_port]
        if (
            depth == 0
            and self.tx_free_at[out_port] <= now + TIME_EPSILON_S
            and self.paused_until[out_port] <= now
        ):
            # Fast path, the common case below saturation: an idle port starts the
            # frame now. An empty queue is never above a WRED threshold, and
            # (our choice) always takes one frame. (_start, inlined: hot path.)
            length = len(frame)
            end = now + (length + self.wire_overhead) * self.seconds_per_byte[out_port]
            self.tx_free_at[out_port] = end
            self.tx_packets[out_port] += 1
            self.tx_bytes[out_port] += length
            cell = out_port * JOB_CLASSES + job_class
            self.job_tx_packets[cell] += 1
            self.job_tx_bytes[cell] += length
            peer = self.cable_peer[out_port]
            if peer >= 0:
                when = end + self.cable_delay[out_port]
                heappush(events, (when, next(self._sequence), _ARRIVE, peer, frame))
            elif end <= self._limit and (not events or end < events[0][0]):
                self.transmitted.append((out_port, frame))  # nothing is due before it
                self.transmitted_due.append(end)
            else:
                heappush(events, (end, next(self._sequence), _DELIVER, out_port, frame))
            return Verdict.QUEUED
        if depth > self.max_depth_cells[out_port]:
            # (our choice) Every frame that reaches the queue counts, a dropped one too:
            # it found the queue that deep. (On a chip a tail-dropped packet never
            # reaches egress, where the register is; it found the queue near its limit.)
            self.max_depth_cells[out_port] = depth
        cell_bytes = self.config.cell_bytes
        cells = (len(frame) + cell_bytes - 1) // cell_bytes
        verdict = Verdict.QUEUED
        marked_here = False
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
                    # Counted when it leaves (_start): it may still be tail-dropped.
                    marked_here = True
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
        self.queues[out_port].append((frame, in_port, cells, marked_here, job_class))
        depth += cells
        self.queue_cells[out_port] = depth
        if depth > self.peak_queue_cells[out_port]:
            self.peak_queue_cells[out_port] = depth
        self.buffered_cells += cells
        if depth == cells:
            self._schedule_start(out_port, now)
        held = self.ingress_cells[in_port] + cells
        self.ingress_cells[in_port] = held
        if held > self.xoff_cells and self.pfc_enabled and not self.ingress_paused[in_port]:
            self._pause_upstream(in_port, now)
        return verdict

    # --- time passes --------------------------------------------------------

    def advance(self, now: float) -> None:
        """Run every event due by `now`, in time order, each at its own time."""
        events = self.events
        limit = now + TIME_EPSILON_S
        if not events or events[0][0] > limit:
            if now > self.now:
                self.now = now
            return
        outer_limit = self._limit
        if limit > outer_limit:
            self._limit = limit
        on_arrival = self.on_arrival
        transmitted = self.transmitted
        transmitted_due = self.transmitted_due
        while events and events[0][0] <= limit:
            when, _sequence, kind, port, frame = heappop(events)
            if when > self.now:
                self.now = when
            if kind == _ARRIVE:
                if on_arrival is not None:
                    on_arrival(port, frame, when)  # type: ignore[arg-type]
                else:
                    self.arrived.append((port, frame))  # type: ignore[arg-type]
            elif kind == _DELIVER:
                transmitted.append((port, frame))  # type: ignore[arg-type]
                transmitted_due.append(when)
            elif kind == _START:
                if self.start_at[port] == when:
                    self.start_at[port] = NEVER
                    self._serve(port, when)
            elif self.pause_refresh_at.get(port) == when:
                self._send_pause(port, when)
        self._limit = outer_limit
        if now > self.now:
            self.now = now

    def next_event_time(self) -> float | None:
        """Earliest time advance() has something to do; None when idle."""
        events = self.events
        while events:
            when, _sequence, kind, port, _frame = events[0]
            stale = (kind == _START and self.start_at[port] != when) or (
                kind == _REFRESH and self.pause_refresh_at.get(port) != when
            )
            if not stale:
                return when
            heappop(events)
        return None

    # --- the transmitter ------------------------------------------------------

    def _schedule_start(self, port: int, now: float) -> None:
        """Make sure the port takes its next queued frame as soon as it may."""
        if not self.queues[port]:
            return
        when = max(now, self.tx_free_at[port], self.paused_until[port])
        if when < self.start_at[port]:  # NEVER while paused by a cable peer: no event
            self.start_at[port] = when
            heappush(self.events, (when, next(self._sequence), _START, port, None))

    def _serve(self, port: int, now: float) -> None:
        queue = self.queues[port]
        if not queue:
            return
        if self.tx_free_at[port] > now + TIME_EPSILON_S or self.paused_until[port] > now:
            self._schedule_start(port, now)
            return
        frame, in_port, cells, marked, job_class = queue.popleft()
        self.queue_cells[port] -= cells
        self.buffered_cells -= cells
        held = self.ingress_cells[in_port] - cells
        self.ingress_cells[in_port] = held
        self._start(port, frame, now, marked, job_class)
        if self.ingress_paused[in_port] and held <= self.xon_cells:
            self._resume_upstream(in_port, now)
        if queue:
            self._schedule_start(port, now)

    def _start(
        self, port: int, frame: bytes, now: float, marked: bool = False, job_class: int = 0
    ) -> None:
        """The frame goes on the wire at `now` and is fully sent one serialisation later.

        `marked`: this port's WRED set CE on it, so it counts as marked now that
        it leaves (and only now: see the module docstring).
        """
        length = len(frame)
        end = now + (length + self.wire_overhead) * self.seconds_per_byte[port]
        self.tx_free_at[port] = end
        self.tx_packets[port] += 1
        self.tx_bytes[port] += length
        cell = port * JOB_CLASSES + job_class
        self.job_tx_packets[cell] += 1
        self.job_tx_bytes[cell] += length
        if marked:
            self.marked_packets[port] += 1
            self.marked_bytes[port] += length
            self.job_marked_packets[cell] += 1
            self.job_marked_bytes[cell] += length
        peer = self.cable_peer[port]
        if peer >= 0:
            # Store-and-forward: the peer has the frame when its last bit has
            # crossed the cable.
            when = end + self.cable_delay[port]
            heappush(self.events, (when, next(self._sequence), _ARRIVE, peer, frame))
        elif end <= self._limit and (not self.events or end < self.events[0][0]):
            # Finished within the advance() under way and nothing is due before
            # it: hand it over at once instead of through the heap.
            self.transmitted.append((port, frame))
            self.transmitted_due.append(end)
        else:
            heappush(self.events, (end, next(self._sequence), _DELIVER, port, frame))

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
        self.start_at[port] = NEVER  # re-planned below for the new pause
        self._schedule_start(port, now)

    def _pause_upstream(self, in_port: int, now: float) -> None:
        self.ingress_paused[in_port] = True
        peer = self.cable_peer[in_port]
        if peer >= 0:
            # The upstream logical switch is this chip: its queue stops draining.
            # No frame exists inside the chip: (our choice) one pause counts once.
            self.pfc_pauses_sent[in_port] += 1
            self.paused_until[peer] = NEVER
        else:
            self._send_pause(in_port, now)

    def _send_pause(self, port: int, now: float) -> None:
        self.control.append((port, self.pause_frames[port][0]))
        self.pfc_pauses_sent[port] += 1  # every frame on the wire, refreshes included
        # Refresh halfway through the pause so the sender never restarts early.
        when = now + self.pause_seconds[port] / 2
        self.pause_refresh_at[port] = when
        heappush(self.events, (when, next(self._sequence), _REFRESH, port, None))

    def _resume_upstream(self, in_port: int, now: float) -> None:
        self.ingress_paused[in_port] = False
        self.pfc_resumes_sent[in_port] += 1
        peer = self.cable_peer[in_port]
        if peer >= 0:
            self.paused_until[peer] = now
            self._schedule_start(peer, now)
        else:
            self.pause_refresh_at.pop(in_port, None)
            self.control.append((in_port, self.pause_frames[in_port][1]))
