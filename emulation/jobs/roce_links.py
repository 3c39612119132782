"""How does a worker move its collectives' bytes as RoCEv2 instead of over TCP?

`RoceLinks` holds, beside a connected `ring.Ring` (whose TCP connections keep
the hello and the barrier), one RoCE QP per flow of the job's pattern: a
connected UDP socket per rank this worker sends to, and one UDP socket on the
worker's own address and port that every QP it receives on shares (told apart
by the BTH's destination QP). `relay` and `exchange` have `Ring.relay`'s and
`exchange.exchange`'s signatures and semantics (header bytes, cut-through
ring steps), and run in `_roce.transfer`: go-back-N, CNPs for CE marks,
DCQCN's rate per QP (its state kept across collectives, as a NIC keeps it per
QP) under the NIC's line rate, and PFC pauses honoured (`roce.pfc`). With
`mltcp`, DCQCN's increase steps grow with the share of the iteration's bytes
the worker has sent (`roce.mltcp`); `start_iteration` resets that share.

(our choice) RoCEv2's destination port is 4791; here it is the worker's own
listening port (the TCP one's number, over UDP): a kernel UDP socket cannot
share port 4791 between the replicas of one server and demultiplex by QP, and
the switch's per-job counters key on (address, port) (`job_by_dst`), so the
job's RoCE flows are counted as its TCP ones are. Everything after the UDP
header is RoCEv2's. QP numbers: 0x100 + the sending worker's rank; PSNs start
at 0 and both ends advance them by each call's packets.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from emulation.roce import pfc
from emulation.roce.dcqcn import DcqcnSettings, scaled
from emulation.roce.mltcp import IterationBytes, MltcpSettings, iteration_sent, iteration_start
from emulation.roce.native import compiled, settings_tuple

from .header import Header
from .ring import Ring
from .transport import PACING_SHARE, WIRE_OVERHEAD_BYTES

# (our choice) RoCE's path MTU 1024, what ConnectX picks on a 1500-byte Ethernet MTU.
PAYLOAD = 1024
BTH_ICRC = 12 + 4
IP_UDP = 20 + 8
ETHERNET_HEADER_BYTES = 14
OVERHEAD = IP_UDP + ETHERNET_HEADER_BYTES + WIRE_OVERHEAD_BYTES  # beyond BTH, payload, ICRC
ACK_EVERY = 16  # (our choice) an ACK requested every 16 packets and on a call's last
ACK_WIRE = BTH_ICRC + 4 + OVERHEAD  # BTH, AETH, ICRC and the rest
# What a link carries per full data packet, with the reverse flow's ACK share (a ring's
# NIC carries both): the phase's bytes times this are the payload (ring_plan.phase_bytes).
ROCE_PAYLOAD_SHARE = PAYLOAD / (PAYLOAD + BTH_ICRC + OVERHEAD + ACK_WIRE / ACK_EVERY)
# (our choice) go-back-N's timeout: a packet unacknowledged this long is sent again with
# all after it. Long beside a scaled path's queueing (5000 cells of 80 B at 50 Mbit/s
# drain in 64 ms), short beside a Down phase.
RTO_S = 0.1
SO_TIMESTAMPNS = 35  # asm-generic/socket.h
SO_RCVBUFFORCE = 33  # asm-generic/socket.h: past net.core.rmem_max, with CAP_NET_ADMIN
RCVBUF_BYTES = 4 << 20
QPN_BASE = 0x100
PSN_MASK = 0xFFFFFF
ETH_P_MAC_CONTROL = 0x8808


@dataclass
class RoceCounts:
    """What a worker's QPs did, summed over calls since the last `take`."""

    marked: int = 0  # CE-marked data packets received
    cnps_sent: int = 0  # by this worker's notification point
    cnps_received: int = 0  # by its reaction points
    cuts: int = 0
    retransmits: int = 0
    timeouts: int = 0
    early: int = 0  # packets of a next call that came before it (sent again)
    pause_frames: int = 0
    paused_s: float = 0.0
    min_rate_bps: float = field(default=float("inf"))


