"""Strict-priority queue classes in the traffic manager, on a fake clock, hand-computed."""

from __future__ import annotations

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from emulation.softswitch.packet import build_pfc_frame
from emulation.softswitch.state import WredProfile
from emulation.softswitch.tm_config import (
    QUEUE_CLASSES,
    ClassSettings,
    ClassWred,
    PfcConfig,
    TmConfig,
    tm_config_from_dict,
    tm_config_to_dict,
)
from emulation.softswitch.traffic_manager import TrafficManager, Verdict
from topologies.errors import UserInputError

MAC_A = bytes.fromhex("020000000001")
MAC_B = bytes.fromhex("020000000002")
# 0.001 Gbps: 8 us a byte; an 80-byte frame (one cell) + 24 B overhead is 832 us.
RATE_GBPS = 0.001
FRAME_S = 104 * 8e-6


def frame(tag: int, tos: int = 0x02) -> bytes:
    """An 80-byte Ether/IPv4/UDP frame (one cell) told apart by its IP id."""
    head = Ether(dst=MAC_B.hex(":"), src=MAC_A.hex(":")) / IP(tos=tos, id=tag) / UDP()
    return bytes(head / (b"\x00" * (80 - len(head))))


def tag_of(data: bytes) -> int:
    return int.from_bytes(data[18:20], "big")


def manager(classes: dict[int, ClassSettings] | None = None, **tm: object) -> TrafficManager:
    config = TmConfig(
        default_rate_gbps=RATE_GBPS,
        pfc=PfcConfig(enabled=False),
        classes=classes or {},
        **tm,  # type: ignore[arg-type]
    )
    return TrafficManager(config, [1, 2, 3], {}, seed=1)


def drain(tm: TrafficManager, until: float) -> list[tuple[int, float]]:
    tm.advance(until)
    return [
        (tag_of(f), due) for (_p, f), due in zip(tm.transmitted, tm.transmitted_due, strict=True)
    ]


def test_a_high_class_frame_overtakes_queued_low_class_frames() -> None:
    tm = manager()
    tm.enqueue(frame(1), 1, 2, 0.0)  # class 0, idle port: on the wire at once
    tm.enqueue(frame(2), 1, 2, 0.0, queue_class=0)
    tm.enqueue(frame(3), 1, 2, 0.0, queue_class=0)
    tm.enqueue(frame(4), 1, 2, 0.0, queue_class=7)
    tm.enqueue(frame(5), 1, 2, 0.0, queue_class=3)
    out = drain(tm, 1.0)
    assert [t for t, _ in out] == [1, 4, 5, 2, 3]
    # Back to back: the k-th frame finishes at k serialisation times.
    assert [due for _, due in out] == pytest.approx([FRAME_S * k for k in range(1, 6)])
    cell = 2 * QUEUE_CLASSES
    assert tm.class_sent_packets[cell : cell + QUEUE_CLASSES] == [3, 0, 0, 1, 0, 0, 0, 1]
    assert tm.class_enqueued_packets[cell + 7] == 1
    assert tm.class_sent_bytes[cell] == 3 * 80


def test_a_low_class_starves_while_a_high_class_is_backlogged() -> None:
    tm = manager()
    tm.enqueue(frame(100), 1, 2, 0.0, queue_class=7)  # on the wire until FRAME_S
    tm.enqueue(frame(0), 1, 2, 0.0, queue_class=1)
    # A new class-6 frame arrives half way through each serialisation: always one
    # waiting when the transmitter frees, for 10 frames.
    for k in range(10):
        tm.enqueue(frame(101 + k), 3, 2, (k + 0.5) * FRAME_S, queue_class=6)
    out = drain(tm, 1.0)
    tags = [t for t, _ in out]
    assert tags == [100, *range(101, 111), 0]
    assert out[-1][1] == pytest.approx(12 * FRAME_S)  # the low frame left last


def test_marking_thresholds_are_per_class() -> None:
    # Class 7: marks every frame finding more than 5 of its cells queued (max_prob 0
    # leaves the linear part at 0). Class 0: the port's profile, 1..2 cells.
    tm = manager({7: ClassSettings(wred=ClassWred(min_cells=4, max_cells=5, max_prob_percent=0))})
    tm.wred[2] = WredProfile(min_cells=1, max_cells=2, max_prob_percent=0)  # type: ignore[index]
    tm.enqueue(frame(0), 1, 2, 0.0)  # on the wire: queues empty after it
    high = [tm.enqueue(frame(10 + k), 1, 2, 0.0, queue_class=7) for k in range(10)]
    low = [tm.enqueue(frame(30 + k), 1, 2, 0.0, queue_class=0) for k in range(5)]
    # Class 7 frames find 0..9 of class 7's cells: 6, 7, 8, 9 are above 5.
    assert high == [Verdict.QUEUED] * 6 + [Verdict.MARKED] * 4
    # Class 0 frames find 0..4 of class 0's cells (class 7's 10 do not count): 3, 4 > 2.
    assert low == [Verdict.QUEUED] * 3 + [Verdict.MARKED] * 2
    drain(tm, 1.0)
    base = 2 * QUEUE_CLASSES
    assert tm.class_marked_packets[base + 7] == 4
    assert tm.class_marked_packets[base + 0] == 2
    assert tm.marked_packets[2] == 6  # the port's total is the classes' sum


