"""PFC on the host side (`roce.pfc`, and its C copy `_roce.pause_replay`): how long an
802.1Qbb frame pauses which class, checked against hand-computed times and frames
built by scapy and by the software switch."""

from __future__ import annotations

from typing import Any

import pytest
from scapy.contrib.mac_control import MACControlClassBasedFlowControl
from scapy.layers.inet import IP
from scapy.layers.l2 import Ether

from emulation.roce.native import compiled
from emulation.roce.pfc import data_tos, dscp_for, pause_quanta, pause_seconds, reply_tos
from emulation.softswitch.packet import build_pfc_frame
from emulation.softswitch.tm_config import PfcConfig

PFC_DST = "01:80:c2:00:00:01"


def scapy_frame(enabled: dict[int, int]) -> bytes:
    fields: dict[str, Any] = {f"c{p}_enabled": 1 for p in enabled} | {
        f"c{p}_pause_time": q for p, q in enabled.items()
    }
    frame = Ether(dst=PFC_DST, src="02:00:00:00:00:aa") / MACControlClassBasedFlowControl(**fields)
    return bytes(frame)


def test_pause_time_is_quanta_times_512_bit_times_hand_computed() -> None:
    # 65535 quanta x 512 bits = 33,553,920 bits: 671.0784 us at 50 Gbit/s ...
    assert pause_seconds(65535, 50e9) == pytest.approx(671.0784e-6)
    # ... and 1000x that at S = 0.001 (50 Mbit/s): the scaled link's bit time
    assert pause_seconds(65535, 50e6) == pytest.approx(0.6710784)
    assert pause_seconds(1, 10e6) == pytest.approx(51.2e-6)  # one quantum at 10 Mbit/s
    assert pause_seconds(0, 50e6) == 0.0  # XON resumes at once
    with pytest.raises(ValueError, match="quanta"):
        pause_seconds(70000, 50e6)


def test_a_frame_pauses_only_the_classes_it_enables() -> None:
    frame = scapy_frame({3: 1000, 5: 7})
    assert pause_quanta(frame, 3) == 1000
    assert pause_quanta(frame, 5) == 7
    assert pause_quanta(frame, 0) is None  # its bit is clear
    assert pause_quanta(scapy_frame({3: 0}), 3) == 0  # XON
    # not PFC: an IPv4 frame, and the 802.3x global PAUSE opcode (0x0001)
    assert pause_quanta(bytes(Ether() / IP() / (b"x" * 60)), 3) is None
    global_pause = bytearray(frame)
    global_pause[14:16] = b"\x00\x01"
    assert pause_quanta(bytes(global_pause), 3) is None


def test_the_switch_s_pause_frames_name_the_class_roce_rides() -> None:
    priority = PfcConfig().priority  # one setting: the switch's pause names it ...
    frame = build_pfc_frame(bytes.fromhex("0200000000aa"), priority, 65535)
    assert pause_quanta(frame, priority) == 65535
    # ... and the hosts send RoCE data with the DSCP of that priority, ECT(0)
    assert dscp_for(priority) >> 3 == priority
    assert data_tos(priority) & 3 == 0b10
    assert dscp_for(3) == 26 and data_tos(3) == 0x6A  # ConnectX's default RoCE DSCP
    assert reply_tos() >> 2 == 48 and reply_tos() >> 5 != priority


def test_the_compiled_reader_agrees_with_the_python_rules() -> None:
    assert compiled is not None
    frames = [scapy_frame({3: q}) for q in (0, 1, 999, 65535)] + [scapy_frame({2: 5})]
    for frame in frames:
        for rate in (50e6, 10e6):
            want = pause_quanta(frame, 3)
            got = compiled.pause_replay(frame, 3, rate)
            if want is None:
                assert got is None
            else:
                assert got == (want, pytest.approx(pause_seconds(want, rate)))
