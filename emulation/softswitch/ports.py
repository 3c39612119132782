"""How does the software target send and receive frames on a Linux interface?

One AF_PACKET socket per switch port, bound to the interface with ETH_P_ALL,
non-blocking, in promiscuous mode (the switch forwards frames addressed to
other MACs). The kernel is asked not to hand back our own transmissions
(PACKET_IGNORE_OUTGOING); on kernels without it, the receive path filters
PACKET_OUTGOING frames by their address instead.

Every frame comes with the time the kernel received it (the mmap ring's
tp_sec/tp_nsec, or SO_TIMESTAMPNS ancillary data on the recvmsg path), so a
switch thread that reads late still knows when each frame was on the wire.
Both are CLOCK_REALTIME; the datapath maps them onto its own clock.

The kernel strips a received frame's outer 802.1Q tag into metadata (the
ring header's tp_vlan_tci/tp_vlan_tpid, or a PACKET_AUXDATA message on the
recvmsg path); both paths put it back at offset 12, so a tagged frame leaves
tagged, with its priority bits, and is counted at its full length.
`PortSocket.read_drops` reports the frames the kernel dropped because the
ring or the socket buffer was full (PACKET_STATISTICS).
"""

from __future__ import annotations

import logging
import mmap
import socket
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from topologies.errors import UserInputError, did_you_mean

from .packet import ETHERTYPE_VLAN, insert_vlan_tag

log = logging.getLogger(__name__)

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
PACKET_IGNORE_OUTGOING = 23  # Linux >= 4.20
PACKET_STATISTICS = 6
PACKET_AUXDATA = 8
PACKET_OUTGOING = 4
SO_SNDBUFFORCE = 32  # not exported by Python's socket module
SO_RCVBUFFORCE = 33
# Receive timestamps as struct timespec (SCM_TIMESTAMPNS has the same value).
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
SCM_TIMESTAMPNS = SO_TIMESTAMPNS
_TIMESPEC = struct.Struct("=qq")
TIMESTAMP_ANCILLARY_BYTES = socket.CMSG_SPACE(_TIMESPEC.size)
# struct tpacket_auxdata: tp_status, tp_len, tp_snaplen, tp_mac, tp_net,
# tp_vlan_tci, tp_vlan_tpid.
_AUXDATA = struct.Struct("=IIIHHHH")
# Room for both control messages of a recvmsg(): the timestamp and the auxdata.
RECV_ANCILLARY_BYTES = TIMESTAMP_ANCILLARY_BYTES + socket.CMSG_SPACE(_AUXDATA.size)
# struct tpacket_stats: tp_packets (including drops), tp_drops.
_TPACKET_STATS = struct.Struct("=II")
SOCKET_BUFFER_BYTES = 8 * 1024 * 1024
PACKET_RX_RING = 5
PACKET_VERSION = 10
TPACKET_V2 = 1
TP_STATUS_USER = 1
TP_STATUS_VLAN_VALID = 1 << 4  # tp_vlan_tci holds the stripped tag's TCI
TP_STATUS_VLAN_TPID_VALID = 1 << 6  # tp_vlan_tpid holds its TPID (else 0x8100)
# (our choice) ~7 ms of backlog at 300 kpps; the kernel pins RING_FRAMES x slot
# bytes per port (4 MiB at a 1500-byte MTU).
RING_FRAMES = 2048
RING_BLOCK_BYTES = 1 << 17
# tpacket2_hdr: tp_status, tp_len, tp_snaplen, tp_mac (offset of the frame in the
# slot), tp_net, tp_sec, tp_nsec (when the kernel received the frame, CLOCK_REALTIME),
# tp_vlan_tci, tp_vlan_tpid (the tag the kernel stripped, if the status says so)
_TPACKET2 = struct.Struct("=IIIH2xIIHH")
# Largest frame we read: a 9000-byte jumbo MTU plus Ethernet and one VLAN tag.
MAX_FRAME_BYTES = 9000 + 18