def test_queue_limit_is_per_class_and_drops_are_counted_per_class() -> None:
    tm = manager({5: ClassSettings(queue_cells=3)})
    tm.enqueue(frame(0), 1, 2, 0.0)
    verdicts = [tm.enqueue(frame(1 + k), 1, 2, 0.0, queue_class=5) for k in range(5)]
    assert verdicts == [Verdict.QUEUED] * 3 + [Verdict.TAIL_DROPPED] * 2
    # Class 0 still takes frames: its limit is the port's (20000 cells).
    assert tm.enqueue(frame(9), 1, 2, 0.0) == Verdict.QUEUED
    base = 2 * QUEUE_CLASSES
    assert tm.class_dropped_packets[base + 5] == 2
    assert tm.class_enqueued_packets[base + 5] == 3
    assert tm.tail_dropped_packets[2] == 2
    stats = tm.class_stats()
    assert stats["dropped_packets"] == {(2, 5): 2}
    assert stats["queued_cells"] == {(2, 5): 3, (2, 0): 1}


def test_pfc_pauses_only_the_class_over_its_threshold_naming_its_priority() -> None:
    config = TmConfig(
        default_rate_gbps=RATE_GBPS,
        pfc=PfcConfig(enabled=False, xoff_cells=2, xon_cells=1),
        classes={7: ClassSettings(pfc_enabled=True, xoff_cells=2, xon_cells=1, pfc_priority=7)},
    )
    tm = TrafficManager(config, [1, 2], {}, seed=1, port_macs={1: MAC_A, 2: MAC_B})
    tm.enqueue(frame(0), 1, 2, 0.0)
    for k in range(5):  # class 0 (PFC off): 5 cells from port 1, no pause
        tm.enqueue(frame(1 + k), 1, 2, 0.0)
    assert tm.control == []
    tm.enqueue(frame(10), 1, 2, 0.0, queue_class=7)
    tm.enqueue(frame(11), 1, 2, 0.0, queue_class=7)
    assert tm.control == []  # 2 cells: not above XOFF
    tm.enqueue(frame(12), 1, 2, 0.0, queue_class=7)
    assert tm.control == [(1, build_pfc_frame(MAC_A, 7, 0xFFFF))]
    assert tm.ingress_class_paused[1 * QUEUE_CLASSES + 7]
    # Class 7 drains first: after two of its frames left (at 2 and 3 frame times) it
    # holds 1 cell <= XON, and the resume names priority 7.
    tm.advance(3 * FRAME_S)
    assert tm.control[-1] == (1, build_pfc_frame(MAC_A, 7, 0))
    assert not tm.ingress_paused[1]


def test_without_classes_the_file_form_is_unchanged_and_classes_round_trip() -> None:
    assert "classes" not in tm_config_to_dict(TmConfig())
    data = {
        "classes": {
            "7": {
                "queue_cells": 2000,
                "wred": {"min_cells": 100, "max_cells": 400, "max_prob_percent": 20},
                "pfc": {"enabled": True, "xoff_cells": 1000, "priority": 7},
            }
        }
    }
    tm = tm_config_from_dict(data)
    seven = tm.classes[7]
    assert seven == ClassSettings(2000, ClassWred(100, 400, 20), True, 1000, 750, 7)
    assert tm.class_queue_cells(3, 7) == 2000 and tm.class_queue_cells(3, 6) == 20_000
    assert tm.class_pfc(6) == (True, 4000, 3000, 3)  # the `pfc` block's
    assert tm_config_from_dict(tm_config_to_dict(tm)) == tm
    assert "class 7: queue 2000 cells" in tm.describe()


@pytest.mark.parametrize(
    ("classes", "message"),
    [
        ({"8": {}}, "class 8 must be 0..7"),
        ({"1": {"queu_cells": 3}}, "queue_cells"),
        ({"1": {"wred": {"min_cells": 5, "max_cells": 5, "max_prob_percent": 1}}}, "exceed"),
        ({"1": {"wred": {"min_cells": 5}}}, "missing field 'max_cells'"),
        ({"1": {"pfc": {"xoff_cells": 10, "xon_cells": 10}}}, "below xoff_cells"),
        ({"1": {"pfc": {"priority": 9}}}, "priority (9) must be 0..7"),
        ([1], "must be a mapping"),
    ],
)
def test_bad_class_settings_get_one_line_naming_them(classes: object, message: str) -> None:
    with pytest.raises(UserInputError, match=None) as error:
        tm_config_from_dict({"classes": classes}, source="tm.yaml")
    assert message in str(error.value) and "tm.yaml" in str(error.value)
    assert "\n" not in str(error.value)
