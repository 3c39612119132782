"""Which bytes of a frame does the software target read and rewrite?

The hot path touches at most: the destination MAC (forwarding key), the
EtherType, the IPv4 version/IHL byte, and - only when WRED decides to mark -
the ECN bits and header checksum. Parsing is offset arithmetic on the bytes
the socket returned; no objects per packet. scapy declares the same headers
and the tests check these functions against it.
"""

from __future__ import annotations

import struct

ETH_HEADER_BYTES = 14
ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_VLAN = 0x8100
ETHERTYPE_MAC_CONTROL = 0x8808
PFC_OPCODE = 0x0101  # IEEE 802.1Qbb class-based flow control
PAUSE_OPCODE = 0x0001  # IEEE 802.3x PAUSE: one time for the whole link
PFC_DST_MAC = bytes.fromhex("0180c2000001")
MIN_FRAME_BYTES = 60  # without FCS

ECN_NOT_ECT = 0
ECN_ECT1 = 1
ECN_ECT0 = 2
ECN_CE = 3

# Offset of the IPv4 header for a frame, or one of these:
NOT_IPV4 = -1
MALFORMED = -2

_PFC_BODY = struct.Struct("!HH8H")  # opcode, class-enable vector, 8 pause times
_ETH_HEADER = struct.Struct("!6s6sH")
_VLAN_TAG = struct.Struct("!HH")  # TPID, TCI (PCP 3 bits, DEI 1 bit, VID 12 bits)
VLAN_TAG_BYTES = _VLAN_TAG.size


def ipv4_offset(frame: bytes | bytearray) -> int:
    """Offset of a well-formed IPv4 header (after at most one VLAN tag).

    Returns NOT_IPV4 for other EtherTypes and MALFORMED for frames too short
    for their headers or an IPv4 header with a bad version or length.
    """
    n = len(frame)
    if n < ETH_HEADER_BYTES:
        return MALFORMED
    ethertype = (frame[12] << 8) | frame[13]
    offset = ETH_HEADER_BYTES
    if ethertype == ETHERTYPE_VLAN:
        if n < ETH_HEADER_BYTES + 4:
            return MALFORMED
        ethertype = (frame[16] << 8) | frame[17]
        offset = ETH_HEADER_BYTES + 4
    if ethertype != ETHERTYPE_IPV4:
        return NOT_IPV4
    if n < offset + 20:
        return MALFORMED
    version_ihl = frame[offset]
    ihl = version_ihl & 0x0F
    if version_ihl >> 4 != 4 or ihl < 5 or n < offset + 4 * ihl:
        return MALFORMED
    total_length = (frame[offset + 2] << 8) | frame[offset + 3]
    if total_length < 4 * ihl:
        return MALFORMED
    return offset


def insert_vlan_tag(frame: bytes | bytearray, tpid: int, tci: int) -> bytes:
    """`frame` with an 802.1Q tag (TPID, then PCP/DEI/VID as `tci`) after the MACs.

    The kernel hands AF_PACKET readers received frames with their outer tag
    stripped into metadata; this puts it back where it was on the wire.
    """
    return bytes(frame[:12]) + _VLAN_TAG.pack(tpid, tci) + bytes(frame[12:])


def set_ce(frame: bytearray, ip_offset: int) -> None:
    """Set ECN to CE and patch the header checksum incrementally (RFC 1624, eqn. 3).

    HC' = ~(~HC + ~m + m') over the 16-bit word holding version/IHL and TOS.
    """
    word_old = (frame[ip_offset] << 8) | frame[ip_offset + 1]
    word_new = word_old | ECN_CE
    if word_new == word_old:
        return
    checksum = (frame[ip_offset + 10] << 8) | frame[ip_offset + 11]
    total = (~checksum & 0xFFFF) + (~word_old & 0xFFFF) + word_new
    total = (total & 0xFFFF) + (total >> 16)
    total = (total & 0xFFFF) + (total >> 16)
    checksum = ~total & 0xFFFF
    frame[ip_offset + 1] = word_new & 0xFF
    frame[ip_offset + 10] = checksum >> 8
    frame[ip_offset + 11] = checksum & 0xFF


def is_pfc(frame: bytes | bytearray) -> bool:
    """A MAC-control frame carrying a class-based pause (never forwarded)."""
    return (
        len(frame) >= ETH_HEADER_BYTES + _PFC_BODY.size
        and frame[12] == 0x88
        and frame[13] == 0x08
        and frame[14] == 0x01
        and frame[15] == 0x01
    )


def parse_pfc(frame: bytes | bytearray) -> tuple[int, tuple[int, ...]] | None:
    """(class-enable vector, 8 pause times in quanta) of a PFC frame, else None."""
    if not is_pfc(frame):
        return None
    _opcode, enable, *times = _PFC_BODY.unpack_from(frame, ETH_HEADER_BYTES)
    return enable, tuple(times)


def parse_mac_control(frame: bytes | bytearray) -> tuple[int, tuple[int, ...]] | None:
    """Pause request of a PFC frame, or of an 802.3x PAUSE read as all eight classes."""
    pfc = parse_pfc(frame)
    if pfc is not None:
        return pfc
    if (
        len(frame) >= ETH_HEADER_BYTES + 4
        and frame[12] == 0x88
        and frame[13] == 0x08
        and frame[14] == 0x00
        and frame[15] == 0x01
    ):
        quanta = (frame[16] << 8) | frame[17]
        return 0xFF, (quanta,) * 8
    return None


def build_pfc_frame(src_mac: bytes, priority: int, quanta: int) -> bytes:
    """An 802.1Qbb frame pausing one priority for `quanta` (0 = resume), padded to 60 B."""
    times = [0] * 8
    times[priority] = quanta
    frame = _ETH_HEADER.pack(PFC_DST_MAC, src_mac, ETHERTYPE_MAC_CONTROL) + _PFC_BODY.pack(
        PFC_OPCODE, 1 << priority, *times
    )
    return frame + bytes(MIN_FRAME_BYTES - len(frame))
