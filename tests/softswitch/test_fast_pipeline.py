"""The compiled switch program against the Python reference, frame for frame.

Same frames at the same times through `ReferenceSwitchProgram` and
`FastSwitchProgram`: the same frames must leave on the same ports at the same
scheduled times, the same PFC frames must be sent, and every counter and
statistic must agree. The traffic is chosen to reach every rule: three-hop
paths over two loopback cables, two senders into one slow port (queues,
WRED marks, non-ECT WRED drops, tail drops, PFC toward hosts and across a
cable), pauses from hosts, VLAN tags, malformed frames, misses and entries
naming a port the switch lacks, frames of two jobs (found by destination and
by source socket) and of none, and IPv4 fragments; and, with queue-class entries
and per-class settings, frames of several DSCPs and of a flow with its own class.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable

import numpy as np
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1Q, Ether

from controlplane.p4names import COUNTERS, ECN_MARKED, JOB_ECN_MARKED, JOB_TX, PORT_TX
from emulation.fabric.netns import NetnsLab
from emulation.softswitch.fast_pipeline import FastSwitchProgram, available
from emulation.softswitch.packet import build_pfc_frame
from emulation.softswitch.port_stats import STAT_NAMES
from emulation.softswitch.reference_program import ReferenceSwitchProgram, job_class
from emulation.softswitch.shared_counters import SharedCounters, checked_counter_names
from emulation.softswitch.state import (
    JOB_CLASSES,
    DataplaneState,
    WredProfile,
    flow_key,
    socket_key,
)
from emulation.softswitch.switch import SoftwareSwitch
from emulation.softswitch.switch_program import SwitchProgram
from emulation.softswitch.tm_config import (
    ClassSettings,
    ClassWred,
    LoopbackCable,
    PfcConfig,
    PortSettings,
    TmConfig,
)
from tests.helpers.hosts import make_hosts, udp
from tests.helpers.waiting import wait_for

A, B, C, D = (bytes.fromhex(h) for h in ("02000000000a", "02000000000b", "02000000000c", "0d"))
MAC_TEXT = {A: "02:00:00:00:00:0a", B: "02:00:00:00:00:0b", C: "02:00:00:00:00:0c"}


def config(pfc: bool) -> TmConfig:
    return TmConfig(
        default_rate_gbps=0.1,
        default_queue_cells=400,
        buffer_cells=900,
        ports={10: PortSettings(rate_gbps=0.02, queue_cells=120), 2: PortSettings(rate_gbps=0.05)},
        pfc=PfcConfig(enabled=pfc, xoff_cells=60, xon_cells=30, pause_quanta=200),
        loopback_cables=(LoopbackCable(10, 11, 2.0), LoopbackCable(12, 13, 0.5)),
    )


def state() -> DataplaneState:
    s = DataplaneState()
    s.forward.update(
        {
            (1, A): 10,  # 1 -> cable 10/11 -> cable 12/13 -> 2
            (3, A): 10,
            (11, A): 12,
            (13, A): 2,
            (2, B): 13,  # and back: 2 -> 13/12 -> 11/10 -> 1
            (12, B): 11,
            (10, B): 1,
            (1, C): 99,  # a port the switch does not have
        }
    )
    s.wred.update({10: WredProfile(8, 40, 60), 2: WredProfile(4, 20, 100)})
    s.job_by_dst[socket_key(0x0A000002, 2)] = 3  # to 10.0.0.2:2
    s.job_by_src[socket_key(0x0A000001, 5)] = 7  # from 10.0.0.1:5 (unless to 10.0.0.2:2)
    s.job_by_src[socket_key(0x0A000001, 1)] = 9  # shadowed by the destination's entry
    return s


def frame(rng: random.Random) -> bytes:
    kind = rng.random()
    if kind < 0.03:
        return bytes(rng.randrange(1, 14))  # shorter than Ethernet
    if kind < 0.05:
        return bytes.fromhex("02000000000a0200000000010800") + b"\x44" + bytes(40)  # IHL 4
    if kind < 0.07:
        return build_pfc_frame(bytes(6), 3, rng.choice((0, 50, 300)))
    if kind < 0.08:  # 802.3x PAUSE, then another MAC-control opcode
        return bytes.fromhex("0180c20000010200000000018808" + "0001" + "0040") + bytes(42)
    if kind < 0.09:
        return bytes.fromhex("0180c20000010200000000018808" + "0002") + bytes(44)
    dst = rng.choice((A, A, A, B, B, C, D + bytes(5)))
    tos = rng.choice((0, 1, 2, 2, 3))
    size = rng.choice((60, 200, 800, 1500))
    ports = rng.choice(((1, 2), (5, 9), (1, 9), (5, 2)))
    return udp_frame(dst, tos, size, rng.random() < 0.15, ports, rng.random() < 0.05)


@functools.cache
def udp_frame(
    dst: bytes, tos: int, size: int, tagged: bool, ports: tuple[int, int] = (1, 2),
    fragment: bool = False,
) -> bytes:  # fmt: skip
    head = Ether(dst=MAC_TEXT.get(dst, "0d:00:00:00:00:00"), src="02:00:00:00:00:01")
    if tagged:
        head = head / Dot1Q(vlan=7, prio=3)
    ip = IP(src="10.0.0.1", dst="10.0.0.2", tos=tos, frag=100 if fragment else 0)
    packet = head / ip / UDP(sport=ports[0], dport=ports[1])
    return bytes(packet / bytes(max(0, size - len(packet))))


def run(
    program: SwitchProgram, seed: int, make_frame: Callable[[random.Random], bytes] = frame
) -> tuple[list, list, float]:
    """Feed seeded traffic; returns (departures, PFC frames sent, final virtual time)."""
    rng = random.Random(seed)
    tm = program.tm
    departures: list[tuple[int, bytes, float]] = []
    control: list[tuple[int, bytes]] = []
    now = 0.0
    for _step in range(400):
        for _ in range(rng.randrange(0, 12)):
            port = rng.choice((1, 1, 3, 3, 2))
            # Stamps slightly out of order and in the past, as a late loop reads them.
            program.receive(port, make_frame(rng), now - rng.random() * 2e-4)
        now += rng.expovariate(1 / 3e-4)
        program.advance(now)
        departures += [
            (p, f, due) for (p, f), due in zip(tm.transmitted, tm.transmitted_due, strict=True)
        ]
        control += list(tm.control)
        tm.transmitted.clear()
        tm.transmitted_due.clear()
        tm.control.clear()
        nxt = tm.next_event_time()
        assert nxt is None or nxt > now - 1e-9
    program.advance(now + 1.0)  # drain everything
    departures += [
        (p, f, due) for (p, f), due in zip(tm.transmitted, tm.transmitted_due, strict=True)
    ]
    control += list(tm.control)
    return departures, control, tm.now


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("pfc", [True, False])
def test_fast_pipeline_matches_the_reference(seed: int, pfc: bool) -> None:
    assert available(), "the compiled packet path is not built: run scripts/setup.sh"
    reference_state, fast_state = state(), state()
    reference = ReferenceSwitchProgram(reference_state, config(pfc), [1, 2, 3], seed=seed)
    fast = FastSwitchProgram(fast_state, config(pfc), [1, 2, 3], seed=seed)
    expected = run(reference, seed)
    got = run(fast, seed)
    assert len(expected[0]) > 200
    assert got[0] == expected[0]  # frames (CE marks included), ports and departure times
    assert got[1] == expected[1]  # PFC frames toward hosts
    assert got[2] == expected[2]
    stats = reference.port_stats()
    assert fast.port_stats() == stats
    # Every rule was reached, so the comparison means something.
    for name in ("ecn_marked", "wred_dropped", "tail_dropped", "forward_misses", "malformed"):
        assert stats[name], name
    assert stats["to_unknown_port"] and stats["pfc_received"] and stats["mac_control_ignored"]
    if pfc:
        assert stats["pfc_pauses_sent"] and stats["pfc_resumes_sent"]
        assert any(p in (10, 11, 12, 13) for p in stats["pfc_pauses_sent"])  # across a cable
        assert stats["pfc_paused_us"]  # the paused time, to the microsecond in both
    assert {(p, f) for p, f, _ in got[0]} and {p for p, _, _ in got[0]} == {1, 2}
    reference.flush_counters()
    fast.flush_counters()
    assert set(fast_state.counters) == set(reference_state.counters) == set(COUNTERS)
    for name, array in reference_state.counters.items():
        np.testing.assert_array_equal(fast_state.counters[name], array, err_msg=name)
    assert set(fast.port_stats()) == set(STAT_NAMES)
    # Per job: each port's classes add up to the port, the two jobs and no job all sent,
    # and marks were counted per job too.
    job_tx = reference_state.counters[JOB_TX].reshape(-1, JOB_CLASSES, 2)
    np.testing.assert_array_equal(job_tx.sum(axis=1), reference_state.counters[PORT_TX])
    job_marked = reference_state.counters[JOB_ECN_MARKED].reshape(-1, JOB_CLASSES, 2)
    np.testing.assert_array_equal(job_marked.sum(axis=1), reference_state.counters[ECN_MARKED])
    sent_by_class = job_tx[:, :, 0].sum(axis=0)
    assert sent_by_class[0] and sent_by_class[3] and sent_by_class[7]
    assert set(np.flatnonzero(sent_by_class)) == {0, 3, 7, 9}
    assert job_marked[:, 3, 0].sum() and job_marked[:, 7, 0].sum()
    # The deepest queue each port's frames found, as the traffic manager saw it.
    deepest = [reference.tm.max_depth_cells[p] for p in range(512)]
    assert fast.max_depth_cells.tolist() == deepest
    assert deepest[10] > 40 and deepest[2] > 20 and deepest[10] <= 120


DSCPS = (0, 10, 26, 46)  # no entry, class 2, class 5, class 7


def classed_frame(rng: random.Random) -> bytes:
    """Half the mix above, half UDP frames of several DSCPs (any ECN), some of the flow
    10.0.0.1:7 -> 10.0.0.2:7 whose entry puts it in class 1 whatever its DSCP."""
    if rng.random() < 0.5:
        return frame(rng)
    tos = rng.choice(DSCPS) << 2 | rng.choice((0, 1, 2, 2, 3))
    ports = rng.choice(((1, 2), (7, 7), (5, 9)))
    size = rng.choice((60, 200, 800, 1500))
    return udp_frame(rng.choice((A, A, B)), tos, size, False, ports, rng.random() < 0.05)


def classed_config(pfc: bool) -> TmConfig:
    base = config(pfc)
    classes = {
        7: ClassSettings(queue_cells=60, wred=ClassWred(2, 10, 50)),
        5: ClassSettings(xoff_cells=4, xon_cells=2, pfc_priority=5),
        1: ClassSettings(pfc_enabled=False),
    }
    return TmConfig(
        default_rate_gbps=base.default_rate_gbps,
        default_queue_cells=base.default_queue_cells,
        buffer_cells=base.buffer_cells,
        ports=base.ports,
        pfc=base.pfc,
        loopback_cables=base.loopback_cables,
        classes=classes,
    )


def classed_state() -> DataplaneState:
    s = state()
    s.queue_by_dscp.update({10: 2, 26: 5, 46: 7})
    s.queue_by_flow[flow_key(0x0A000001, 0x0A000002, 17, 7, 7)] = 1
    return s


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("pfc", [True, False])
def test_fast_pipeline_matches_the_reference_with_queue_classes(seed: int, pfc: bool) -> None:
    assert available(), "the compiled packet path is not built: run scripts/setup.sh"
    reference_state, fast_state = classed_state(), classed_state()
    tm = classed_config(pfc)
    reference_shared = SharedCounters.create(checked_counter_names())
    fast_shared = SharedCounters.create(checked_counter_names())
    reference = ReferenceSwitchProgram(
        reference_state, tm, [1, 2, 3], seed=seed, shared=reference_shared
    )
    fast = FastSwitchProgram(fast_state, tm, [1, 2, 3], seed=seed, shared=fast_shared)
    expected = run(reference, seed, classed_frame)
    got = run(fast, seed, classed_frame)
    assert len(expected[0]) > 200
    assert got[0] == expected[0]  # frames, ports and departure times: priorities included
    assert got[1] == expected[1]
    assert got[2] == expected[2]
    assert fast.port_stats() == reference.port_stats()
    reference.flush_counters()
    fast.flush_counters()
    for name, array in reference_state.counters.items():
        np.testing.assert_array_equal(fast_state.counters[name], array, err_msg=name)
    deepest = [reference.tm.max_depth_cells[p] for p in range(512)]
    assert fast.max_depth_cells.tolist() == deepest
    assert fast.class_stats() == reference.class_stats()
    # ... and both publish them into the shared block as they count them (what gNMI serves).
    reference.publish_stats()
    fast.publish_stats()
    published = reference_shared.read_class_stats()
    assert published == reference.class_stats()
    assert fast_shared.read_class_stats() == published
    assert published["dropped_packets"][(10, 7)] == reference.tm.class_dropped_packets[10 * 8 + 7]
    reference_shared.close()
    fast_shared.close()
    # The classes were used: every class with an entry sent on the slow cable port, and
    # class 7's own limit and WRED dropped or marked some of its frames there.
    sent = reference.tm.class_sent_packets
    assert {c for c in range(8) if sent[10 * 8 + c]} == {0, 1, 2, 5, 7}
    assert reference.tm.class_dropped_packets[10 * 8 + 7] > 0
    assert reference.tm.class_marked_packets[10 * 8 + 7] > 0
    if pfc:  # class 5 paused the hosts with priority 5 frames, class 0 with the port's 3
        priorities = {frame[17] for _, frame in expected[1]}  # class-enable vector, low byte
        assert 1 << 5 in priorities and 1 << 3 in priorities
    # ... and changed the order: without the entries the same traffic leaves otherwise.
    plain = ReferenceSwitchProgram(state(), tm, [1, 2, 3], seed=seed)
    assert [f for _, f, _ in run(plain, seed, classed_frame)[0]] != [f for _, f, _ in expected[0]]


@pytest.mark.parametrize(
    ("ports", "fragment", "tagged", "expected"),
    [
        ((1, 2), False, False, 3),  # the destination's entry first (shadows the source's 9)
        ((5, 9), False, False, 7),  # else the source's
        ((1, 9), False, False, 9),
        ((6, 9), False, False, 0),  # neither: no job
        ((1, 2), True, False, 0),  # a later fragment has no ports
        ((1, 2), False, True, 0),  # the parser reads no IPv4 behind a VLAN tag
    ],
)
def test_job_class_of_a_frame(ports, fragment, tagged, expected) -> None:
    s = state()
    frame = udp_frame(A, 2, 200, tagged, ports, fragment)
    assert job_class(frame, s.job_by_dst, s.job_by_src) == expected
    # The compiled program counts it in the same class.
    fast = FastSwitchProgram(s, config(False), [1, 2, 3])
    fast.ingress(1, frame, 0.0)
    fast.flush_counters()
    sent = s.counters[JOB_TX].reshape(-1, JOB_CLASSES, 2)[10]
    assert sent[:, 0].tolist() == [int(c == expected) for c in range(JOB_CLASSES)]


def test_counters_flush_only_what_changed() -> None:
    """Flushing twice adds nothing the second time; new traffic adds only itself."""
    s = state()
    fast = FastSwitchProgram(s, config(False), [1, 2, 3])
    one = bytes(Ether(dst=MAC_TEXT[A]) / IP(tos=2) / UDP() / bytes(100))
    fast.ingress(1, one, 0.0)
    fast.flush_counters()
    fast.flush_counters()
    port_rx = next(a for n, a in s.counters.items() if n.endswith("port_rx"))
    assert port_rx[1].tolist() == [1, len(one)]
    fast.ingress(1, one, 1.0)
    fast.flush_counters()
    assert port_rx[1].tolist() == [2, 2 * len(one)]


@pytest.mark.root
@pytest.mark.parametrize("fast", [True, False], ids=["compiled", "reference"])
def test_switch_reports_how_late_frames_left(lab: NetnsLab, fast: bool) -> None:
    """Every frame handed to a host is in the departure-lateness histogram, and a slow
    port makes the loop sleep toward departures (wake-up lateness is counted)."""
    h1, h2 = make_hosts(lab, 2)
    ports = {1: h1.switch_ifname, 2: h2.switch_ifname}
    tm = TmConfig(ports={2: PortSettings(rate_gbps=0.01)})  # 10 Mbit/s: 160 us per frame
    with SoftwareSwitch(1, ports, None, tm, fast=fast) as switch:
        switch.forward({(1, h2.mac): 2})
        sent = [udp(h1, h2.mac, seq=i) for i in range(30)]
        for frame in sent:
            h1.send(frame)
        assert h2.received(expect=len(sent)) == sent
        assert wait_for(lambda: switch.fidelity()["departure_lateness"].count == 30)
        fidelity = switch.fidelity()
        departures, wakeups = fidelity["departure_lateness"], fidelity["wakeup_lateness"]
        assert 0 <= departures.p50_s <= departures.p99_s <= departures.max_s < 1.0
        assert wakeups.count > 0 and wakeups.max_s >= 0
        assert departures.late <= departures.count
