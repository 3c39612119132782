"""What happens to a frame between the receiving and the sending socket?

`Pipeline` is the switch program (the P4 program's ingress and egress):
count, look up (ingress_port, dst_mac) in `logical_forward`, hand to the
traffic manager, count on transmit. It has no sockets and takes `now` from
the caller, so tests run it on a fake clock. `Datapath` is the loop around
it: wait on the port sockets with a timeout to the next departure, read
frames in batches, advance the traffic manager, send.

P4 counters are kept as Python ints in the hot path and added to the shared
numpy arrays at most every millisecond and whenever the loop goes idle, so a
P4Runtime read lags the wire by at most about a millisecond.
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from controlplane.p4info import load_p4info
from topologies.errors import UserInputError

from .packet import parse_mac_control
from .ports import MAX_FRAME_BYTES, PACKET_OUTGOING, PortSocket
from .state import COUNTER_CELLS, DataplaneState
from .tm_config import TmConfig
from .traffic_manager import EARLY_TOLERANCE_S, TrafficManager

log = logging.getLogger(__name__)

# P4 names (checked against the P4Info at start-up, the one source of truth).
PORT_RX = "CassiniIngress.port_rx"
PORT_TX = "CassiniEgress.port_tx"
ECN_MARKED = "CassiniEgress.ecn_marked"
WRED_DROPPED = "CassiniEgress.wred_dropped"
COUNTER_NAMES = (PORT_RX, PORT_TX, ECN_MARKED, WRED_DROPPED)

# How a port's frames are read: mmap ring, recv(), or recvfrom() + PACKET_OUTGOING filter.
_RING, _RECV, _RECVFROM = 0, 1, 2
RECV_BATCH = 64  # frames read from one socket before looking at the others
COUNTER_FLUSH_S = 1e-3


def checked_counter_names() -> tuple[str, ...]:
    """The counter names the target writes, as the P4Info spells them."""
    index = load_p4info()
    return tuple(index.counter(name).name for name in COUNTER_NAMES)


class Pipeline:
    """The switch program over one DataplaneState and one TrafficManager."""

    def __init__(
        self,
        state: DataplaneState,
        config: TmConfig,
        interface_ports: Iterable[int],
        seed: int = 0,
        port_macs: Mapping[int, bytes] | None = None,
    ) -> None:
        self.state = state
        self.config = config
        self.interface_ports = sorted(set(interface_ports))
        cabled = set(config.cable_peers())
        both = cabled & set(self.interface_ports)
        if both:
            raise UserInputError(
                f"port {min(both)} is both an interface port and one end of a loopback cable"
            )
        self.ports = sorted(set(self.interface_ports) | cabled)
        self.valid_ports = frozenset(self.ports)
        self.tm = TrafficManager(config, self.ports, state.wred, seed=seed, port_macs=port_macs)
        n = COUNTER_CELLS
        self.rx_packets = [0] * n
        self.rx_bytes = [0] * n
        self.forward_misses = [0] * n
        self.malformed = [0] * n
        self.pfc_received = [0] * n  # PFC and 802.3x PAUSE frames
        self.mac_control_ignored = [0] * n
        self.to_unknown_port = [0] * n
        names = checked_counter_names()
        tm = self.tm
        self._counter_sources = [
            (state.counter(names[0]), self.rx_packets, self.rx_bytes),
            (state.counter(names[1]), tm.tx_packets, tm.tx_bytes),
            (state.counter(names[2]), tm.marked_packets, tm.marked_bytes),
            (state.counter(names[3]), tm.wred_dropped_packets, tm.wred_dropped_bytes),
        ]
        self._flushed = [([0] * n, [0] * n) for _ in self._counter_sources]

    def ingress(self, port: int, frame: bytes, now: float) -> None:
        """One received frame through parser, ingress counter, table and queue."""
        n = len(frame)
        if n < 14:
            self.malformed[port] += 1
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
        out_port = self.state.forward.get((port, frame[:6]))
        if out_port is None:
            if frame[12] == 0x88 and frame[13] == 0x08:
                self._mac_control(port, frame, now)
            else:
                self.forward_misses[port] += 1
            return
        if out_port not in self.valid_ports:
            self.to_unknown_port[port] += 1
            return
        self.tm.enqueue(frame, port, out_port, now)

    def _mac_control(self, port: int, frame: bytes, now: float) -> None:
        # The MAC consumes PAUSE/PFC frames before the pipeline sees them.
        self.rx_packets[port] -= 1
        self.rx_bytes[port] -= len(frame)
        pause = parse_mac_control(frame)
        if pause is None:  # other MAC-control opcodes: consumed, nothing to do
            self.mac_control_ignored[port] += 1
            return
        self.pfc_received[port] += 1
        self.tm.receive_pause(port, pause[0], pause[1], now)

    def advance(self, now: float) -> None:
        """Let the traffic manager send what is due; run cable arrivals through ingress."""
        tm = self.tm
        tm.advance(now)
        while tm.arrived:
            arrived = tm.arrived
            tm.arrived = []
            ingress = self.ingress
            for port, frame in arrived:
                ingress(port, frame, now)
            tm.advance(now)

    def flush_counters(self) -> None:
        """Add what changed since the last flush to the shared P4 counter arrays."""
        ports = self.ports
        for (array, packets, byte_counts), (seen_packets, seen_bytes) in zip(
            self._counter_sources, self._flushed, strict=True
        ):
            for port in ports:
                delta = packets[port] - seen_packets[port]
                if delta:
                    array[port, 0] += delta
                    seen_packets[port] = packets[port]
                    array[port, 1] += byte_counts[port] - seen_bytes[port]
                    seen_bytes[port] = byte_counts[port]

    def stats(self) -> dict[str, dict[int, int]]:
        """Drops and events that have no P4 counter, per port (for logs and tests)."""
        tm = self.tm
        named = {
            "forward_misses": self.forward_misses,
            "malformed": self.malformed,
            "pfc_received": self.pfc_received,
            "mac_control_ignored": self.mac_control_ignored,
            "to_unknown_port": self.to_unknown_port,
            "tail_dropped": tm.tail_dropped_packets,
            "pfc_pauses_sent": tm.pfc_pauses_sent,
            "pfc_resumes_sent": tm.pfc_resumes_sent,
        }
        return {name: {p: v for p, v in enumerate(values) if v} for name, values in named.items()}


class Datapath:
    """The packet loop: sockets in, Pipeline, sockets out. Runs in one thread."""

    def __init__(
        self,
        pipeline: Pipeline,
        sockets: Sequence[PortSocket],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pipeline = pipeline
        self.sockets = list(sockets)
        self.clock = clock
        self.send_errors = 0
        self._stopping = False
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

    def run(self) -> None:
        pipeline = self.pipeline
        tm = pipeline.tm
        clock = self.clock
        ingress = pipeline.ingress
        advance = pipeline.advance
        wake_fd = self._wake_fd
        transmitted = tm.transmitted  # drained in place, never replaced
        epoll = select.epoll()
        readers: dict[int, tuple[int, Callable[..., Any], int]] = {}
        senders: dict[int, Callable[[bytes], int]] = {}
        for port_socket in self.sockets:
            epoll.register(port_socket.fileno(), select.EPOLLIN)
            sock = port_socket.sock
            reader: tuple[int, Callable[..., Any], int]
            if port_socket.rx_ring is not None:
                reader = (port_socket.port, port_socket.rx_ring.receive, _RING)
            elif port_socket.ignores_outgoing:
                reader = (port_socket.port, sock.recv, _RECV)
            else:
                reader = (port_socket.port, sock.recvfrom, _RECVFROM)
            readers[port_socket.fileno()] = reader
            senders[port_socket.port] = sock.send
        epoll.register(wake_fd, select.EPOLLIN)
        epoll_fd = [epoll.fileno()]
        last_flush = clock()
        try:
            while not self._stopping:
                events = epoll.poll(0)
                if not events:
                    pipeline.flush_counters()
                    next_event = tm.next_event_time()
                    if next_event is None:
                        select.select(epoll_fd, [], [])
                    else:
                        # select() sleeps with microsecond resolution; epoll only in ms.
                        wait = next_event - EARLY_TOLERANCE_S - clock()
                        if wait > 0:
                            select.select(epoll_fd, [], [], wait)
                    events = epoll.poll(0)
                now = clock()
                for fd, _mask in events:
                    found = readers.get(fd)
                    if found is None:  # the wake-up eventfd
                        continue
                    port, recv, kind = found
                    try:
                        if kind == _RING:
                            for frame in recv(RECV_BATCH):
                                ingress(port, frame, now)
                        elif kind == _RECV:
                            for _ in range(RECV_BATCH):
                                ingress(port, recv(MAX_FRAME_BYTES), now)
                        else:
                            for _ in range(RECV_BATCH):
                                frame, address = recv(MAX_FRAME_BYTES)
                                if address[2] != PACKET_OUTGOING:
                                    ingress(port, frame, now)
                    except BlockingIOError:
                        pass
                    except OSError as err:  # interface deleted or broken
                        # Level-triggered epoll would report it forever: stop reading it.
                        log.error("port %d: receive failed, port disabled: %s", port, err)
                        epoll.unregister(fd)
                    now = clock()
                advance(now)
                if transmitted:
                    self._send_all(transmitted, senders)
                    transmitted.clear()
                if tm.control:
                    self._send_all(tm.control, senders)
                    tm.control.clear()
                if now - last_flush >= COUNTER_FLUSH_S:
                    pipeline.flush_counters()
                    last_flush = now
        finally:
            pipeline.flush_counters()
            epoll.close()

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
