"""The hot-path parser and rewriters against scapy's view of the same bytes."""

from __future__ import annotations

import random
import struct

import pytest
from scapy.contrib.mac_control import MACControlClassBasedFlowControl
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Dot1AD, Dot1Q, Ether

from emulation.softswitch.packet import (
    ECN_CE,
    MALFORMED,
    NOT_IPV4,
    PFC_DST_MAC,
    build_pfc_frame,
    insert_vlan_tag,
    ipv4_offset,
    parse_mac_control,
    parse_pfc,
    set_ce,
)
from emulation.softswitch.ports import (
    PACKET_AUXDATA,
    SOL_PACKET,
    TP_STATUS_USER,
    TP_STATUS_VLAN_TPID_VALID,
    TP_STATUS_VLAN_VALID,
    RxRing,
    restore_vlan_tag,
)
from tests.helpers.frames import ipv4_header_checksum, parse_headers


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


# --- VLAN tags the kernel stripped ------------------------------------------------

TAGGED = [
    Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01")
    / Dot1Q(prio=3, vlan=42)
    / IP(tos=2)
    / UDP(),
    Ether() / Dot1Q(prio=7, dei=1, vlan=4095) / IP() / UDP() / (b"x" * 1400),
    Ether() / Dot1Q(prio=5, vlan=0) / IP() / UDP(),  # priority-tagged (VID 0): a PFC class
    Ether() / Dot1AD(prio=1, vlan=100) / Dot1Q(prio=2, vlan=7) / IP() / UDP(),  # QinQ
]


def _stripped(packet: Ether) -> tuple[bytes, int, int]:
    """What the kernel hands over: the frame without its outer tag, TPID, TCI."""
    wire = bytes(packet)
    tpid, tci = int.from_bytes(wire[12:14], "big"), int.from_bytes(wire[14:16], "big")
    return wire[:12] + wire[16:], tpid, tci


@pytest.mark.parametrize("packet", TAGGED, ids=["prio3-vid42", "dei-vid4095", "vid0", "qinq"])
def test_insert_vlan_tag_rebuilds_scapys_frame(packet: Ether) -> None:
    stripped, tpid, tci = _stripped(packet)
    again = insert_vlan_tag(stripped, tpid, tci)
    assert again == bytes(packet)
    outer = packet.payload
    theirs = Ether(again).payload
    assert (theirs.prio, theirs.dei, theirs.vlan) == (outer.prio, outer.dei, outer.vlan)
    assert bytes(Ether(again)[IP]) == bytes(packet[IP])
    assert ipv4_offset(stripped) in (14, 18)  # untagged once stripped (QinQ: inner tag left)


def _auxdata(status: int, tci: int = 0, tpid: int = 0, length: int = 60) -> bytes:
    return struct.pack("=IIIHHHH", status, length, length, 0, 0, tci, tpid)


@pytest.mark.parametrize("packet", TAGGED, ids=["prio3-vid42", "dei-vid4095", "vid0", "qinq"])
def test_recvmsg_auxdata_tag_is_put_back(packet: Ether) -> None:
    stripped, tpid, tci = _stripped(packet)
    status = TP_STATUS_USER | TP_STATUS_VLAN_VALID | TP_STATUS_VLAN_TPID_VALID
    timestamp = (1, 35, bytes(16))  # SOL_SOCKET SCM_TIMESTAMPNS comes first
    ancillary = [timestamp, (SOL_PACKET, PACKET_AUXDATA, _auxdata(status, tci, tpid))]
    assert restore_vlan_tag(ancillary, stripped) == bytes(packet)
    # Old kernels: no TPID_VALID bit, the TPID is 802.1Q's.
    if tpid == 0x8100:
        old = [(SOL_PACKET, PACKET_AUXDATA, _auxdata(TP_STATUS_VLAN_VALID, tci, 0))]
        assert restore_vlan_tag(old, stripped) == bytes(packet)


def test_recvmsg_without_a_tag_leaves_the_frame_alone() -> None:
    frame = bytes(Ether() / IP() / UDP())
    assert restore_vlan_tag([], frame) is frame
    untagged = [(SOL_PACKET, PACKET_AUXDATA, _auxdata(TP_STATUS_USER, tci=0x1234, tpid=0x8100))]
    assert restore_vlan_tag(untagged, frame) is frame


def test_ring_slots_with_a_stripped_tag_come_back_tagged() -> None:
    """An RxRing over fake memory laid out as the kernel's tpacket2 slots."""
    slot = 2048
    packets = [TAGGED[0], Ether() / IP() / UDP(), TAGGED[3]]
    memory = bytearray(slot * 4)
    for i, packet in enumerate(packets):
        wire = bytes(packet)
        if wire[12:14] in (b"\x81\x00", b"\x88\xa8"):
            frame, tpid, tci = _stripped(packet)
            status = TP_STATUS_USER | TP_STATUS_VLAN_VALID | TP_STATUS_VLAN_TPID_VALID
        else:
            frame, tpid, tci, status = wire, 0, 0, TP_STATUS_USER
        mac = 80
        header = struct.pack(
            "=IIIHHIIHH", status, len(frame), len(frame), mac, mac + 14, 7, 5, tci, tpid
        )
        memory[i * slot : i * slot + len(header)] = header
        memory[i * slot + mac : i * slot + mac + len(frame)] = frame
    ring = RxRing.__new__(RxRing)
    ring.memory = memory  # type: ignore[assignment]
    ring.slot_bytes, ring.slots, ring.next_slot, ring.truncated = slot, 4, 0, 0
    got = ring.receive_stamped(8)
    assert [frame for _stamp, frame in got] == [bytes(p) for p in packets]
    assert [stamp for stamp, _frame in got] == [pytest.approx(7 + 5e-9)] * 3
    assert all(memory[i * slot] == 0 for i in range(3))  # handed back to the kernel
    assert ring.truncated == 0
