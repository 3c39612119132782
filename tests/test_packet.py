"""The hot-path parser and rewriters against scapy's view of the same bytes."""

from __future__ import annotations

import random

import pytest
from scapy.contrib.mac_control import MACControlClassBasedFlowControl
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Dot1Q, Ether

from emulation.target.packet import (
    ECN_CE,
    MALFORMED,
    NOT_IPV4,
    PFC_DST_MAC,
    build_pfc_frame,
    ipv4_header_checksum,
    ipv4_offset,
    parse_headers,
    parse_mac_control,
    parse_pfc,
    set_ce,
)


def _frames() -> list[bytes]:
    return [
        bytes(
            Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01")
            / IP(dst="10.0.0.2", tos=1)
            / UDP()
        ),
        bytes(
            Ether(dst="02:00:00:00:00:03")
            / IP(src="1.2.3.4", dst="5.6.7.8", tos=0xB6, ttl=3)
            / TCP()
        ),
        bytes(Ether() / IP(options=b"\x01\x01\x01\x00", tos=2) / UDP() / (b"x" * 1000)),
        bytes(Ether() / Dot1Q(vlan=7) / IP(tos=0x02, proto=17) / UDP()),
    ]


@pytest.mark.parametrize("frame", _frames())
def test_parse_matches_scapy(frame: bytes) -> None:
    ours = parse_headers(frame)
    theirs = Ether(frame)
    ip = theirs[IP]
    assert ours is not None
    assert ours.dst_mac == bytes.fromhex(theirs.dst.replace(":", ""))
    assert ours.src_mac == bytes.fromhex(theirs.src.replace(":", ""))
    assert ours.ip_tos == ip.tos
    assert ours.ecn == ip.tos & 3
    assert ours.ip_checksum == ip.chksum
    assert ours.ip_proto == ip.proto
    assert ours.ip_src == bytes(int(x) for x in ip.src.split("."))
    assert ours.ip_dst == bytes(int(x) for x in ip.dst.split("."))
    assert ours.ip_offset == len(frame) - len(bytes(ip))


@pytest.mark.parametrize("frame", _frames())
def test_set_ce_checksum_verified_by_scapy(frame: bytes) -> None:
    buf = bytearray(frame)
    offset = ipv4_offset(buf)
    set_ce(buf, offset)
    marked = Ether(bytes(buf))[IP]
    assert marked.tos & 3 == ECN_CE
    assert marked.tos >> 2 == Ether(frame)[IP].tos >> 2  # DSCP untouched
    # scapy recomputes the checksum of a header whose chksum field is deleted.
    recomputed = marked.copy()
    del recomputed.chksum
    assert IP(bytes(recomputed)).chksum == marked.chksum
    assert ipv4_header_checksum(bytes(buf)[offset : offset + marked.ihl * 4]) == marked.chksum


def test_set_ce_on_random_headers_keeps_checksum_valid() -> None:
    rng = random.Random(7)
    for _ in range(500):
        tos = rng.choice([1, 2]) | (rng.randrange(64) << 2)
        ip = IP(
            src=f"10.{rng.randrange(256)}.0.1",
            id=rng.randrange(65536),
            ttl=rng.randrange(1, 256),
            tos=tos,
        )
        buf = bytearray(bytes(Ether() / ip / UDP()))
        set_ce(buf, 14)
        assert ipv4_header_checksum(buf[14:34]) == int.from_bytes(buf[24:26], "big")


def test_non_ipv4_and_malformed() -> None:
    assert ipv4_offset(bytes(Ether(type=0x0806) / (b"\x00" * 28))) == NOT_IPV4
    assert ipv4_offset(b"\x00" * 13) == MALFORMED
    good = bytes(Ether() / IP() / UDP())
    assert ipv4_offset(good[:30]) == MALFORMED  # truncated IPv4 header
    bad_version = bytearray(good)
    bad_version[14] = 0x65
    assert ipv4_offset(bad_version) == MALFORMED
    bad_ihl = bytearray(good)
    bad_ihl[14] = 0x4F  # 60-byte header in a 42-byte frame
    assert ipv4_offset(bad_ihl) == MALFORMED
    assert parse_headers(b"\x01\x02") is None


def test_pfc_frame_matches_scapy() -> None:
    frame = build_pfc_frame(bytes.fromhex("020000000001"), priority=3, quanta=0xFFFF)
    assert len(frame) == 60
    theirs = Ether(frame)
    assert theirs.dst == ":".join(f"{b:02x}" for b in PFC_DST_MAC)
    assert theirs.type == 0x8808
    pfc = theirs[MACControlClassBasedFlowControl]
    assert pfc.c3_enabled == 1 and pfc.c0_enabled == 0
    assert pfc.c3_pause_time == 0xFFFF and pfc.c0_pause_time == 0
    assert parse_pfc(frame) == (0b1000, (0, 0, 0, 0xFFFF, 0, 0, 0, 0))

    built = bytes(
        Ether(src="02:00:00:00:00:09", dst="01:80:c2:00:00:01")
        / MACControlClassBasedFlowControl(
            c5_enabled=1, c5_pause_time=1234, c1_enabled=1, c1_pause_time=7
        )
    )
    assert parse_pfc(built) == (0b100010, (0, 7, 0, 0, 0, 1234, 0, 0))
    assert parse_pfc(bytes(Ether() / IP())) is None


def test_8023x_pause_reads_as_all_classes() -> None:
    from scapy.contrib.mac_control import MACControlPause

    frame = bytes(
        Ether(dst="01:80:c2:00:00:01", src="02:00:00:00:00:09") / MACControlPause(pause_time=300)
    )
    assert parse_pfc(frame) is None
    assert parse_mac_control(frame) == (0xFF, (300,) * 8)