@dataclass
class PortSocket:
    """One switch port's open socket (the edge that owns a file descriptor)."""

    port: int
    ifname: str
    sock: socket.socket
    mac: bytes
    # False when the kernel still returns our own sends; the reader must filter them.
    ignores_outgoing: bool
    # The mmap'ed receive ring, when the kernel gave us one (no recv() per frame).
    rx_ring: RxRing | None = None

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        if self.rx_ring is not None:
            self.rx_ring.close()
        self.sock.close()

    def read_drops(self) -> int:
        """Frames the kernel dropped for this socket since the last call (ring or
        receive buffer full: the switch did not read fast enough).

        PACKET_STATISTICS resets the kernel's counts when read, so only this
        method may read it.
        """
        data = self.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, _TPACKET_STATS.size)
        _packets, drops = _TPACKET_STATS.unpack(data)
        return int(drops)


class RxRing:
    """A PACKET_MMAP (TPACKET_V2) receive ring: the kernel writes frames into
    shared memory and we copy them out, saving one system call per frame,
    the largest cost of a Python forwarder."""

    def __init__(self, sock: socket.socket, mtu: int) -> None:
        # A slot holds the tpacket2 header, sockaddr_ll and the frame (+VLAN tag).
        slot = 1 << (mtu + 18 + 96 - 1).bit_length()
        self.slot_bytes = slot
        self.slots = RING_FRAMES
        block = max(RING_BLOCK_BYTES, slot)
        blocks = self.slots * slot // block
        sock.setsockopt(SOL_PACKET, PACKET_VERSION, TPACKET_V2)
        sock.setsockopt(
            SOL_PACKET, PACKET_RX_RING, struct.pack("IIII", block, blocks, slot, self.slots)
        )
        self.memory = mmap.mmap(
            sock.fileno(), block * blocks, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE
        )
        self.next_slot = 0
        self.truncated = 0

    def receive(self, limit: int) -> list[bytes]:
        """Up to `limit` frames the kernel has handed over, oldest first."""
        return [frame for _stamp, frame in self.receive_stamped(limit)]

    def receive_stamped(self, limit: int) -> list[tuple[float, bytes]]:
        """Up to `limit` (kernel receive time in CLOCK_REALTIME seconds, frame), oldest
        first; a tag the kernel stripped is back in the frame."""
        memory = self.memory
        unpack = _TPACKET2.unpack_from
        slot_bytes = self.slot_bytes
        slots = self.slots
        index = self.next_slot
        frames = []
        for _ in range(limit):
            offset = index * slot_bytes
            if not memory[offset] & TP_STATUS_USER:
                break
            status, length, snaplen, mac, seconds, nanoseconds, tci, tpid = unpack(memory, offset)
            start = offset + mac
            frame = memory[start : start + snaplen]
            if status & TP_STATUS_VLAN_VALID:
                if not status & TP_STATUS_VLAN_TPID_VALID:
                    tpid = ETHERTYPE_VLAN
                frame = insert_vlan_tag(frame, tpid, tci)
            frames.append((seconds + nanoseconds * 1e-9, frame))
            if snaplen != length:
                self.truncated += 1
            memory[offset : offset + 4] = b"\0\0\0\0"  # back to the kernel
            index += 1
            if index == slots:
                index = 0
        self.next_slot = index
        return frames

    def close(self) -> None:
        self.memory.close()