class RoceLinks:
    """One worker's RoCE QPs for its pattern's flows; see the module docstring."""

    def __init__(
        self,
        ring: Ring,
        nic_gbps: float,
        scale: float,
        priority: int = 3,
        honour_pfc: bool = True,
        ifname: str | None = None,
        dcqcn: DcqcnSettings | None = None,
        mltcp: MltcpSettings | None = None,
    ) -> None:
        if compiled is None:
            raise RuntimeError("the compiled RoCE data path is not built (scripts/setup.sh)")
        self.ring, self.priority = ring, priority
        self.link_bps = nic_gbps * 1e9 * scale
        base = dcqcn or DcqcnSettings(line_rate_bps=nic_gbps * 1e9)
        rate = scaled(base, scale)
        # (our choice) QPs run at PACING_SHARE of the NIC, as the TCP connections do.
        line, *rest = settings_tuple(rate)
        self.settings = (float(line) * PACING_SHARE, *rest)
        self.cnp_interval = rate.min_time_between_cnps_s
        self.counts = RoceCounts()
        me = ring.peers[ring.rank]
        self.recv = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.send: dict[int, socket.socket] = {}
        self.pfc_sock: socket.socket | None = None
        try:
            receive_buffer(self.recv)
            self.recv.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
            self.recv.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, pfc.reply_tos())
            self.recv.bind((me.host, me.port))
            for other in ring.sends_to:
                sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                self.send[other] = sock
                sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, pfc.data_tos(priority))
                receive_buffer(sock)
                sock.bind((me.host, 0))
                peer = ring.peers[other]
                sock.connect((peer.host, peer.port))
            if honour_pfc and ifname is not None:
                self.pfc_sock = open_pause_socket(ifname)
        except BaseException:
            self.close()
            raise
        self.state = {other: bytearray(compiled.RP_STATE_BYTES) for other in ring.sends_to}
        self.send_psn = dict.fromkeys(ring.sends_to, 0)
        self.recv_psn = dict.fromkeys(ring.receives_from, 0)
        self.paused_until = 0.0
        self.mltcp = mltcp
        self.iteration = IterationBytes()

    def start_iteration(self) -> None:
        """A training iteration begins: MLTCP's share of its bytes sent restarts at 0."""
        self.iteration = iteration_start(self.iteration)

    def relay(
        self, sends: Sequence[int], receives: Sequence[int], header: Header | None = None
    ) -> tuple[int, Header]:
        """`Ring.relay` over RoCE: the ring's steps cut through, to the right and from the left."""
        known = header or Header()
        right, left = self.ring.right_rank, self.ring.left_rank
        got, heard = self._transfer({right: list(sends)}, {left: list(receives)}, known, True)
        return got, known.merge(heard)

    def exchange(
        self, sends: Mapping[int, int], receives: Mapping[int, int], header: Header | None = None
    ) -> tuple[int, Header]:
        """`exchange.exchange` over RoCE: one step, one header byte per flow."""
        send_steps = {r: [b] for r, b in sends.items()}
        recv_steps = {r: [b] for r, b in receives.items()}
        return self._transfer(send_steps, recv_steps, header or Header(), False)

    def agree(self, header: Header) -> Header:
        """`exchange.agree` over RoCE: N-1 header-only steps around the ring."""
        for _ in range(self.ring.n - 1):
            _, heard = self.exchange({self.ring.right_rank: 0}, {self.ring.left_rank: 0}, header)
            header = header.merge(heard)
        return header

    def _transfer(
        self,
        sends: Mapping[int, list[int]],
        receives: Mapping[int, list[int]],
        header: Header,
        relay: bool,
    ) -> tuple[int, Header]:
        assert compiled is not None
        me = self.ring.rank
        send_ranks, recv_ranks = list(sends), list(receives)
        senders = [
            (self.send[r].fileno(), QPN_BASE + me, self.send_psn[r], self.state[r], sends[r])
            for r in send_ranks
        ]
        receivers = [(QPN_BASE + r, self.recv_psn[r], receives[r]) for r in recv_ranks]
        pause, mltcp = None, None
        if self.mltcp is not None:
            it = self.iteration
            mltcp = (self.mltcp.slope, self.mltcp.intercept, float(it.total), float(it.sent))
        if self.pfc_sock is not None:
            pause = (self.pfc_sock.fileno(), self.priority, self.link_bps, self.paused_until)
        status, err, side, index, heard, frames, paused_s, until, sent, got = compiled.transfer(
            self.settings, PAYLOAD, OVERHEAD, RTO_S, ACK_EVERY, self.ring.timeout_s,
            self.cnp_interval, self.recv.fileno(), senders, receivers, header.byte(), relay,
            pause, mltcp,
        )  # fmt: skip
        if status != 0:
            peer = (recv_ranks if side == 1 else send_ranks)[index]
            if status == 3:
                raise self.ring.lost(peer, f"no progress for {self.ring.timeout_s:g} s")
            raise self.ring.lost(peer, OSError(err, "RoCE socket failed"))
        self.iteration = iteration_sent(self.iteration, sum(sum(sends[r]) for r in send_ranks))
        for r in send_ranks:
            self.send_psn[r] = (self.send_psn[r] + packets(sends[r])) & PSN_MASK
        for r in recv_ranks:
            self.recv_psn[r] = (self.recv_psn[r] + packets(receives[r])) & PSN_MASK
        c = self.counts
        for _sent, cnps, cuts, retransmits, timeouts, _naks, _rc, min_rc in sent:
            c.cnps_received += cnps
            c.cuts += cuts
            c.retransmits += retransmits
            c.timeouts += timeouts
            c.min_rate_bps = min(c.min_rate_bps, min_rc)
        for _accepted, marked, cnps, _naks, early in got:
            c.marked += marked
            c.cnps_sent += cnps
            c.early += early
        c.pause_frames += frames
        c.paused_s += paused_s
        self.paused_until = until
        return sum(sum(steps) for steps in receives.values()), Header.of(heard)

    def take(self) -> RoceCounts:
        """The counts since the last take, and start anew."""
        counts, self.counts = self.counts, RoceCounts()
        return counts

    def close(self) -> None:
        for sock in (self.recv, *self.send.values(), self.pfc_sock):
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.close()


def packets(steps: Sequence[int]) -> int:
    """The packets a call's steps take: each step's bytes and its header byte, in
    PAYLOAD-byte packets (the rule `_roce.transfer` lays them out by).

    >>> packets([0, 1023, 1024])
    4
    """
    return sum(-(-(1 + b) // PAYLOAD) for b in steps)


def receive_buffer(sock: socket.socket, size: int = RCVBUF_BYTES) -> None:
    """A receive buffer of `size` (forced past rmem_max where allowed): a replica
    starved of CPU for a while must not lose packets in its own socket, which a
    NIC would not (its receive ring is in hardware)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, size)
    except PermissionError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)


def open_pause_socket(ifname: str) -> socket.socket:
    """An AF_PACKET socket on `ifname` receiving MAC Control frames (0x8808), time
    stamped by the kernel so a pause read late still counts from its arrival."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_MAC_CONTROL))
    try:
        sock.bind((ifname, ETH_P_MAC_CONTROL))
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except BaseException:
        sock.close()
        raise
    return sock
