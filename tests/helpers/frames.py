"""A frame's fields and its IPv4 checksum read whole, to check the target's byte offsets.

The target itself never parses a frame into fields (`emulation.softswitch.
packet` reads offsets on the hot path); tests compare what sits at those
offsets with scapy's view, and a rewritten header's checksum with one
computed from scratch.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from emulation.softswitch.packet import ETH_HEADER_BYTES, ETHERTYPE_VLAN, ipv4_offset

_ETH_HEADER = struct.Struct("!6s6sH")


@dataclass(frozen=True)
class FrameHeaders:
    """The fields the target reads."""

    dst_mac: bytes
    src_mac: bytes
    ethertype: int
    ip_offset: int  # NOT_IPV4 / MALFORMED or the header offset
    ip_tos: int | None = None
    ip_checksum: int | None = None
    ip_src: bytes | None = None
    ip_dst: bytes | None = None
    ip_proto: int | None = None

    @property
    def ecn(self) -> int | None:
        return None if self.ip_tos is None else self.ip_tos & 0x03


def parse_headers(frame: bytes | bytearray) -> FrameHeaders | None:
    """Ethernet (+IPv4) fields of a frame; None when it is too short for Ethernet."""
    if len(frame) < ETH_HEADER_BYTES:
        return None
    view = memoryview(frame)
    dst, src, ethertype = _ETH_HEADER.unpack_from(view, 0)
    offset = ipv4_offset(frame)
    if ethertype == ETHERTYPE_VLAN and len(frame) >= ETH_HEADER_BYTES + 4:
        (ethertype,) = struct.unpack_from("!H", view, 16)
    if offset < 0:
        return FrameHeaders(dst, src, ethertype, offset)
    tos = view[offset + 1]
    proto = view[offset + 9]
    (checksum,) = struct.unpack_from("!H", view, offset + 10)
    return FrameHeaders(
        dst,
        src,
        ethertype,
        offset,
        ip_tos=tos,
        ip_checksum=checksum,
        ip_src=bytes(view[offset + 12 : offset + 16]),
        ip_dst=bytes(view[offset + 16 : offset + 20]),
        ip_proto=proto,
    )


def ipv4_header_checksum(header: bytes | bytearray) -> int:
    """Full one's-complement checksum of an IPv4 header (checksum field taken as 0)."""
    data = bytes(header[:10]) + b"\x00\x00" + bytes(header[12:])
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF
