"""What bytes does a RoCEv2 packet carry after its UDP header?

RoCEv2 (InfiniBand Architecture, Annex A17) is InfiniBand's transport over
UDP to port 4791: a 12-byte Base Transport Header (BTH: opcode, flags,
P_Key, destination QP, ack-request bit, 24-bit PSN), the payload, then a
4-byte invariant CRC (ICRC). An RC acknowledgement adds the 4-byte ACK
Extended Transport Header (AETH: syndrome, MSN) after the BTH; a congestion
notification packet (CNP, opcode 0x81) carries 16 reserved bytes.

ICRC: **computed** (`icrc`), not zeroed. A real RoCE NIC drops a packet whose
ICRC is wrong, and Wireshark and scapy flag it; the fields a switch may
rewrite (IPv4 TOS with its ECN bits, TTL, the IP checksum, the UDP checksum)
and the BTH's FECN/BECN byte are masked to ones before the CRC, so a CE mark
on the way keeps the ICRC valid. The cost is one `zlib.crc32` per packet (C,
about a microsecond per kilobyte). The CRC covers the IP identification too,
so only a sender that writes the whole IPv4 header can compute it
(`ipv4_frame`); a packet sent through a kernel UDP socket would carry a
zero ICRC (our choice then: zero, marked by `ICRC_ZERO`).

Parsed with `struct` for speed; tests/roce/test_bth.py checks every header
against scapy's `scapy.contrib.roce` on the same bytes.

>>> b = Bth(opcode=Opcode.RC_SEND_ONLY, dest_qp=0x12, psn=7, ack_request=True)
>>> b.pack().hex()
'0400ffff0000001280000007'
>>> Bth.parse(b.pack()) == b
True
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from enum import IntEnum

ROCEV2_UDP_PORT = 4791  # IANA's port for RoCEv2 (IBA Annex A17)
BTH_BYTES = 12
AETH_BYTES = 4
ICRC_BYTES = 4
CNP_PAD_BYTES = 16  # the CNP's 16 reserved bytes (Annex A17)
PSN_BITS = 24
PSN_MASK = (1 << PSN_BITS) - 1
QPN_MASK = (1 << 24) - 1
DEFAULT_PKEY = 0xFFFF  # the default partition (full membership)
ICRC_ZERO = b"\x00" * ICRC_BYTES
IPV4_HEADER_BYTES = 20
UDP_HEADER_BYTES = 8
IP_PROTO_UDP = 17

_BTH = struct.Struct("!BBHII")  # opcode, SE|M|pad|tver, P_Key, FECN|BECN|resv|DestQP, A|resv|PSN
_AETH = struct.Struct("!I")  # syndrome (8) | MSN (24)


class Opcode(IntEnum):
    """The BTH opcodes the replicas use (IBA vol. 1, chapter 9: RC = 0x00-0x1F; the CNP's from Annex A17)."""

    RC_SEND_FIRST = 0x00
    RC_SEND_MIDDLE = 0x01
    RC_SEND_LAST = 0x02
    RC_SEND_ONLY = 0x04
    RC_RDMA_WRITE_FIRST = 0x06
    RC_RDMA_WRITE_MIDDLE = 0x07
    RC_RDMA_WRITE_LAST = 0x08
    RC_RDMA_WRITE_ONLY = 0x0A
    RC_ACKNOWLEDGE = 0x11
    CNP = 0x81


class NakCode(IntEnum):
    """The low 5 bits of a NAK's AETH syndrome (IBA vol. 1, chapter 9)."""

    PSN_SEQUENCE_ERROR = 0
    INVALID_REQUEST = 1
    REMOTE_ACCESS_ERROR = 2
    REMOTE_OPERATIONAL_ERROR = 3


# Syndrome bits 6-5 (bit 7 reserved): 00 ACK, 01 RNR NAK, 11 NAK (IBA vol. 1, AETH).
_ACK = 0b000 << 5
_NAK = 0b011 << 5
# An ACK's low 5 bits are its credit count; 0x1F means "invalid", i.e. no end-to-end
# credits (our choice: the replicas' receive queues never run dry).
ACK_NO_CREDITS = 0x1F


def _check(name: str, value: int, bits: int) -> None:
    if not 0 <= value < (1 << bits):
        raise ValueError(f"BTH field {name}={value} does not fit in {bits} bits")


@dataclass(frozen=True)
class Bth:
    """One Base Transport Header (IBA vol. 1, chapter 9); field widths as the spec's."""

    opcode: int
    dest_qp: int
    psn: int
    ack_request: bool = False
    pkey: int = DEFAULT_PKEY
    solicited: bool = False
    migreq: bool = False
    pad_count: int = 0
    version: int = 0
    fecn: bool = False
    becn: bool = False

    def __post_init__(self) -> None:
        for name, bits in (
            ("opcode", 8),
            ("dest_qp", 24),
            ("psn", PSN_BITS),
            ("pkey", 16),
            ("pad_count", 2),
            ("version", 4),
        ):
            _check(name, getattr(self, name), bits)

    def pack(self) -> bytes:
        flags = (self.solicited << 7) | (self.migreq << 6) | (self.pad_count << 4) | self.version
        qp = (self.fecn << 31) | (self.becn << 30) | self.dest_qp
        psn = (self.ack_request << 31) | self.psn
        return _BTH.pack(self.opcode, flags, self.pkey, qp, psn)

    @classmethod
    def parse(cls, data: bytes | memoryview) -> Bth:
        if len(data) < BTH_BYTES:
            raise ValueError(f"a BTH needs {BTH_BYTES} bytes, got {len(data)}")
        opcode, flags, pkey, qp, psn = _BTH.unpack_from(data)
        return cls(
            opcode=opcode,
            dest_qp=qp & QPN_MASK,
            psn=psn & PSN_MASK,
            ack_request=bool(psn >> 31),
            pkey=pkey,
            solicited=bool(flags >> 7),
            migreq=bool((flags >> 6) & 1),
            pad_count=(flags >> 4) & 3,
            version=flags & 0xF,
            fecn=bool(qp >> 31),
            becn=bool((qp >> 30) & 1),
        )


@dataclass(frozen=True)
class Aeth:
    """The ACK Extended Transport Header of an RC ACK or NAK (IBA vol. 1, chapter 9).

    >>> Aeth.nak(NakCode.PSN_SEQUENCE_ERROR, msn=3).pack().hex()
    '60000003'
    >>> Aeth.parse(Aeth.ack(msn=9).pack()).is_ack
    True
    """

    syndrome: int
    msn: int = 0

    def __post_init__(self) -> None:
        _check("syndrome", self.syndrome, 8)
        _check("msn", self.msn, 24)

    @classmethod
    def ack(cls, msn: int = 0, credits: int = ACK_NO_CREDITS) -> Aeth:
        return cls(_ACK | credits, msn)

    @classmethod
    def nak(cls, code: NakCode, msn: int = 0) -> Aeth:
        return cls(_NAK | int(code), msn)

    @property
    def is_ack(self) -> bool:
        return self.syndrome & 0x60 == _ACK

    @property
    def is_nak(self) -> bool:
        return self.syndrome & 0x60 == _NAK

    @property
    def nak_code(self) -> NakCode:
        if not self.is_nak:
            raise ValueError(f"AETH syndrome {self.syndrome:#04x} is not a NAK")
        return NakCode(self.syndrome & 0x1F)

    def pack(self) -> bytes:
        return _AETH.pack((self.syndrome << 24) | self.msn)

    @classmethod
    def parse(cls, data: bytes | memoryview) -> Aeth:
        if len(data) < AETH_BYTES:
            raise ValueError(f"an AETH needs {AETH_BYTES} bytes, got {len(data)}")
        (word,) = _AETH.unpack_from(data)
        return cls(word >> 24, word & 0xFFFFFF)


def cnp_bth(dest_qp: int) -> Bth:
    """A CNP's BTH (Annex A17; scapy's `cnp` builds the same): opcode 0x81, BECN set, PSN 0, the default P_Key.

    The destination QP is the congested flow's sending QP, so its reaction
    point knows which rate to cut.
    """
    return Bth(opcode=Opcode.CNP, dest_qp=dest_qp, psn=0, becn=True)


def cnp_payload(dest_qp: int) -> bytes:
    """What follows a CNP's UDP header, ICRC excluded: BTH and 16 reserved zero bytes."""
    return cnp_bth(dest_qp).pack() + bytes(CNP_PAD_BYTES)


def _ipv4_header(
    src: bytes, dst: bytes, tos: int, ttl: int, ident: int, total: int, checksum: int
) -> bytes:
    # version/IHL, TOS, total length, id, flags (DF) + fragment offset, TTL, proto, checksum
    return struct.pack(
        "!BBHHHBBH4s4s", 0x45, tos, total, ident, 0x4000, ttl, IP_PROTO_UDP, checksum, src, dst
    )


def _ip_checksum(header: bytes) -> int:
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def icrc(ip_header: bytes, udp_header: bytes, transport: bytes) -> bytes:
    """The ICRC of an IPv4 RoCEv2 packet (Annex A17), as it goes on the wire.

    CRC-32 (the Ethernet polynomial, `zlib.crc32`) over 8 bytes of ones (the
    absent LRH), the IPv4 header with TOS, TTL and checksum set to ones, the
    UDP header with its checksum set to ones, and the BTH (FECN/BECN byte set
    to ones) with everything after it; sent least significant byte first.
    `transport` is the BTH, extension headers and payload, without the ICRC.
    """
    ip = bytearray(ip_header[:IPV4_HEADER_BYTES])
    ip[1] = 0xFF  # TOS (DSCP + ECN)
    ip[8] = 0xFF  # TTL
    ip[10:12] = b"\xff\xff"  # header checksum
    udp = bytearray(udp_header[:UDP_HEADER_BYTES])
    udp[6:8] = b"\xff\xff"
    bth = bytearray(transport[:BTH_BYTES])
    bth[4] = 0xFF  # FECN, BECN and the 6 reserved bits
    crc = zlib.crc32(b"\xff" * 8)
    for part in (ip, udp, bth, transport[BTH_BYTES:]):
        crc = zlib.crc32(part, crc)
    return struct.pack("<I", crc)


def ipv4_frame(
    src: bytes,
    dst: bytes,
    sport: int,
    transport: bytes,
    *,
    tos: int = 0b10,  # DSCP 0, ECT(0): DCQCN's data is ECN-capable
    ttl: int = 64,
    ident: int = 0,
) -> bytes:
    """An IPv4 packet to UDP port 4791 carrying `transport` (BTH onwards) and its ICRC.

    UDP checksum 0, as RoCEv2 sends it (the ICRC covers the payload); (our choice) DF set,
    IP identification 0.
    """
    udp_len = UDP_HEADER_BYTES + len(transport) + ICRC_BYTES
    total = IPV4_HEADER_BYTES + udp_len
    bare = _ipv4_header(src, dst, tos, ttl, ident, total, 0)
    ip = _ipv4_header(src, dst, tos, ttl, ident, total, _ip_checksum(bare))
    udp = struct.pack("!HHHH", sport, ROCEV2_UDP_PORT, udp_len, 0)
    return ip + udp + transport + icrc(ip, udp, transport)


def icrc_ok(packet: bytes) -> bool:
    """Whether an IPv4 RoCEv2 packet (IP header onwards, ICRC last) carries a valid ICRC."""
    ihl = (packet[0] & 0xF) * 4
    if ihl != IPV4_HEADER_BYTES or len(packet) < ihl + UDP_HEADER_BYTES + BTH_BYTES + ICRC_BYTES:
        return False
    ip, udp = packet[:ihl], packet[ihl : ihl + UDP_HEADER_BYTES]
    transport = packet[ihl + UDP_HEADER_BYTES : -ICRC_BYTES]
    return icrc(ip, udp, transport) == packet[-ICRC_BYTES:]
