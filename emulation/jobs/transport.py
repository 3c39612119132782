"""How is a replica's TCP connection set up: congestion control, ECN, the NIC's rate?

- Congestion control: **cubic**, set on every socket (`TCP_CONGESTION`).
  A new network namespace inherits the root namespace's default, and on
  this machine that is bbr, which ignores ECN echoes: the fabric's marks
  would slow nobody down. DCTCP, the natural partner of a WRED/ECN fabric
  (and closest to the testbed's DCQCN), is not in this kernel
  (`net.ipv4.tcp_available_congestion_control`: reno bbr cubic). Cubic with
  ECN (RFC 3168) treats an ECE echo like a loss: one multiplicative
  decrease (cwnd x 0.7) at most once per window (RTT), however many packets
  were marked, and it signals CWR; DCTCP would cut by half the fraction of
  marked packets. So under contention cubic backs off harder and less
  smoothly than the testbed's transport, and iterations stretch a little
  more than they would there.
- ECN: `net.ipv4.tcp_ecn=1` in the namespace (no per-socket switch exists).
  The fabric's hosts set it when they start (`emulation.fabric.mininet_net.CassiniHost`,
  the one place it is set); the kernel then negotiates ECN on connect and
  sends data as ECT(0). `ecn_requested` reads it, and a replica started where
  it is off says so on stderr (its records would show no marks).
- The NIC's rate: a veth sends at memory speed, so a lone sender would
  queue in the switch's port toward its receiver and get marks no real
  50 Gbps NIC could cause. Each connection is paced by the kernel instead
  (`SO_MAX_PACING_RATE`; with no fq qdisc TCP paces internally) at its share
  of the scaled NIC rate, counted the way the kernel counts (payload bytes)
  so that payload plus headers and Ethernet framing fill exactly that share
  of the wire (`pacing_bytes_per_s`). (our choice) The pacing is per
  connection: replicas sharing one server each pace on their own.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

from emulation.softswitch.tm_config import TmConfig

CONGESTION_CONTROL = "cubic"
ECN_SYSCTL = Path("/proc/sys/net/ipv4/tcp_ecn")
AVAILABLE_SYSCTL = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
SO_MAX_PACING_RATE = 47  # asm-generic/socket.h (not exported by Python's socket module)
IP_MTU = 14  # linux/in.h
ETHERNET_HEADER_BYTES = 14
WIRE_OVERHEAD_BYTES = TmConfig().wire_overhead_bytes  # what the switch adds per frame
# Linux acks every second full segment (delayed ACK); the headroom left for them.
ACKS_PER_SEGMENT = 0.5
UNPACED_SEGMENTS = 10
UNPACED_GAP_S = 0.0005
# (our choice) Connections are paced at 97% of their NIC share. The port toward a
# worker carries its left neighbour's data and the ACKs of its own flow, from two
# hosts each shaped on its own: paced at the full share the two filled it to 100%,
# a queue with nothing to drain it, and a ring alone was marked at its hosts' ports
# once its steps ran cut through (`ring.Ring.relay`); 3% below (the hosts'
# NIC shaping keeps 1%) it was not in the shift benchmark's runs. A phase lasts
# that much longer than its profile.
PACING_SHARE = 0.97
MAX_PACING = 0xFFFFFFFF  # u32: a larger rate means "no pacing" to setsockopt


def ecn_requested(sysctl: Path = ECN_SYSCTL) -> bool:
    """Whether this namespace's TCP asks for ECN on connect (tcp_ecn 1; 2 only accepts it)."""
    try:
        return sysctl.read_text().strip() == "1"
    except OSError:
        return False


def pacing_bytes_per_s(
    nic_gbps: float,
    mss: int,
    mtu: int,
    wire_overhead: int = WIRE_OVERHEAD_BYTES,
    acks_per_segment: float = ACKS_PER_SEGMENT,
) -> int:
    """The payload rate whose segments, and the ACKs of a flow coming the
    other way, fill `nic_gbps` on the wire.

    The kernel counts a segment's payload (mss bytes) against the pacing
    rate; on the wire it takes mtu + Ethernet header + preamble, FCS and
    gap. The port that delivers a worker's incoming flow also carries the
    ACKs of the worker's outgoing one (a ring: every port does), so room is
    left for `acks_per_segment` ACK frames (headers only) per segment.

    >>> pacing_bytes_per_s(0.05, 1448, 1500)  # 50 Mbit/s: 6.25 MB/s of wire
    5716993
    >>> pacing_bytes_per_s(0.05, 1448, 1500, acks_per_segment=0.0)
    5884265
    """
    if nic_gbps <= 0 or mss <= 0 or mtu < mss or acks_per_segment < 0:
        raise ValueError(f"need nic_gbps > 0 and 0 < mss <= mtu, got {nic_gbps}, {mss}, {mtu}")
    segment = mtu + ETHERNET_HEADER_BYTES + wire_overhead
    ack = mtu - mss + ETHERNET_HEADER_BYTES + wire_overhead
    wire = segment + acks_per_segment * ack
    return min(MAX_PACING - 1, int(nic_gbps * 1e9 / 8 * mss / wire))


def available_congestion_controls(sysctl: Path = AVAILABLE_SYSCTL) -> tuple[str, ...]:
    """What this kernel offers (`net.ipv4.tcp_available_congestion_control`)."""
    try:
        return tuple(sysctl.read_text().split())
    except OSError:
        return (CONGESTION_CONTROL,)


def configure(sock: socket.socket, congestion: str = CONGESTION_CONTROL) -> None:
    """Before connect: the congestion control (cubic unless told) and no Nagle delay."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, congestion.encode())
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def pace(sock: socket.socket, nic_gbps: float) -> int:
    """On a connected socket: pace its sends at `PACING_SHARE` of `nic_gbps` of wire;
    returns the rate set."""
    mss = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG)
    mtu = sock.getsockopt(socket.IPPROTO_IP, IP_MTU)
    rate = pacing_bytes_per_s(nic_gbps * PACING_SHARE, mss, max(mtu, mss))
    sock.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, rate)
    return rate


def send_unpaced(sock: socket.socket, message: bytes) -> None:
    """Send a connection's first message as UNPACED_SEGMENTS small segments.

    The kernel paces a connection only from its 10th data segment on
    (tcp_update_skb_after_send), so the first bulk data would leave as one
    line-rate burst of 10 frames, enough to cross WRED min at S = 0.001;
    spending those on the handshake message keeps every data segment paced.
    """
    pieces = max(1, min(UNPACED_SEGMENTS, len(message)))
    size = -(-len(message) // pieces)
    for i in range(0, len(message), size):
        sock.sendall(message[i : i + size])
        time.sleep(UNPACED_GAP_S)  # (our choice) apart, so no write is coalesced


def congestion_control(sock: socket.socket) -> str:
    """The congestion control a socket uses (what `configure` set, or the namespace's)."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16)
    return raw.split(b"\0", 1)[0].decode()
