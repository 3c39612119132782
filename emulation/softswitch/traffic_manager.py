"""When does a queued frame leave, get an ECN mark, or get dropped?

The traffic manager of the software target, free of sockets and clocks: the
caller passes times (seconds, any monotonic origin), so tests drive it with a
fake clock. QUEUE_CLASSES FIFOs per egress port (queue classes, 7 highest, as
Tofino's and bmv2's --priority-queues), depth in cells as on Tofino, served
by strict priority: the transmitter takes the head of the highest non-empty
class, so a high class overtakes queued lower ones and starves them while it
is backlogged. Each class has its own queue limit, WRED profile and PFC
thresholds (TmConfig.classes; by default the port's, so class 0 alone is the
one FIFO this was before), and counters (`class_*`, at port * QUEUE_CLASSES +
class). (our choice) A frame is tail-dropped past its class's limit or the
port's (all classes together), and a pause from a host stops the whole port.
Each port drains at its configured rate on a virtual clock (a frame starts
when the previous one has finished serialising); WRED/ECN on enqueue; tail
drop at the queue limit or the shared buffer; PFC per (ingress port, class);
loopback cables
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
from .tm_config import CLASS_COUNTERS, QUEUE_CLASSES, TmConfig

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


class PortQueues:
    """The class FIFOs of one egress port; len() is the frames queued in all of them."""

    __slots__ = ("classes",)

    def __init__(self) -> None:
        self.classes: list[deque[tuple[bytes, int, int, bool, int]]] = [
            deque() for _ in range(QUEUE_CLASSES)
        ]

    def __len__(self) -> int:
        return sum(len(q) for q in self.classes)

    def head_class(self) -> int:
        """The highest class with a frame queued; -1 when all are empty."""
        for queue_class in range(QUEUE_CLASSES - 1, -1, -1):
            if self.classes[queue_class]:
                return queue_class
        return -1


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
        # Queued (frame, ingress port, cells, CE-marked by this port's WRED, job class),
        # per port and queue class.
        self.queues = [PortQueues() for _ in range(n)]
        self.queue_cells = [0] * n  # all classes of the port
        cn = n * QUEUE_CLASSES
        self.class_cells = [0] * cn  # at port * QUEUE_CLASSES + class
        self.class_limit = [
            config.class_queue_cells(p, c) for p in range(n) for c in range(QUEUE_CLASSES)
        ]
        # A class's own WRED profile (on every port), else None: the port's.
        self.class_wred: list[WredProfile | None] = [None] * QUEUE_CLASSES
        for queue_class, settings in config.classes.items():
            if settings.wred is not None:
                w = settings.wred
                self.class_wred[queue_class] = WredProfile(
                    w.min_cells, w.max_cells, w.max_prob_percent
                )
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
        # ... and per (port, queue class), at port * QUEUE_CLASSES + class: frames
        # admitted, sent, sent CE-marked, dropped (WRED or tail).
        self.class_enqueued_packets = [0] * cn
        self.class_sent_packets = [0] * cn
        self.class_sent_bytes = [0] * cn
        self.class_marked_packets = [0] * cn
        self.class_dropped_packets = [0] * cn

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
        self.ingress_cells = [0] * n  # all classes
        self.ingress_paused = [False] * n  # some class of the port is paused
        # Per class (enabled, XOFF, XON, the priority its pause frames name), and the
        # cells / pause state per (ingress port, class), at port * QUEUE_CLASSES + class.
        self.class_pfc = [config.class_pfc(c) for c in range(QUEUE_CLASSES)]
        self.ingress_class_cells = [0] * cn
        self.ingress_class_paused = [False] * cn
        # (port, class) keys (port * QUEUE_CLASSES + class) of host ports we keep paused.
        self.pause_refresh_at: dict[int, float] = {}
        self.pause_frames: dict[int, tuple[bytes, bytes]] = {}  # for `pfc.priority`
        self.class_pause_frames: dict[int, tuple[bytes, bytes]] = {}  # per (port, class) key
        macs = port_macs or {}
        for port in self.ports:
            if self.cable_peer[port] < 0:
                mac = macs.get(port, bytes(6))
                self.pause_frames[port] = (
                    build_pfc_frame(mac, pfc.priority, pfc.pause_quanta),
                    build_pfc_frame(mac, pfc.priority, 0),
                )
                for queue_class in range(QUEUE_CLASSES):
                    priority = self.class_pfc[queue_class][3]
                    self.class_pause_frames[port * QUEUE_CLASSES + queue_class] = (
                        self.pause_frames[port]
                        if priority == pfc.priority
                        else (
                            build_pfc_frame(mac, priority, pfc.pause_quanta),
                            build_pfc_frame(mac, priority, 0),
                        )
                    )
        self.pause_seconds = [
            pfc.pause_quanta * PAUSE_QUANTUM_BITS * self.seconds_per_byte[p] / 8 for p in range(n)
        ]
        self.pfc_pauses_sent = [0] * n
        self.pfc_resumes_sent = [0] * n
        self.pfc_paused_us = [0] * n  # XOFF to XON of the port's ingress, counted at the XON
        self.paused_since = [0.0] * n

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
        self,
        frame: bytes,
        in_port: int,
        out_port: int,
        now: float,
        job_class: int = 0,
        queue_class: int = 0,
    ) -> int:
        """Admit a frame of `job_class` to out_port's `queue_class` queue (maybe
        CE-marked) or drop it; returns a Verdict."""
        events = self.events
        if events and events[0][0] < now:
            self.advance(now)  # the queue this frame joins is the queue at `now`
        qcell = out_port * QUEUE_CLASSES + queue_class
        if self.port_down[out_port]:
            self.tail_dropped_packets[out_port] += 1
            self.tail_dropped_bytes[out_port] += len(frame)
            self.class_dropped_packets[qcell] += 1
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
            self.class_enqueued_packets[qcell] += 1
            self.class_sent_packets[qcell] += 1
            self.class_sent_bytes[qcell] += length
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
        # WRED and the queue limit see the class's own queue (the port's whole
        # queue while only class 0 is used).
        class_depth = self.class_cells[qcell]
        profile = self.class_wred[queue_class] or self.wred.get(out_port)
        if profile is not None and class_depth > profile.min_cells:
            if class_depth > profile.max_cells:
                mark = True
            else:
                # Linear from 0 at min_cells to max_prob at max_cells.
                mark = self._random() * 100.0 * (profile.max_cells - profile.min_cells) < (
                    profile.max_prob_percent * (class_depth - profile.min_cells)
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
                    self.class_dropped_packets[qcell] += 1
                    return Verdict.WRED_DROPPED
                # (our choice) already CE: passes unchanged and is not counted again.
        if (
            class_depth + cells > self.class_limit[qcell]
            or depth + cells > self.queue_limit[out_port]
            or self.buffered_cells + cells > self.config.buffer_cells
        ):
            self.tail_dropped_packets[out_port] += 1
            self.tail_dropped_bytes[out_port] += len(frame)
            self.class_dropped_packets[qcell] += 1
            return Verdict.TAIL_DROPPED

        if depth == 0 and self.tx_free_at[out_port] < now:
            self.tx_free_at[out_port] = now  # the port was idle: no credit for idle time
        self.queues[out_port].classes[queue_class].append(
            (frame, in_port, cells, marked_here, job_class)
        )
        self.class_enqueued_packets[qcell] += 1
        self.class_cells[qcell] = class_depth + cells
        depth += cells
        self.queue_cells[out_port] = depth
        if depth > self.peak_queue_cells[out_port]:
            self.peak_queue_cells[out_port] = depth
        self.buffered_cells += cells
        if depth == cells:
            self._schedule_start(out_port, now)
        self.ingress_cells[in_port] += cells
        pcell = in_port * QUEUE_CLASSES + queue_class
        held = self.ingress_class_cells[pcell] + cells
        self.ingress_class_cells[pcell] = held
        enabled, xoff, _xon, _priority = self.class_pfc[queue_class]
        if held > xoff and enabled and not self.ingress_class_paused[pcell]:
            self._pause_upstream(in_port, queue_class, now)
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
            elif self.pause_refresh_at.get(port) == when:  # `port` is a (port, class) key
                self._send_pause(*divmod(port, QUEUE_CLASSES), when)
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

    def class_stats(self) -> dict[str, dict[tuple[int, int], int]]:
        """Per (port, queue class) CLASS_COUNTERS and queued cells, the non-zero ones."""
        rows = {name: getattr(self, f"class_{name}") for name in CLASS_COUNTERS}
        rows["queued_cells"] = self.class_cells
        return {
            name: {divmod(i, QUEUE_CLASSES): v for i, v in enumerate(row) if v}
            for name, row in rows.items()
        }

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
        queues = self.queues[port]
        queue_class = queues.head_class()
        if queue_class < 0:
            return
        if self.tx_free_at[port] > now + TIME_EPSILON_S or self.paused_until[port] > now:
            self._schedule_start(port, now)
            return
        frame, in_port, cells, marked, job_class = queues.classes[queue_class].popleft()
        self.queue_cells[port] -= cells
        qcell = port * QUEUE_CLASSES + queue_class
        self.class_cells[qcell] -= cells
        self.class_sent_packets[qcell] += 1
        self.class_sent_bytes[qcell] += len(frame)
        if marked:
            self.class_marked_packets[qcell] += 1
        self.buffered_cells -= cells
        self.ingress_cells[in_port] -= cells
        pcell = in_port * QUEUE_CLASSES + queue_class
        held = self.ingress_class_cells[pcell] - cells
        self.ingress_class_cells[pcell] = held
        self._start(port, frame, now, marked, job_class)
        if self.ingress_class_paused[pcell] and held <= self.class_pfc[queue_class][2]:
            self._resume_upstream(in_port, queue_class, now)
        if self.queue_cells[port]:
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

        (our choice) A pause from a host stops the port's transmitter, all its
        queue classes (the PFC priorities hosts use are not mapped to queue
        classes), so the longest pause among the enabled priorities applies;
        zero quanta resumes at once.
        """
        longest = max((q for i, q in enumerate(quanta) if enable_vector >> i & 1), default=None)
        if longest is None:
            return
        seconds = longest * PAUSE_QUANTUM_BITS * self.seconds_per_byte[port] / 8
        self.paused_until[port] = now + seconds
        self.start_at[port] = NEVER  # re-planned below for the new pause
        self._schedule_start(port, now)

    def _pause_upstream(self, in_port: int, queue_class: int, now: float) -> None:
        """`queue_class`'s cells from `in_port` passed its XOFF: pause that class upstream."""
        if not self.ingress_paused[in_port]:
            self.paused_since[in_port] = now
        self.ingress_class_paused[in_port * QUEUE_CLASSES + queue_class] = True
        self.ingress_paused[in_port] = True
        peer = self.cable_peer[in_port]
        if peer >= 0:
            # The upstream logical switch is this chip: its queue stops draining,
            # (our choice) all its classes, until no class of in_port is paused.
            # No frame exists inside the chip: (our choice) one pause counts once.
            self.pfc_pauses_sent[in_port] += 1
            self.paused_until[peer] = NEVER
        else:
            self._send_pause(in_port, queue_class, now)

    def _send_pause(self, port: int, queue_class: int, now: float) -> None:
        key = port * QUEUE_CLASSES + queue_class
        self.control.append((port, self.class_pause_frames[key][0]))
        self.pfc_pauses_sent[port] += 1  # every frame on the wire, refreshes included
        # Refresh halfway through the pause so the sender never restarts early.
        when = now + self.pause_seconds[port] / 2
        self.pause_refresh_at[key] = when
        heappush(self.events, (when, next(self._sequence), _REFRESH, key, None))

    def _resume_upstream(self, in_port: int, queue_class: int, now: float) -> None:
        base = in_port * QUEUE_CLASSES
        self.ingress_class_paused[base + queue_class] = False
        still_paused = any(self.ingress_class_paused[base : base + QUEUE_CLASSES])
        self.ingress_paused[in_port] = still_paused
        if not still_paused:
            self.pfc_paused_us[in_port] += int((now - self.paused_since[in_port]) * 1e6)
        self.pfc_resumes_sent[in_port] += 1
        peer = self.cable_peer[in_port]
        if peer >= 0:
            if not still_paused:
                self.paused_until[peer] = now
                self._schedule_start(peer, now)
        else:
            self.pause_refresh_at.pop(base + queue_class, None)
            self.control.append((in_port, self.class_pause_frames[base + queue_class][1]))
