"""What happens to a frame between the receiving and the sending socket?

The switch program (the P4 program's ingress and egress and the traffic
manager: a `switch_program.SwitchProgram`) does it; `Datapath` is the loop
around it: wait on the port sockets with a timeout to the next departure,
read frames in batches, advance the traffic manager, send. A program with a
compiled path (`fast_pipeline`) reads the rings and sends by itself, and with
rings on every port and the real clock it runs the whole loop, sleeping
included, and Python looks in about every millisecond.

P4 counters are kept apart in the hot path (Python ints, or the compiled
pipeline's array) and added to the shared numpy arrays at most every
millisecond, also while the loop sleeps between departures, and before it
sleeps with nothing due, so a P4Runtime read lags the wire by at most about a
millisecond. Every 10 ms (when the program was given a ring: `sample_ring`) the
per-job counts and each port's deepest queue go into a ring in the shared
memory, by the compiled loop itself or here; the loop never waits for its
readers.

Frames enter the traffic manager at the time the kernel received them, not
when this thread got round to reading them: a loop that lost its core for a
few milliseconds then reads a burst, but each frame joins the queue it would
have joined on time, so no queue (and no ECN mark) appears that the wire
never had. Only the hand-over of finished frames to host sockets is late.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import math
import os
import select
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .port_stats import lateness_bucket
from .ports import (
    MAX_FRAME_BYTES,
    PACKET_OUTGOING,
    RECV_ANCILLARY_BYTES,
    PortSocket,
    ancillary_timestamp,
    restore_vlan_tag,
)
from .state import COUNTER_CELLS
from .switch_program import CompiledPath, SwitchProgram
from .tm_config import MTU_FRAME_BYTES, TmConfig

log = logging.getLogger(__name__)

# How a port's frames are read: mmap ring, recv(), recvfrom() + PACKET_OUTGOING
# filter, or recvmsg() with the SO_TIMESTAMPNS receive time.
_RING, _RECV, _RECVFROM, _RECVMSG, _FAST_RING = 0, 1, 2, 3, 4
RECV_BATCH = 64  # frames read from one socket before looking at the others
COUNTER_FLUSH_S = 1e-3
# (our choice) Per-port statistics (every loss by cause) reach the shared block
# at most this late; the kernel's receive-overrun counts are read as often.
STATS_PUBLISH_S = 0.02
OVERRUNS_CHECK_S = 0.1
# (our choice) Kernel stamps are trusted from up to 1 s in the past (a loop
# stalled longer than that has bigger problems) to 1 ms in the future (the
# error of mapping CLOCK_REALTIME onto the loop's clock is microseconds);
# anything else - a clock step, a stamp in another clock - falls back to the
# time the frame was read.
MAX_STAMP_AGE_S = 1.0
MAX_STAMP_AHEAD_S = 1e-3
# How often the CLOCK_REALTIME -> loop clock offset is measured again (NTP slews it).
OFFSET_RECHECK_S = 0.5
PR_SET_TIMERSLACK = 29
# (our choice) The compiled loop wakes up (for departures and for arrivals) at most
# once per 40% of one MTU frame's time on its fastest port, between 20 and 100 us:
# at 50 Mbit/s a fabric under TCP load has events a few microseconds apart, and a
# wake-up for each cost most of a core (ppoll and its timer were 28% of the loop
# with one wake-up per 20 us). A frame is then handed over up to that late (a
# 1514-byte frame takes 246 us at 50 Mbit/s, so 98 us); arrivals keep their kernel
# stamps and the traffic manager's times stay exact, and the departure-lateness
# figures count what it costs.
WAKEUP_FRAME_SHARE = 0.4
WAKEUP_GRANULARITY_MIN_S = 20e-6
WAKEUP_GRANULARITY_MAX_S = 100e-6
# (our choice) 1 us timer slack for the datapath thread (Linux's default is
# 50 us): it sleeps until the next departure, and every microsecond it wakes
# late is added to that frame's delivery.
DATAPATH_TIMER_SLACK_NS = 1000


def wakeup_granularity(tm: TmConfig, ports: Iterable[int]) -> float:
    """How often the compiled loop may wake up: a share of one MTU frame's time (with
    the TM's wire overhead) on the fastest of `ports`, within [20, 100] us."""
    rates = [tm.rate_gbps(port) for port in ports] or [tm.default_rate_gbps]
    frame_s = (MTU_FRAME_BYTES + tm.wire_overhead_bytes) * 8 / (max(rates) * 1e9)
    share = WAKEUP_FRAME_SHARE * frame_s
    return min(WAKEUP_GRANULARITY_MAX_S, max(WAKEUP_GRANULARITY_MIN_S, share))