def ancillary_timestamp(ancillary: list[tuple[int, int, bytes]]) -> float | None:
    """The SCM_TIMESTAMPNS receive time (CLOCK_REALTIME seconds) of a recvmsg() result."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            seconds, nanoseconds = _TIMESPEC.unpack_from(data)
            return seconds + nanoseconds * 1e-9
    return None


def restore_vlan_tag(ancillary: list[tuple[int, int, bytes]], frame: bytes) -> bytes:
    """`frame` as it was on the wire: with the 802.1Q tag the kernel stripped into
    the PACKET_AUXDATA message of a recvmsg() result, if any (else `frame` itself).

    The socket must have PACKET_AUXDATA on (open_port does it) and recvmsg()
    room for it (RECV_ANCILLARY_BYTES).
    """
    for level, kind, data in ancillary:
        if level == SOL_PACKET and kind == PACKET_AUXDATA and len(data) >= _AUXDATA.size:
            status, _len, _snaplen, _mac, _net, tci, tpid = _AUXDATA.unpack_from(data)
            if not status & TP_STATUS_VLAN_VALID:
                return frame
            if not status & TP_STATUS_VLAN_TPID_VALID:
                tpid = ETHERTYPE_VLAN
            return insert_vlan_tag(frame, tpid, tci)
    return frame


def interface_names() -> list[str]:
    return [name for _index, name in socket.if_nameindex()]


def check_interfaces(ports: Mapping[int, str]) -> None:
    """Fail with one clear line if a port's interface does not exist."""
    known = interface_names()
    for port, ifname in sorted(ports.items()):
        if ifname not in known:
            raise UserInputError(f"port {port}: " + did_you_mean(ifname, known, "interface"))


def interface_mac(ifname: str) -> bytes:
    text = Path("/sys/class/net", ifname, "address").read_text().strip()
    return bytes.fromhex(text.replace(":", ""))


def open_port(port: int, ifname: str, use_ring: bool = True) -> PortSocket:
    """Open and configure the socket of one port (with an mmap receive ring if possible)."""
    try:
        index = socket.if_nametoindex(ifname)
    except OSError as err:
        raise UserInputError(
            f"port {port}: " + did_you_mean(ifname, interface_names(), "interface")
        ) from err
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    try:
        for option, name in ((SO_RCVBUFFORCE, "rcv"), (SO_SNDBUFFORCE, "snd")):
            try:
                sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER_BYTES)
            except OSError:  # not root: the kernel caps the plain option instead
                fallback = socket.SO_RCVBUF if name == "rcv" else socket.SO_SNDBUF
                sock.setsockopt(socket.SOL_SOCKET, fallback, SOCKET_BUFFER_BYTES)
        try:
            sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
            ignores_outgoing = True
        except OSError:
            ignores_outgoing = False
        # Stamps every received skb when it enters the stack (also fills the ring's
        # tp_sec/tp_nsec at that moment rather than when the ring copy is made).
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        # The stripped VLAN tag of every frame read with recvmsg() (restore_vlan_tag).
        sock.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
        sock.bind((ifname, ETH_P_ALL))
        membership = struct.pack("iHH8s", index, PACKET_MR_PROMISC, 0, b"")
        sock.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, membership)
        sock.setblocking(False)
        mac = interface_mac(ifname)
        rx_ring = None
        if use_ring and ignores_outgoing:
            mtu = int(Path("/sys/class/net", ifname, "mtu").read_text())
            try:
                rx_ring = RxRing(sock, mtu)
            except OSError as err:
                log.warning("port %d: no PACKET_MMAP ring (%s); using recv()", port, err)
    except OSError as err:
        sock.close()
        raise UserInputError(f"port {port}: cannot open interface '{ifname}': {err}") from err
    if Path("/sys/class/net", ifname, "operstate").read_text().strip() not in ("up", "unknown"):
        log.warning("port %d: interface %s is not up; frames will not flow", port, ifname)
    return PortSocket(port, ifname, sock, mac, ignores_outgoing, rx_ring)


def open_ports(ports: Mapping[int, str], use_ring: bool = True) -> list[PortSocket]:
    """Open every port or none (sockets already opened are closed on failure)."""
    check_interfaces(ports)
    opened: list[PortSocket] = []
    try:
        for port, ifname in sorted(ports.items()):
            opened.append(open_port(port, ifname, use_ring))
    except BaseException:
        for port_socket in opened:
            port_socket.close()
        raise
    return opened
