"""How many CE-marked packets did a worker receive on its job's flows?

Counted in the receiving host, not the switch, so the two can be checked
against each other. Mechanism: an AF_PACKET socket on the worker's
interface, inside its namespace, with a classic BPF filter that accepts
only frames that are

- addressed to this host (packet type PACKET_HOST, read with the
  SKF_AD_PKTTYPE ancillary load: the host's own sends, PACKET_OUTGOING, and
  other hosts' frames never count; binding to ETH_P_IP also keeps outgoing
  frames off the socket altogether),
- IPv4, TCP, first fragment or unfragmented, ECN bits CE (tos & 3 == 3),
- to one of the job's TCP ports on this worker (the port its neighbours
  connect to: every data segment of the job's flows into this worker),

and keeps 1 byte of each. The count is read per iteration with
getsockopt(PACKET_STATISTICS): tp_packets counts every frame the filter
accepted, including those dropped for want of buffer space, and resets on
each read. The socket's buffer is left tiny, so the kernel drops almost
every accepted frame and the replica never copies a packet: the cost is the
filter, a few instructions per received frame in the kernel.

Why not the alternatives (our choice): nftables or tc counters would leave
rules in the namespace that outlive a killed replica and need a run-file
entry and a cleanup, and reading them costs a process per iteration; the
socket dies with the replica. TCP_INFO has no received-CE count for classic
ECN. Counting in user space (recv and test each frame) costs a copy per
frame on the receiving core.

The filter only sees what reaches the interface: with offloads off (as on
every fabric host) one frame is one segment, the unit the switch counts.
"""

from __future__ import annotations

import ctypes
import fcntl
import socket
import struct
from collections.abc import Iterable
from dataclasses import dataclass

ETH_P_IP = 0x0800
SOL_PACKET = 263
PACKET_STATISTICS = 6
SO_ATTACH_FILTER = 26
PACKET_HOST = 0
IPPROTO_TCP = 6
ECN_CE = 3
# The ancillary load of the packet type (linux/filter.h: SKF_AD_OFF + SKF_AD_PKTTYPE).
SKF_AD_PKTTYPE = -0x1000 + 4
SNAP_BYTES = 1
MIN_RCVBUF = 0  # the kernel raises it to its minimum: room for about one frame
MAX_PORTS = 200  # BPF jump offsets are 8 bits
SIOCGIFADDR = 0x8915  # linux/sockios.h

# Classic BPF opcodes (linux/bpf_common.h, linux/filter.h).
BPF_LD_W_ABS = 0x20
BPF_LD_H_ABS = 0x28
BPF_LD_B_ABS = 0x30
BPF_LD_H_IND = 0x48
BPF_LDX_B_MSH = 0xB1
BPF_ALU_AND_K = 0x54
BPF_JEQ_K = 0x15
BPF_JSET_K = 0x45
BPF_RET_K = 0x06

# Offsets in an Ethernet frame carrying IPv4.
ETHERTYPE_AT = 12
IP_AT = 14
TOS_AT = IP_AT + 1
FRAGMENT_AT = IP_AT + 6
PROTOCOL_AT = IP_AT + 9
TCP_DST_PORT_AT = IP_AT + 2  # from the start of the TCP header (X = IP header length)
FRAGMENT_OFFSET_MASK = 0x1FFF


@dataclass(frozen=True)
class Insn:
    """One classic BPF instruction (struct sock_filter)."""

    code: int
    jt: int
    jf: int
    k: int

    def pack(self) -> bytes:
        return struct.pack("HBBI", self.code, self.jt, self.jf, self.k & 0xFFFFFFFF)


def ce_filter(ports: Iterable[int], snap: int = SNAP_BYTES) -> tuple[Insn, ...]:
    """The filter: accept (keep `snap` bytes) CE-marked IPv4 TCP frames to this
    host whose destination port is one of `ports`; reject everything else.

    >>> len(ce_filter([47000])), ce_filter([47000])[-1]
    (16, Insn(code=6, jt=0, jf=0, k=1))
    """
    wanted = tuple(dict.fromkeys(int(p) for p in ports))
    if not wanted or len(wanted) > MAX_PORTS or not all(0 < p < 65536 for p in wanted):
        raise ValueError(f"need 1..{MAX_PORTS} TCP ports in 1..65535, got {list(wanted)}")
    head = [
        (BPF_LD_W_ABS, None, None, SKF_AD_PKTTYPE),
        (BPF_JEQ_K, 0, "reject", PACKET_HOST),
        (BPF_LD_H_ABS, None, None, ETHERTYPE_AT),
        (BPF_JEQ_K, 0, "reject", ETH_P_IP),
        (BPF_LD_B_ABS, None, None, PROTOCOL_AT),
        (BPF_JEQ_K, 0, "reject", IPPROTO_TCP),
        (BPF_LD_B_ABS, None, None, TOS_AT),
        (BPF_ALU_AND_K, None, None, 3),
        (BPF_JEQ_K, 0, "reject", ECN_CE),
        (BPF_LD_H_ABS, None, None, FRAGMENT_AT),
        (BPF_JSET_K, "reject", 0, FRAGMENT_OFFSET_MASK),
        (BPF_LDX_B_MSH, None, None, IP_AT),  # X = 4 * (IP header length field)
        (BPF_LD_H_IND, None, None, TCP_DST_PORT_AT),
    ]
    matches = [(BPF_JEQ_K, "accept", 0, port) for port in wanted]
    program = [*head, *matches]
    reject_at, accept_at = len(program), len(program) + 1
    out = []
    for i, (code, jt, jf, k) in enumerate(program):
        targets = {"reject": reject_at, "accept": accept_at}

        def offset(jump: int | str | None, i: int = i, targets: dict[str, int] = targets) -> int:
            if isinstance(jump, str):
                return targets[jump] - i - 1
            return jump or 0

        out.append(Insn(code, offset(jt), offset(jf), k))
    out.append(Insn(BPF_RET_K, 0, 0, 0))
    out.append(Insn(BPF_RET_K, 0, 0, snap))
    return tuple(out)


def attach_filter(sock: socket.socket, program: tuple[Insn, ...]) -> None:
    """SO_ATTACH_FILTER with a struct sock_fprog pointing at the packed program."""
    code = b"".join(insn.pack() for insn in program)
    buffer = ctypes.create_string_buffer(code, len(code))
    fprog = struct.pack("HL", len(program), ctypes.addressof(buffer))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)


class CeCounter:
    """CE-marked TCP segments received on `ifname` for `ports` since the last `read`.

    Open it in the namespace the interface lives in (the replica's). The
    filter is attached before the socket is bound, so no unfiltered frame
    is ever counted.
    """

    def __init__(self, ifname: str, ports: Iterable[int]) -> None:
        self.ifname = ifname
        self.ports = tuple(ports)
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # protocol 0: receives nothing
        try:
            attach_filter(sock, ce_filter(self.ports))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, MIN_RCVBUF)
            sock.bind((ifname, ETH_P_IP))
        except OSError:
            sock.close()
            raise
        self._sock = sock
        self.read()

    def read(self) -> int:
        """Frames the filter accepted since the previous read (the kernel resets it)."""
        raw = self._sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
        packets, _drops = struct.unpack("II", raw)
        return int(packets)

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> CeCounter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def interface_with_address(ip: str) -> str | None:
    """The interface of this namespace that holds IPv4 address `ip` (None: none does)."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _, name in socket.if_nameindex():
            try:
                ifreq = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()))
            except OSError:
                continue  # no IPv4 address
            if socket.inet_ntoa(ifreq[20:24]) == ip:
                return name
    finally:
        probe.close()
    return None