# epoll's report of a socket in trouble (an error pending, the device hung up).
_SOCKET_TROUBLE = select.EPOLLERR | select.EPOLLHUP


class Datapath:
    """The packet loop: sockets in, SwitchProgram, sockets out. Runs in one thread.

    kernel_timestamps False stamps frames with the time they are read (the
    old behaviour, kept to show what it costs: see the tests).
    """

    def __init__(
        self,
        pipeline: SwitchProgram,
        sockets: Sequence[PortSocket],
        clock: Callable[[], float] = time.monotonic,
        kernel_timestamps: bool = True,
        granularity: float = WAKEUP_GRANULARITY_MIN_S,
    ) -> None:
        self.pipeline = pipeline
        self.sockets = list(sockets)
        self.clock = clock
        self.kernel_timestamps = kernel_timestamps
        self.granularity = granularity  # seconds between wake-ups of the compiled loop
        self.send_errors = 0
        self.stamp_fallbacks = 0  # frames stamped with their read time instead
        # Another file descriptor the loop waits on, and what to do when it is
        # readable (the control socket of a packet-loop process).
        self.control: tuple[int, Callable[[], None]] | None = None
        self._stopping = False
        self._stall_s = 0.0
        self._wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="cassini-datapath", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the loop to finish and wait for it (safe from any thread)."""
        self._stopping = True
        os.eventfd_write(self._wake_fd, 1)
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.error("datapath thread did not stop within %.1f s", timeout)
            self._thread = None
        os.close(self._wake_fd)
        self._wake_fd = -1

    def request_stop(self) -> None:
        """Make run() return after the current batch (from the loop's own thread or a signal)."""
        self._stopping = True
        with contextlib.suppress(OSError, ValueError):
            os.eventfd_write(self._wake_fd, 1)

    def stall(self, seconds: float) -> None:
        """Make the loop sleep once for `seconds`, as if it had lost its core (for tests)."""
        self._stall_s = seconds
        os.eventfd_write(self._wake_fd, 1)

    def realtime_offset(self) -> float:
        """CLOCK_REALTIME minus the loop's clock, from the tightest of a few paired reads."""
        clock = self.clock
        best_width, best_offset = math.inf, 0.0
        for _ in range(5):
            before = clock()
            real = time.time()
            after = clock()
            if after - before < best_width:
                best_width, best_offset = after - before, real - (before + after) / 2
        return best_offset

    def run(self) -> None:
        _set_timer_slack(DATAPATH_TIMER_SLACK_NS)
        pipeline = self.pipeline
        # A compiled program reads the rings and sends itself; it runs the whole
        # loop when every port has a ring and time is the real clock.
        compiled = pipeline.compiled_path()
        if (
            compiled is not None
            and self.clock is time.monotonic
            and all(s.rx_ring is not None for s in self.sockets)
        ):
            self._run_compiled(compiled)
            return
        tm = pipeline.tm
        clock = self.clock
        receive = tm.receive
        advance = pipeline.advance
        wake_fd = self._wake_fd
        transmitted = tm.transmitted  # drained in place, never replaced
        stamped = self.kernel_timestamps
        fds = [-1] * COUNTER_CELLS  # the compiled sender's socket per port
        rings = {}  # fd -> ring the compiled reader reads
        wakeup_lateness = pipeline.wakeup_lateness
        epoll = select.epoll()
        readers: dict[int, tuple[int, Callable[..., Any], int]] = {}
        senders: dict[int, Callable[[bytes], int]] = {}
        for port_socket in self.sockets:
            epoll.register(port_socket.fileno(), select.EPOLLIN)
            sock = port_socket.sock
            reader: tuple[int, Callable[..., Any], int]
            fds[port_socket.port] = port_socket.fileno()
            if port_socket.rx_ring is not None and compiled is not None:
                rings[port_socket.fileno()] = port_socket.rx_ring
                reader = (port_socket.port, port_socket.rx_ring.receive, _FAST_RING)
            elif port_socket.rx_ring is not None:
                ring = port_socket.rx_ring
                reader = (
                    port_socket.port,
                    ring.receive_stamped if stamped else ring.receive,
                    _RING,
                )
            elif stamped:
                reader = (port_socket.port, sock.recvmsg, _RECVMSG)
            elif port_socket.ignores_outgoing:
                reader = (port_socket.port, sock.recv, _RECV)
            else:
                reader = (port_socket.port, sock.recvfrom, _RECVFROM)
            readers[port_socket.fileno()] = reader
            senders[port_socket.port] = sock.send
        epoll.register(wake_fd, select.EPOLLIN)
        control_fd, on_control = self.control if self.control is not None else (-1, None)
        if on_control is not None:
            epoll.register(control_fd, select.EPOLLIN)
        epoll_fd = [epoll.fileno()]
        last_flush = last_offset_check = last_publish = last_overruns = clock()
        sample_ring = pipeline.sample_ring
        sample_interval = sample_ring.interval_s if sample_ring is not None else math.inf
        next_sample = clock() + sample_interval
        publish = pipeline.shared is not None
        unpublished = False  # statistics changed since the last publish_stats()
        unflushed = False  # counters changed since the last flush_counters()
        offset = self.realtime_offset()
        try:
            while not self._stopping:
                if self._stall_s:
                    stall, self._stall_s = self._stall_s, 0.0
                    time.sleep(stall)
                # `now` before reading: every frame received before it is in a
                # ring or socket buffer now, so advancing to `now` misses none.
                now = clock()
                if now >= next_sample:
                    pipeline.sample(now, time.time())
                    next_sample += sample_interval  # on the grid, unless a whole one passed
                    if next_sample <= now:
                        next_sample = now + sample_interval
                events = epoll.poll(0)
                if not events:
                    # Idle: flush what changed if it has waited a millisecond or nothing
                    # is due (a flush costs more than forwarding a frame: not per wake-up).
                    if unflushed and (
                        now - last_flush >= COUNTER_FLUSH_S or tm.next_event_time() is None
                    ):
                        pipeline.flush_counters()
                        last_flush = now
                        unflushed = False
                    if publish and now - last_overruns >= OVERRUNS_CHECK_S:
                        unpublished |= self._read_overruns()
                        last_overruns = now
                    if unpublished and now - last_publish >= STATS_PUBLISH_S:
                        pipeline.publish_stats()
                        last_publish = now
                        unpublished = False
                    next_event = tm.next_event_time()
                    if unpublished:  # wake up in time to publish them
                        due = last_publish + STATS_PUBLISH_S
                        next_event = due if next_event is None else min(next_event, due)
                    if unflushed:  # ... and to flush the counters
                        due = last_flush + COUNTER_FLUSH_S
                        next_event = due if next_event is None else min(next_event, due)
                    if sample_ring is not None:  # ... and to sample
                        due = next_sample
                        next_event = due if next_event is None else min(next_event, due)
                    if next_event is None:
                        select.select(epoll_fd, [], [], OVERRUNS_CHECK_S if publish else None)
                        now = clock()
                    else:
                        # select() sleeps with microsecond resolution; epoll only in ms.
                        wait = next_event - clock()
                        if wait > 0 and not select.select(epoll_fd, [], [], wait)[0]:
                            now = clock()  # slept to the event: how late did we wake?
                            late = now - next_event
                            wakeup_lateness[lateness_bucket(late)] += 1
                            if late > pipeline.wakeup_max:
                                pipeline.wakeup_max = late
                        else:
                            now = clock()
                    events = epoll.poll(0)
                if events:
                    unpublished = True
                horizon = now
                for fd, mask in events:
                    found = readers.get(fd)
                    if found is None:
                        if fd == control_fd and on_control is not None:
                            on_control()  # between two batches: entries change as one step
                        else:  # the wake-up eventfd
                            with contextlib.suppress(BlockingIOError):
                                os.eventfd_read(wake_fd)
                        continue
                    port, recv, kind = found
                    if mask & _SOCKET_TROUBLE and self._port_gone(fd):
                        # A ring reads no error: epoll would report it for ever (the
                        # loop spun at 44% of a core, silently). Stop reading the port.
                        epoll.unregister(fd)
                        del readers[fd]
                        continue
                    try:
                        if kind == _FAST_RING:
                            assert compiled is not None
                            ring = rings[fd]
                            ring.next_slot, _n, fallbacks, stamp, truncated = compiled.read_ring(
                                port,
                                ring.memory,
                                ring.next_slot,
                                ring.slots,
                                ring.slot_bytes,
                                RECV_BATCH,
                                offset if stamped else None,
                                clock(),
                            )
                            self.stamp_fallbacks += fallbacks
                            ring.truncated += truncated
                            if _n == RECV_BATCH and stamp < horizon:
                                horizon = stamp  # more frames wait in this ring
                        elif kind == _RING:
                            batch = recv(RECV_BATCH)
                            if stamped:
                                read_time = clock()
                                earliest = read_time - MAX_STAMP_AGE_S
                                latest = read_time + MAX_STAMP_AHEAD_S
                                stamp = read_time
                                for real, frame in batch:
                                    stamp = real - offset
                                    if not earliest < stamp < latest:
                                        stamp = read_time
                                        self.stamp_fallbacks += 1
                                    receive(port, frame, stamp)
                                if len(batch) == RECV_BATCH and stamp < horizon:
                                    horizon = stamp  # more frames wait in this ring
                            else:
                                read_time = clock()
                                for frame in batch:
                                    receive(port, frame, read_time)
                        elif kind == _RECVMSG:
                            self._read_stamped(port, recv, offset)
                        else:
                            read_time = clock()
                            for _ in range(RECV_BATCH):
                                if kind == _RECV:
                                    receive(port, recv(MAX_FRAME_BYTES), read_time)
                                else:
                                    frame, address = recv(MAX_FRAME_BYTES)
                                    if address[2] != PACKET_OUTGOING:
                                        receive(port, frame, read_time)
                    except BlockingIOError:
                        pass
                    except OSError as err:  # interface deleted or broken
                        # Level-triggered epoll would report it forever: stop reading it.
                        log.error("port %d: receive failed, port disabled: %s", port, err)
                        epoll.unregister(fd)
                        del readers[fd]
                        self._mark_down(port)
                advance(horizon)
                unflushed = True
                if compiled is not None:
                    if transmitted or tm.control:
                        compiled.send(fds, clock())
                elif transmitted:
                    pipeline.note_departures(clock())
                    self._send_all(transmitted, senders)
                    transmitted.clear()
                    tm.transmitted_due.clear()
                if tm.control:
                    self._send_all(tm.control, senders)
                    tm.control.clear()
                if now - last_flush >= COUNTER_FLUSH_S:
                    pipeline.flush_counters()
                    last_flush = now
                    unflushed = False
                    if publish and now - last_publish >= STATS_PUBLISH_S:
                        if now - last_overruns >= OVERRUNS_CHECK_S:
                            self._read_overruns()
                            last_overruns = now
                        pipeline.publish_stats()
                        last_publish = now
                        unpublished = False
                    if stamped and now - last_offset_check >= OFFSET_RECHECK_S:
                        offset = self.realtime_offset()
                        last_offset_check = now
        finally:
            self._read_overruns()
            pipeline.flush_counters()
            pipeline.publish_stats()
            epoll.close()

    def _run_compiled(self, compiled: CompiledPath) -> None:
        """The loop with the compiled pipeline reading every ring itself: Python looks
        in at most every COUNTER_FLUSH_S (counters, statistics, the clock offset), and
        whenever the control socket or the wake-up eventfd is readable."""
        pipeline = self.pipeline
        clock = self.clock
        stamped = self.kernel_timestamps
        send_fds = [-1] * COUNTER_CELLS
        ring_fds = []
        for port_socket in self.sockets:
            ring = port_socket.rx_ring
            assert ring is not None
            send_fds[port_socket.port] = port_socket.fileno()
            compiled.add_ring(
                port_socket.port, ring.memory, ring.slots, ring.slot_bytes, ring.next_slot
            )
            ring_fds.append(port_socket.fileno())
        control_fd, on_control = self.control if self.control is not None else (-1, None)
        poll_fds = [*ring_fds, self._wake_fd] + ([control_fd] if on_control is not None else [])
        publish = pipeline.shared is not None
        last_offset_check = last_publish = last_overruns = clock()
        offset = self.realtime_offset()
        unpublished = False
        try:
            while not self._stopping:
                if self._stall_s:
                    stall, self._stall_s = self._stall_s, 0.0
                    time.sleep(stall)
                # Back within a millisecond of doing something (the counters), else when
                # the statistics or the overrun check are due.
                now = clock()
                if unpublished:
                    until = last_publish + STATS_PUBLISH_S
                else:
                    until = now + (OVERRUNS_CHECK_S if publish else 1.0)
                woken, active = compiled.run(
                    poll_fds,
                    send_fds,
                    offset if stamped else None,
                    until,
                    now + COUNTER_FLUSH_S,
                    self.granularity,
                )
                if woken:
                    if on_control is not None and _readable(control_fd):
                        on_control()  # between two batches: entries change as one step
                    with contextlib.suppress(BlockingIOError):
                        os.eventfd_read(self._wake_fd)
                    for fd in [fd for fd in ring_fds if _in_trouble(fd)]:
                        if self._port_gone(fd):  # no longer watched: no spin on its error
                            ring_fds.remove(fd)
                            # -1: ppoll skips it, and the rings keep their places first
                            poll_fds[poll_fds.index(fd)] = -1
                now = clock()
                if active:
                    pipeline.flush_counters()
                    unpublished = True
                if publish and now - last_overruns >= OVERRUNS_CHECK_S:
                    unpublished |= self._read_overruns()
                    last_overruns = now
                if unpublished and now - last_publish >= STATS_PUBLISH_S:
                    pipeline.publish_stats()
                    last_publish = now
                    unpublished = False
                if stamped and now - last_offset_check >= OFFSET_RECHECK_S:
                    offset = self.realtime_offset()
                    last_offset_check = now
        finally:
            self.stamp_fallbacks += compiled.stamp_fallbacks
            compiled.release_rings()
            self._read_overruns()
            pipeline.flush_counters()
            pipeline.publish_stats()

    def _port_gone(self, fd: int) -> bool:
        """After EPOLLERR/EPOLLHUP on a port's socket: is its interface gone? Then the port
        is marked down and logged (once); an interface that is only down keeps its port
        (reading the socket's error clears it, so epoll stops reporting it)."""
        port_socket = next(p for p in self.sockets if p.fileno() == fd)
        with contextlib.suppress(OSError):
            error = port_socket.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            socket.if_nametoindex(port_socket.ifname)
            if error:
                log.warning(
                    "port %d (%s): %s; the port stays", port_socket.port, port_socket.ifname,
                    os.strerror(error),
                )  # fmt: skip
            return False
        log.error(
            "port %d: interface %s is gone; the port is down and no longer read",
            port_socket.port,
            port_socket.ifname,
        )
        self._mark_down(port_socket.port)
        return True

    def _mark_down(self, port: int) -> None:
        """Publish the port as down (gNMI oper-status): a statistic, so it crosses to the
        service process with the others."""
        self.pipeline.port_down[port] = 1
        self.pipeline.publish_stats()

    def _read_overruns(self) -> bool:
        """Add the frames the kernel dropped on each port since the last look; any?"""
        found = False
        overruns = self.pipeline.rx_overruns
        for port_socket in self.sockets:
            try:
                dropped = port_socket.read_drops()
            except OSError:
                continue
            if dropped:
                overruns[port_socket.port] += dropped
                found = True
        return found

    def _read_stamped(self, port: int, recvmsg: Callable[..., Any], offset: float) -> None:
        """Up to RECV_BATCH frames with their SO_TIMESTAMPNS receive times."""
        receive = self.pipeline.tm.receive
        for _ in range(RECV_BATCH):
            frame, ancillary, _flags, address = recvmsg(MAX_FRAME_BYTES, RECV_ANCILLARY_BYTES)
            if address[2] == PACKET_OUTGOING:
                continue
            frame = restore_vlan_tag(ancillary, frame)  # the kernel strips 802.1Q tags
            read_time = self.clock()
            real = ancillary_timestamp(ancillary)
            stamp = read_time if real is None else real - offset
            if not read_time - MAX_STAMP_AGE_S < stamp < read_time + MAX_STAMP_AHEAD_S:
                stamp = read_time
                self.stamp_fallbacks += 1
            receive(port, frame, stamp)

    def _send_all(
        self,
        frames: list[tuple[int, bytes]],
        senders: Mapping[int, Callable[[bytes], int]],
    ) -> None:
        for port, frame in frames:
            try:
                senders[port](frame)
            except OSError:  # socket buffer full (ENOBUFS/EAGAIN) or interface down
                self.send_errors += 1
                self.pipeline.send_errors[port] += 1


def _readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


def _in_trouble(fd: int) -> bool:
    """An error is pending on the socket, or its device hung up."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return any(
        mask & (select.POLLERR | select.POLLHUP | select.POLLNVAL) for _, mask in poller.poll(0)
    )


def _set_timer_slack(nanoseconds: int) -> None:
    """Best effort: shorter timer slack for the calling thread (Linux prctl)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_TIMERSLACK, ctypes.c_ulong(nanoseconds), 0, 0, 0)
    except (OSError, AttributeError):
        log.debug("cannot set the datapath thread's timer slack")
