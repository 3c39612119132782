"""RoCEv2 headers: our struct packing against scapy's BTH/AETH/CNP on the same bytes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scapy.compat import raw
from scapy.contrib.roce import AETH, BTH, cnp
from scapy.layers.inet import IP, UDP

from emulation.roce.bth import (
    AETH_BYTES,
    BTH_BYTES,
    CNP_PAD_BYTES,
    ICRC_BYTES,
    ROCEV2_UDP_PORT,
    Aeth,
    Bth,
    NakCode,
    Opcode,
    cnp_payload,
    icrc_ok,
    ipv4_frame,
)

SRC, DST = bytes([10, 0, 1, 2]), bytes([10, 0, 3, 4])

bths = st.builds(
    Bth,
    opcode=st.sampled_from(list(Opcode)),
    dest_qp=st.integers(0, 2**24 - 1),
    psn=st.integers(0, 2**24 - 1),
    ack_request=st.booleans(),
    pkey=st.integers(0, 0xFFFF),
    solicited=st.booleans(),
    migreq=st.booleans(),
    pad_count=st.integers(0, 3),
    version=st.integers(0, 15),
    fecn=st.booleans(),
    becn=st.booleans(),
)


def _scapy_bth(b: Bth) -> BTH:
    return BTH(
        opcode=b.opcode,
        solicited=b.solicited,
        migreq=b.migreq,
        padcount=b.pad_count,
        version=b.version,
        pkey=b.pkey,
        fecn=b.fecn,
        becn=b.becn,
        dqpn=b.dest_qp,
        ackreq=b.ack_request,
        psn=b.psn,
        icrc=0,
    )


@given(bths)
def test_bth_bytes_are_scapys(b: Bth) -> None:
    packed = b.pack()
    assert len(packed) == BTH_BYTES
    # scapy appends the 4-byte ICRC field to its BTH; the 12 header bytes come first.
    assert raw(_scapy_bth(b))[:BTH_BYTES] == packed
    parsed = BTH(packed + bytes(ICRC_BYTES))
    assert (parsed.opcode, parsed.dqpn, parsed.psn, parsed.ackreq, parsed.pkey) == (
        b.opcode,
        b.dest_qp,
        b.psn,
        b.ack_request,
        b.pkey,
    )
    assert (parsed.fecn, parsed.becn, parsed.padcount, parsed.version) == (
        b.fecn,
        b.becn,
        b.pad_count,
        b.version,
    )
    assert Bth.parse(packed) == b


def test_bth_hand_checked_bytes() -> None:
    # opcode 0x0a (RC RDMA WRITE ONLY), P_Key 0xffff, BECN, QP 0x000abc, A bit, PSN 0xfffffe
    b = Bth(Opcode.RC_RDMA_WRITE_ONLY, 0xABC, 0xFFFFFE, ack_request=True, becn=True)
    assert b.pack().hex() == "0a00ffff40000abc80fffffe"


def test_bth_field_out_of_range_names_the_field() -> None:
    with pytest.raises(ValueError, match="psn=16777216"):
        Bth(Opcode.RC_SEND_ONLY, 1, 1 << 24)
    with pytest.raises(ValueError, match="a BTH needs 12 bytes, got 3"):
        Bth.parse(b"abc")


@pytest.mark.parametrize(
    ("aeth", "syndrome"),
    [
        (Aeth.ack(msn=0x123456), 0x1F),
        (Aeth.nak(NakCode.PSN_SEQUENCE_ERROR, msn=7), 0x60),
        (Aeth.nak(NakCode.REMOTE_ACCESS_ERROR), 0x62),
    ],
)
def test_aeth_bytes_are_scapys(aeth: Aeth, syndrome: int) -> None:
    packed = aeth.pack()
    assert len(packed) == AETH_BYTES
    assert raw(AETH(syndrome=syndrome, msn=aeth.msn)) == packed
    assert Aeth.parse(packed) == aeth
    ack = BTH(Bth(Opcode.RC_ACKNOWLEDGE, 5, 9).pack() + packed + bytes(ICRC_BYTES))
    assert ack[AETH].syndrome == syndrome and ack[AETH].msn == aeth.msn


def test_nak_and_ack_are_told_apart() -> None:
    nak = Aeth.parse(Aeth.nak(NakCode.PSN_SEQUENCE_ERROR).pack())
    assert nak.is_nak and not nak.is_ack
    assert nak.nak_code is NakCode.PSN_SEQUENCE_ERROR
    with pytest.raises(ValueError, match="not a NAK"):
        _ = Aeth.ack().nak_code


def test_cnp_is_scapys_cnp() -> None:
    payload = cnp_payload(0x00D1E)
    assert len(payload) == BTH_BYTES + CNP_PAD_BYTES
    theirs = raw(cnp(0x00D1E))[: BTH_BYTES + CNP_PAD_BYTES]
    assert payload == theirs
    parsed = Bth.parse(payload)
    assert parsed.opcode == 0x81 and parsed.becn and parsed.dest_qp == 0xD1E


def _scapy_frame(transport_layer: BTH, tos: int = 2) -> bytes:
    pkt = (
        IP(src="10.0.1.2", dst="10.0.3.4", flags="DF", id=0, tos=tos, ttl=64)
        / UDP(sport=49153, dport=ROCEV2_UDP_PORT, chksum=0)
        / transport_layer
    )
    return raw(pkt)


def test_data_frame_with_icrc_is_byte_for_byte_scapys() -> None:
    bth = Bth(Opcode.RC_SEND_ONLY, 0x12, 77, ack_request=True)
    payload = bytes(range(200))
    ours = ipv4_frame(SRC, DST, 49153, bth.pack() + payload)
    theirs = _scapy_frame(BTH(opcode=4, dqpn=0x12, psn=77, ackreq=1) / payload)
    assert ours == theirs
    assert icrc_ok(ours)
    # scapy reads our frame as RoCEv2: the UDP port binds the BTH layer.
    parsed = IP(ours)
    assert parsed[BTH].psn == 77 and parsed[BTH].dqpn == 0x12


def test_cnp_frame_with_icrc_is_scapys() -> None:
    ours = ipv4_frame(SRC, DST, 49153, cnp_payload(0x42))
    assert ours == _scapy_frame(cnp(0x42))
    assert icrc_ok(ours)


def test_icrc_survives_a_ce_mark_and_ttl_but_not_payload_change() -> None:
    frame = bytearray(
        ipv4_frame(SRC, DST, 49153, Bth(Opcode.RC_SEND_ONLY, 1, 2).pack() + b"x" * 64)
    )
    frame[1] |= 0b11  # the switch marks CE
    frame[8] -= 1  # and decrements the TTL (the IP checksum would change: masked too)
    frame[10:12] = b"\x12\x34"
    assert icrc_ok(bytes(frame))
    frame[-ICRC_BYTES - 1] ^= 1  # one payload bit flips
    assert not icrc_ok(bytes(frame))
