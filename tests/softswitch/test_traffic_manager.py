"""Traffic manager and pipeline on a fake clock: WRED, drain rate, PFC, cables, config."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from scapy.contrib.mac_control import MACControlClassBasedFlowControl
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1Q, Ether

from controlplane.p4names import ECN_MARKED, PORT_RX, PORT_TX, WRED_DROPPED
from emulation.softswitch import fast_pipeline
from emulation.softswitch.packet import build_pfc_frame
from emulation.softswitch.reference_program import ReferenceSwitchProgram
from emulation.softswitch.state import DataplaneState, WredProfile
from emulation.softswitch.switch_program import SwitchProgram
from emulation.softswitch.tm_config import (
    LoopbackCable,
    PfcConfig,
    PortSettings,
    TmConfig,
    load_tm_config,
    tm_config_from_dict,
)
from emulation.softswitch.traffic_manager import TrafficManager, Verdict
from tests.helpers.frames import ipv4_header_checksum
from topologies.errors import UserInputError

MAC_A = bytes.fromhex("020000000001")
MAC_B = bytes.fromhex("020000000002")


def udp_frame(size: int, tos: int = 0, dst: bytes = MAC_B) -> bytes:
    """An Ether/IPv4/UDP frame of exactly `size` bytes."""
    head = Ether(dst=dst.hex(":"), src=MAC_A.hex(":")) / IP(tos=tos) / UDP()
    return bytes(head / (b"\x00" * (size - len(head))))


def one_cell_seconds(config: TmConfig, port: int) -> float:
    return (config.cell_bytes + config.wire_overhead_bytes) * 8 / (config.rate_gbps(port) * 1e9)


# --- WRED -------------------------------------------------------------------------


def _mark_fraction(depth: int, tos: int, trials: int = 4000) -> tuple[float, TrafficManager]:
    """Fraction of one-cell probes marked (or dropped) at a steady queue depth."""
    config = TmConfig(default_rate_gbps=0.001, pfc=PfcConfig(enabled=False))
    wred: dict[int, WredProfile] = {}
    tm = TrafficManager(config, [1, 2], wred, seed=42)
    filler = udp_frame(80)
    now = 0.0
    tm.enqueue(filler, 1, 2, now)  # goes on the wire at once
    for _ in range(depth):
        assert tm.enqueue(filler, 1, 2, now) == Verdict.QUEUED
    assert tm.queue_cells[2] == depth
    wred[2] = WredProfile(min_cells=100, max_cells=200, max_prob_percent=40)
    step = one_cell_seconds(config, 2)
    hits = 0
    probe = udp_frame(80, tos=tos)
    for _ in range(trials):
        verdict = tm.enqueue(probe, 1, 2, now)
        if verdict in (Verdict.MARKED, Verdict.WRED_DROPPED):
            hits += 1
        if verdict != Verdict.WRED_DROPPED:
            now += step
            tm.advance(now)  # exactly one frame leaves: depth is back where it was
        assert tm.queue_cells[2] == depth
    return hits / trials, tm


@pytest.mark.parametrize(
    ("depth", "expected"),
    [(50, 0.0), (100, 0.0), (150, 0.20), (200, 0.40), (201, 1.0), (400, 1.0)],
)
def test_wred_marks_ect_linearly_between_thresholds(depth: int, expected: float) -> None:
    fraction, tm = _mark_fraction(depth, tos=0x02)  # ECT(0)
    assert fraction == pytest.approx(expected, abs=0.03)
    tm.advance(1e6)  # marks count when the frames leave: drain the probes still queued
    assert tm.marked_packets[2] == round(fraction * 4000)
    assert tm.wred_dropped_packets[2] == 0


def test_wred_drops_non_ect_where_it_would_mark() -> None:
    fraction, tm = _mark_fraction(150, tos=0x00)
    assert fraction == pytest.approx(0.20, abs=0.03)
    assert tm.marked_packets[2] == 0
    assert tm.wred_dropped_packets[2] == round(fraction * 4000)


def test_marked_frames_carry_ce_and_a_valid_checksum() -> None:
    _fraction, tm = _mark_fraction(300, tos=0x01, trials=20)  # ECT(1)
    tm.advance(1e6)  # drain fillers and probes
    sent = [frame for _port, frame in tm.transmitted]
    marked = [frame for frame in sent if Ether(frame)[IP].tos & 3 == 3]
    assert len(marked) == 20
    for frame in marked:
        ip = Ether(frame)[IP]
        assert ipv4_header_checksum(frame[14:34]) == ip.chksum
        again = ip.copy()
        del again.chksum
        assert IP(bytes(again)).chksum == ip.chksum


def test_wred_finds_the_ipv4_header_behind_a_vlan_tag() -> None:
    config = TmConfig(default_rate_gbps=0.001, pfc=PfcConfig(enabled=False))
    wred = {2: WredProfile(min_cells=0, max_cells=1, max_prob_percent=100)}
    tm = TrafficManager(config, [1, 2], wred)
    tagged = bytes(
        Ether(dst=MAC_B.hex(":"), src=MAC_A.hex(":"))
        / Dot1Q(prio=3, vlan=42)
        / IP(tos=0x02)
        / UDP()
        / (b"\x00" * 900)
    )
    verdicts = [tm.enqueue(tagged, 1, 2, 0.0) for _ in range(4)]
    assert verdicts[2:] == [Verdict.MARKED, Verdict.MARKED]
    tm.advance(1e3)
    sent = [Ether(f) for _p, f in tm.transmitted]
    assert [p[IP].tos & 3 for p in sent] == [2, 2, 3, 3]
    assert all((p[Dot1Q].prio, p[Dot1Q].vlan) == (3, 42) for p in sent)
    for packet in sent:
        again = packet[IP].copy()
        del again.chksum
        assert IP(bytes(again)).chksum == packet[IP].chksum
    assert tm.marked_packets[2] == 2 and tm.marked_bytes[2] == 2 * len(tagged)


def test_wred_is_reproducible_with_a_seed() -> None:
    assert _mark_fraction(170, 0x02, 500)[0] == _mark_fraction(170, 0x02, 500)[0]


def _overload(factor: int, seed: int) -> tuple[TrafficManager, list[tuple[int, int, int]]]:
    """ECT frames into port 3 at `factor` times its rate, from ports 1 and 2 in
    turn, on a fake clock; WRED marks from a shallow depth and the queue limit
    is small, so frames are marked and tail-dropped. Returns the TM and, after
    every step, (tx_packets, marked_packets, tail_dropped_packets) of port 3."""
    config = TmConfig(
        default_queue_cells=60,
        ports={3: PortSettings(rate_gbps=0.01)},
        pfc=PfcConfig(enabled=False),
    )
    wred = {3: WredProfile(min_cells=13, max_cells=40, max_prob_percent=60)}
    tm = TrafficManager(config, [1, 2, 3], wred, seed=seed)
    rng = random.Random(seed)
    per_frame = (1000 + config.wire_overhead_bytes) * 8 / 0.01e9
    now = 0.0
    history = []
    for i in range(2000):
        tm.enqueue(
            udp_frame(rng.choice((200, 600, 1000)), tos=rng.choice((1, 2))), 1 + i % 2, 3, now
        )
        now += per_frame / factor * rng.uniform(0.5, 1.5)
        tm.advance(now)
        history.append((tm.tx_packets[3], tm.marked_packets[3], tm.tail_dropped_packets[3]))
    while (when := tm.next_event_time()) is not None:
        tm.advance(when)
        history.append((tm.tx_packets[3], tm.marked_packets[3], tm.tail_dropped_packets[3]))
    return tm, history


@pytest.mark.parametrize("factor", [2, 10])
@pytest.mark.parametrize("seed", [0, 1])
def test_marks_count_frames_that_left_marked_under_overload(factor: int, seed: int) -> None:
    tm, history = _overload(factor, seed)
    assert all(marked <= tx for tx, marked, _dropped in history)
    tx, marked, dropped = history[-1]
    assert dropped > 0 and marked > 0  # the overload both marked and dropped
    sent = [frame for port, frame in tm.transmitted if port == 3]
    assert len(sent) == tx == tm.tx_packets[3]
    assert sum(Ether(f)[IP].tos & 3 == 3 for f in sent) == marked
    assert tm.marked_bytes[3] == sum(len(f) for f in sent if Ether(f)[IP].tos & 3 == 3)


def test_a_marked_frame_that_is_tail_dropped_is_only_a_tail_drop() -> None:
    config = TmConfig(default_rate_gbps=0.001, default_queue_cells=30, pfc=PfcConfig(enabled=False))
    wred = {2: WredProfile(min_cells=0, max_cells=1, max_prob_percent=100)}
    tm = TrafficManager(config, [1, 2], wred)
    frame = udp_frame(800, tos=0x02)  # 10 cells
    verdicts = [tm.enqueue(frame, 1, 2, 0.0) for _ in range(6)]
    # On the wire at once; queued behind it (empty queue: no WRED); two marked
    # and queued (20, 30 cells); two marked by WRED but over the 30-cell limit.
    assert (
        verdicts
        == [Verdict.QUEUED, Verdict.QUEUED] + [Verdict.MARKED] * 2 + [Verdict.TAIL_DROPPED] * 2
    )
    assert tm.marked_packets[2] == 0  # none has left yet
    assert tm.tail_dropped_packets[2] == 2
    tm.advance(1e3)
    assert tm.tx_packets[2] == 4 and tm.marked_packets[2] == 2
    assert tm.marked_bytes[2] == 2 * 800
    assert [Ether(f)[IP].tos & 3 for _p, f in tm.transmitted] == [2, 2, 3, 3]


# --- drain rate and tail drop ----------------------------------------------------


def test_port_drains_at_its_rate_on_a_fake_clock() -> None:
    config = TmConfig(default_rate_gbps=1.0, ports={2: PortSettings(rate_gbps=0.01)})
    tm = TrafficManager(config, [1, 2], {})
    frame = udp_frame(1000)
    for _ in range(50):
        tm.enqueue(frame, 1, 2, 0.0)
    per_frame = (1000 + 24) * 8 / 0.01e9  # 819.2 us at 10 Mbps
    departures: list[float] = []
    now = 0.0
    while len(departures) < 50:
        tm.advance(now)
        departures += [now] * len(tm.transmitted)
        tm.transmitted.clear()
        next_time = tm.next_event_time()
        assert next_time is not None or len(departures) == 50
        now += 100e-6
    # Frame k starts at k * per_frame and is handed to the host when its last bit
    # is out, (k + 1) * per_frame: never earlier, and within one 100 us loop step.
    for k, when in enumerate(departures):
        assert (k + 1) * per_frame <= when + 1e-12 <= (k + 1) * per_frame + 100e-6
    assert tm.queue_cells[2] == 0 and tm.buffered_cells == 0
    assert tm.tx_packets[2] == 50 and tm.tx_bytes[2] == 50_000


def test_tail_drop_at_queue_limit_and_shared_buffer() -> None:
    config = TmConfig(
        default_rate_gbps=0.001,
        default_queue_cells=100,
        buffer_cells=150,
        pfc=PfcConfig(enabled=False),
    )
    tm = TrafficManager(config, [1, 2, 3], {})
    frame = udp_frame(800)  # 10 cells
    verdicts = [tm.enqueue(frame, 1, 2, 0.0) for _ in range(12)]
    # first on the wire, then 10 queued (100 cells), then the limit
    assert verdicts.count(Verdict.TAIL_DROPPED) == 1
    assert tm.queue_cells[2] == 100
    verdicts = [tm.enqueue(frame, 1, 3, 0.0) for _ in range(8)]
    # port 3: one on the wire, 5 fit the 150-cell buffer, 2 dropped
    assert verdicts.count(Verdict.TAIL_DROPPED) == 2
    assert tm.buffered_cells == 150
    assert tm.tail_dropped_packets[2] == 1 and tm.tail_dropped_packets[3] == 2


# --- PFC ------------------------------------------------------------------------


def test_pfc_xoff_xon_hysteresis_sends_real_pause_frames() -> None:
    config = TmConfig(
        default_rate_gbps=0.001,
        pfc=PfcConfig(enabled=True, xoff_cells=20, xon_cells=10, pause_quanta=1000, priority=3),
    )
    tm = TrafficManager(config, [1, 2], {}, port_macs={1: MAC_A})
    frame = udp_frame(80)
    tm.enqueue(frame, 1, 2, 0.0)  # on the wire
    for _ in range(20):
        tm.enqueue(frame, 1, 2, 0.0)
    assert tm.control == []  # 20 cells: not above XOFF yet
    tm.enqueue(frame, 1, 2, 0.0)
    assert len(tm.control) == 1
    port, pause = tm.control.pop()
    pfc = Ether(pause)[MACControlClassBasedFlowControl]
    assert port == 1 and Ether(pause).src == MAC_A.hex(":")
    assert pfc.c3_enabled == 1 and pfc.c3_pause_time == 1000

    step = one_cell_seconds(config, 2)
    now = 0.0
    resumed_at_depth = None
    for _ in range(25):
        now += step
        tm.advance(now)
        if tm.control:
            resumed_at_depth = tm.ingress_cells[1]
            break
    # quanta 1000 at 1 Mbps = 0.512 s: no refresh happens within these few ms
    assert resumed_at_depth == 10
    port, resume = tm.control.pop()
    assert Ether(resume)[MACControlClassBasedFlowControl].c3_pause_time == 0
    # Between XON and XOFF nothing is sent again.
    for _ in range(5):
        tm.enqueue(frame, 1, 2, now)
    assert tm.control == []


def test_pfc_pause_is_refreshed_before_it_expires() -> None:
    config = TmConfig(
        default_rate_gbps=0.001,
        pfc=PfcConfig(enabled=True, xoff_cells=5, xon_cells=2, pause_quanta=100),
    )
    tm = TrafficManager(config, [1, 2], {})
    for _ in range(8):
        tm.enqueue(udp_frame(80), 1, 2, 0.0)
    assert len(tm.control) == 1
    pause_seconds = 100 * 512 / 1e6  # 51.2 ms at 1 Mbps
    tm.control.clear()
    next_time = tm.next_event_time()
    assert next_time is not None and next_time <= pause_seconds / 2 + 1e-9
    tm.advance(pause_seconds / 2)
    assert [p for p, _f in tm.control] == [1]


def test_pfc_pauses_sent_counts_every_pause_frame_on_the_wire_refreshes_included() -> None:
    # A capture showed 121 PAUSE frames where the counter said 1 (it counted pauses).
    config = TmConfig(
        default_rate_gbps=0.001,
        pfc=PfcConfig(enabled=True, xoff_cells=5, xon_cells=2, pause_quanta=100),
    )
    tm = TrafficManager(config, [1, 2], {})
    for _ in range(60):  # 60 cells behind a 1 Mbit/s port: paused for many refreshes
        tm.enqueue(udp_frame(80), 1, 2, 0.0)
    sent = []
    now = 0.0
    while tm.ingress_paused[1] and now < 5.0:
        now += 0.005
        tm.advance(now)
        sent += tm.control
        tm.control.clear()
    quanta = [max(getattr(Ether(f)[MACControlClassBasedFlowControl], f"c{i}_pause_time")
                  for i in range(8)) for _p, f in sent]  # fmt: skip
    pauses = [q for q in quanta if q]
    resumes = [q for q in quanta if not q]
    assert len(pauses) >= 2  # the first pause and at least one refresh (counted as 1 before)
    assert tm.pfc_pauses_sent[1] == len(pauses)
    assert tm.pfc_resumes_sent[1] == len(resumes) == 1


def test_received_pfc_pauses_egress_for_its_quanta() -> None:
    state = DataplaneState()
    state.forward[(1, MAC_B)] = 2
    config = TmConfig(default_rate_gbps=0.1)
    pipeline = ReferenceSwitchProgram(state, config, [1, 2])
    quanta = 1000  # 1000 * 512 bit at 100 Mbps = 5.12 ms
    pipeline.ingress(2, build_pfc_frame(MAC_B, 3, quanta), 0.0)
    assert pipeline.tm.paused_until[2] > 0.005
    assert not pipeline.tm.paused_until[2] > 0.00513
    pipeline.ingress(1, udp_frame(100), 0.001)
    pipeline.advance(0.001)
    assert pipeline.tm.transmitted == []
    assert pipeline.tm.next_event_time() == pytest.approx(0.00512)
    pipeline.advance(0.00512)
    # On the wire when the pause ends; the host has it one serialisation later.
    assert pipeline.tm.tx_packets[2] == 1 and pipeline.tm.transmitted == []
    pipeline.advance(0.00512 + (100 + 24) * 8 / 0.1e9)
    assert len(pipeline.tm.transmitted) == 1
    # A zero-quanta frame resumes at once.
    pipeline.ingress(2, build_pfc_frame(MAC_B, 3, 0xFFFF), 0.01)
    assert pipeline.tm.paused_until[2] > 0.02
    pipeline.ingress(2, build_pfc_frame(MAC_B, 3, 0), 0.02)
    assert not pipeline.tm.paused_until[2] > 0.02
    assert pipeline.stats()["pfc_received"] == {2: 3}
    assert pipeline.rx_packets[2] == 0  # MAC control frames never reach the pipeline


def _two_switch_chain(pfc: bool) -> tuple[ReferenceSwitchProgram, list[float]]:
    """host 1 -> switch A -> cable 10<->11 -> switch B -> slow host port 2."""
    state = DataplaneState()
    state.forward[(1, MAC_B)] = 10
    state.forward[(11, MAC_B)] = 2
    config = TmConfig(
        default_rate_gbps=1.0,
        default_queue_cells=150,
        ports={2: PortSettings(rate_gbps=0.01)},
        pfc=PfcConfig(enabled=pfc, xoff_cells=60, xon_cells=30),
        loopback_cables=(LoopbackCable(10, 11, delay_us=5),),
    )
    pipeline = ReferenceSwitchProgram(state, config, [1, 2])
    frame = udp_frame(800)  # 10 cells
    now = 0.0
    delivered_at: list[float] = []
    for _ in range(20):  # 200 cells in a burst at 1 Gbps: more than port 2 holds
        pipeline.ingress(1, frame, now)
        pipeline.advance(now)
        delivered_at += [now for _ in pipeline.tm.transmitted]
        pipeline.tm.transmitted.clear()
        now += 10e-6
    while pipeline.tm.next_event_time() is not None:
        now = max(now, pipeline.tm.next_event_time() or now)
        pipeline.advance(now)
        delivered_at += [now for _ in pipeline.tm.transmitted]
        pipeline.tm.transmitted.clear()
    return pipeline, delivered_at


def test_loopback_pfc_pauses_the_upstream_queue_instead_of_dropping() -> None:
    without, delivered = _two_switch_chain(pfc=False)
    assert without.tm.tail_dropped_packets[2] > 0
    assert len(delivered) == 20 - without.tm.tail_dropped_packets[2]

    with_pfc, delivered = _two_switch_chain(pfc=True)
    tm = with_pfc.tm
    assert sum(tm.tail_dropped_packets) == 0
    assert len(delivered) == 20
    assert tm.pfc_pauses_sent[11] >= 1 and tm.pfc_resumes_sent[11] >= 1
    # The upstream queue (port 10) built up in turn and paused the host behind it;
    # a pause across a cable sends no frame.
    assert tm.pfc_pauses_sent[1] >= 1
    assert {port for port, _frame in tm.control} == {1}
    # frames arrive in order at port 2's rate
    gaps = [b - a for a, b in zip(delivered, delivered[1:], strict=False)]
    assert min(gaps) >= (800 + 24) * 8 / 0.01e9 - 60e-6


def test_loopback_pause_stops_peer_queue_until_xon() -> None:
    config = TmConfig(
        pfc=PfcConfig(enabled=True, xoff_cells=30, xon_cells=10),
        loopback_cables=(LoopbackCable(10, 11),),
        ports={2: PortSettings(rate_gbps=0.001)},
    )
    tm = TrafficManager(config, [1, 2, 10, 11], {})
    for _ in range(5):
        tm.enqueue(udp_frame(800), 11, 2, 0.0)  # 10 cells each, one on the wire
    assert tm.paused_until[10] > 1.0  # 40 cells from ingress 11 > 30
    tm.enqueue(udp_frame(80), 1, 10, 0.0)
    tm.advance(0.0)
    assert tm.tx_packets[10] == 0 and tm.queue_cells[10] == 1
    tm.advance(3 * (800 + 24) * 8 / 1e6)  # three frames leave port 2: 10 cells held
    assert not tm.paused_until[10] > 10.0
    assert tm.tx_packets[10] == 1


# --- pipeline, counters, fuzz ---------------------------------------------------------


def test_pipeline_counts_and_drops_misses() -> None:
    state = DataplaneState()
    state.forward[(1, MAC_B)] = 2
    pipeline = ReferenceSwitchProgram(state, TmConfig(), [1, 2, 3])
    pipeline.ingress(1, udp_frame(100), 0.0)
    pipeline.ingress(1, udp_frame(200, dst=MAC_A), 0.0)  # no entry
    pipeline.ingress(3, udp_frame(300), 0.0)  # entry exists for port 1 only
    pipeline.advance(1e-3)
    pipeline.flush_counters()
    assert [p for p, _f in pipeline.tm.transmitted] == [2]
    rx = state.counter(PORT_RX)
    tx = state.counter(PORT_TX)
    assert rx[1].tolist() == [2, 300] and rx[3].tolist() == [1, 300]
    assert tx[2].tolist() == [1, 100] and int(tx.sum()) == 101
    assert pipeline.stats()["forward_misses"] == {1: 1, 3: 1}
    pipeline.flush_counters()  # idempotent: nothing counted twice
    assert rx[1].tolist() == [2, 300]
    assert int(state.counter(ECN_MARKED).sum()) == 0
    assert int(state.counter(WRED_DROPPED).sum()) == 0


def test_mac_control_frames_end_in_the_mac_even_with_a_forwarding_entry() -> None:
    state = DataplaneState()
    state.forward[(2, MAC_A)] = 1  # the PFC frame's unicast destination has an entry
    state.forward[(1, MAC_B)] = 2
    config = TmConfig(ports={2: PortSettings(rate_gbps=0.01)}, pfc=PfcConfig(enabled=False))
    pipeline = ReferenceSwitchProgram(state, config, [1, 2])
    pause = MAC_A + build_pfc_frame(MAC_B, 3, 0xFFFF)[6:]
    pipeline.ingress(2, pause, 0.0)
    pipeline.ingress(2, MAC_A + MAC_B + bytes.fromhex("88080002") + bytes(46), 0.0)  # other opcode
    assert pipeline.tm.paused_until[2] > 1.0
    pipeline.ingress(1, udp_frame(100), 0.0)
    pipeline.advance(1.0)
    assert pipeline.tm.transmitted == []  # nothing forwarded to port 1, port 2 paused
    stats = pipeline.port_stats()
    assert stats["pfc_received"] == {2: 1} and stats["mac_control_ignored"] == {2: 1}
    assert stats["rx_packets"] == {1: 1} and stats["tx_packets"] == {}
    pipeline.flush_counters()
    assert state.counter(PORT_RX)[2].tolist() == [0, 0]


def test_random_bytes_never_crash_the_pipeline() -> None:
    state = DataplaneState()
    rng = random.Random(3)
    macs = [bytes(rng.randrange(256) for _ in range(6)) for _ in range(4)]
    for mac in macs:
        state.forward[(1, mac)] = 2
    state.wred[2] = WredProfile(0, 0, 100)  # every frame takes the marking path
    pipeline = ReferenceSwitchProgram(state, TmConfig(default_rate_gbps=0.001), [1, 2])
    for i in range(3000):
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 120)))
        if i % 3 == 0:
            body = rng.choice(macs) + body[6:12].ljust(6, b"\0") + b"\x08\x00" + body[14:]
        elif i % 3 == 1:
            body = rng.choice(macs) + body
        pipeline.ingress(1, body, i * 1e-6)
        pipeline.advance(i * 1e-6)
    stats = pipeline.stats()
    assert stats["malformed"][1] > 100
    accepted = pipeline.rx_packets[1]
    assert accepted + stats["malformed"][1] == 3000
    tm = pipeline.tm
    handled = tm.tx_packets[2] + tm.queue_cells[2] * 0 + len(tm.queues[2])
    assert handled + tm.wred_dropped_packets[2] + tm.tail_dropped_packets[2] + sum(
        stats["forward_misses"].values()
    ) + sum(stats.get("pfc_received", {}).values()) == accepted + sum(
        stats.get("pfc_received", {}).values()
    )


def test_interface_port_cannot_also_be_cabled() -> None:
    config = TmConfig(loopback_cables=(LoopbackCable(1, 5),))
    with pytest.raises(UserInputError, match="port 1"):
        ReferenceSwitchProgram(DataplaneState(), config, [1, 2])


# --- configuration -----------------------------------------------------------------


def test_tm_config_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "tm.yaml"
    path.write_text(
        "cell_bytes: 80\nbuffer_cells: 5000\ndefault_rate_gbps: 0.5\n"
        "ports:\n  3: {rate_gbps: 0.05, queue_cells: 400}\n"
        "pfc: {enabled: true, xoff_cells: 400}\n"
        "loopback_cables:\n  - {port_a: 10, port_b: 11, delay_us: 2}\n"
    )
    config = load_tm_config(path)
    assert config.rate_gbps(3) == 0.05 and config.rate_gbps(4) == 0.5
    assert config.queue_cells(3) == 400 and config.queue_cells(4) == 20_000
    assert config.pfc.xoff_cells == 400 and config.pfc.xon_cells == 300
    assert config.cable_peers() == {10: (11, 2e-6), 11: (10, 2e-6)}
    text = config.describe({3: "veth3"})
    assert "port 3 (veth3): 0.05 Gbps" in text and "10 <-> 11" in text


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"cell_byte": 80}, "Did you mean 'cell_bytes'"),
        ({"ports": {"x": {}}}, "port 'x'"),
        ({"ports": {3: {"rate_gbps": -1}}}, "ports.3.rate_gbps"),
        ({"pfc": {"xoff_cells": 10, "xon_cells": 20}}, "xon_cells \\(20\\) must be below"),
        ({"loopback_cables": [{"port_a": 1, "port_b": 1}]}, "port 1 to itself"),
        (
            {"loopback_cables": [{"port_a": 1, "port_b": 2}, {"port_a": 2, "port_b": 3}]},
            "loopback_cables\\[1\\]: port 2 is already cabled",
        ),
        ({"loopback_cables": [{"port_a": 1}]}, "missing field 'port_b'"),
    ],
)
def test_tm_config_errors_name_the_field(data: dict, message: str) -> None:
    with pytest.raises(UserInputError, match=message):
        tm_config_from_dict(data, source="tm.yaml")


def test_tm_config_file_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(UserInputError, match="bad.json"):
        load_tm_config(path)
    with pytest.raises(UserInputError, match="missing.yaml"):
        load_tm_config(tmp_path / "missing.yaml")


# --- per-hop latency in virtual time ------------------------------------------------

# host port 1 -> 10 =cable= 11 -> 12 =cable= 13 -> 14 =cable= 15 -> host port 2,
# every port at its own rate so each term of the hand computation differs.
CHAIN_RATES = {1: 0.2, 10: 0.05, 12: 0.1, 14: 0.04, 2: 0.08}
CHAIN_DELAYS_US = (1.0, 3.0, 7.0)


def _cabled_chain() -> ReferenceSwitchProgram:
    state = DataplaneState()
    state.forward[(1, MAC_B)] = 10
    state.forward[(11, MAC_B)] = 12
    state.forward[(13, MAC_B)] = 14
    state.forward[(15, MAC_B)] = 2
    config = TmConfig(
        ports={p: PortSettings(rate_gbps=r) for p, r in CHAIN_RATES.items()},
        pfc=PfcConfig(enabled=False),
        loopback_cables=tuple(
            LoopbackCable(a, a + 1, delay_us=d)
            for a, d in zip((10, 12, 14), CHAIN_DELAYS_US, strict=True)
        ),
    )
    return ReferenceSwitchProgram(state, config, [1, 2])


def _serialisation(size: int, gbps: float) -> float:
    return (size + 24) * 8 / (gbps * 1e9)


def _run_until_delivered(pipeline: ReferenceSwitchProgram, step: float, end: float) -> list[float]:
    """Wall-clock loop on a fake clock: advance every `step`, note delivery times."""
    delivered: list[float] = []
    now = 0.0
    while now < end:
        pipeline.advance(now)
        delivered += [now] * len(pipeline.tm.transmitted)
        pipeline.tm.transmitted.clear()
        now += step
    return delivered


def test_lone_frame_pays_every_hop_serialisation_and_cable_delay() -> None:
    size = 98  # a 56-byte ping: 14 + 20 + 8 + 56
    # Hand computation: 122 wire bytes = 976 bits on every link.
    # host link 0.2 Gbps 4.88 us, port 10 0.05 Gbps 19.52 us, cable 1 us,
    # port 12 0.1 Gbps 9.76 us, cable 3 us, port 14 0.04 Gbps 24.4 us, cable 7 us,
    # port 2 0.08 Gbps 12.2 us: 81.76 us after the host began sending.
    expected = 4.88e-6 + 19.52e-6 + 1e-6 + 9.76e-6 + 3e-6 + 24.4e-6 + 7e-6 + 12.2e-6
    assert expected == pytest.approx(
        sum(_serialisation(size, r) for r in CHAIN_RATES.values()) + sum(CHAIN_DELAYS_US) * 1e-6
    )
    sent_at = 1e-3
    pipeline = _cabled_chain()
    pipeline.receive(1, udp_frame(size), sent_at)
    step = 0.1e-6
    delivered = _run_until_delivered(pipeline, step, sent_at + 200e-6)
    assert len(delivered) == 1
    assert sent_at + expected - 1e-12 <= delivered[0] <= sent_at + expected + step + 1e-12
    tm = pipeline.tm
    assert [tm.tx_packets[p] for p in (10, 12, 14, 2)] == [1, 1, 1, 1]

    # A caller that wakes up late changes nothing inside the switch: every hop
    # still ran at its virtual time; only the hand-over to the host is late.
    late = _cabled_chain()
    late.receive(1, udp_frame(size), sent_at)
    late.advance(sent_at + expected - 10e-9)
    assert late.tm.transmitted == [] and late.tm.tx_packets[2] == 1
    late.advance(sent_at + 5e-3)
    assert len(late.tm.transmitted) == 1
    ends = late.tm.tx_free_at
    assert ends[10] == pytest.approx(sent_at + 4.88e-6 + 19.52e-6, abs=1e-12)
    assert ends[12] == pytest.approx(sent_at + 4.88e-6 + 19.52e-6 + 1e-6 + 9.76e-6, abs=1e-12)
    assert ends[2] == pytest.approx(sent_at + expected, abs=1e-12)
    assert late.tm.next_event_time() is None


def test_back_to_back_frames_leave_one_serialisation_apart() -> None:
    config = TmConfig(ports={2: PortSettings(rate_gbps=0.05)}, pfc=PfcConfig(enabled=False))
    tm = TrafficManager(config, [1, 2], {})
    per_frame = _serialisation(1000, 0.05)  # 163.84 us at 50 Mbit/s
    tm.enqueue(udp_frame(1000), 1, 2, 0.0)
    tm.enqueue(udp_frame(1000), 1, 2, 0.0)
    delivered: list[float] = []
    while (when := tm.next_event_time()) is not None:
        tm.advance(when)
        delivered += [when] * len(tm.transmitted)
        tm.transmitted.clear()
    assert delivered == [
        pytest.approx(per_frame, abs=1e-12),
        pytest.approx(2 * per_frame, abs=1e-12),
    ]

    # Through the cabled chain two frames sent 1 us apart leave at the pace of the
    # slowest hop (port 14, 0.04 Gbps), not bunched up.
    pipeline = _cabled_chain()
    pipeline.receive(1, udp_frame(1000), 0.0)
    pipeline.receive(1, udp_frame(1000), 1e-6)
    delivered = _run_until_delivered(pipeline, 0.1e-6, 1e-3)
    assert len(delivered) == 2
    assert delivered[1] - delivered[0] == pytest.approx(_serialisation(1000, 0.04), abs=0.2e-6)


def test_frames_read_late_join_the_queue_they_would_have_joined_on_time() -> None:
    """30 frames stamped 1 ms apart at a port that carries them build no queue,
    even when the caller only hands them over 30 ms later; the same frames
    stamped with the late read time build one and get marked."""
    frame = udp_frame(1000, tos=0x02)
    cells = 13  # 1000 B in 80-byte cells

    def run(stamps: list[float]) -> TrafficManager:
        state = DataplaneState()
        state.forward[(1, MAC_B)] = 2
        state.wred[2] = WredProfile(min_cells=2 * cells, max_cells=6 * cells, max_prob_percent=100)
        config = TmConfig(ports={2: PortSettings(rate_gbps=0.01)}, pfc=PfcConfig(enabled=False))
        pipeline = ReferenceSwitchProgram(state, config, [1, 2])
        for stamp in stamps:
            pipeline.receive(1, frame, stamp)
        pipeline.advance(0.031)
        pipeline.advance(1.0)
        assert len(pipeline.tm.transmitted) == 30
        return pipeline.tm

    on_time = run([k * 1e-3 for k in range(30)])  # 819.2 us per frame at 10 Mbit/s
    assert on_time.peak_queue_cells[2] == 0
    assert on_time.marked_packets[2] == 0
    read_late = run([0.030] * 30)
    assert read_late.peak_queue_cells[2] == 29 * cells
    assert read_late.marked_packets[2] > 20


@pytest.mark.parametrize("compiled", [False, True], ids=["reference", "compiled"])
def test_frames_the_kernel_shows_after_their_time_keep_their_spacing(compiled: bool) -> None:
    """A busy core can run the receive softirq late, so the loop sees frames after virtual
    time has passed their stamps. 30 frames stamped 1 ms apart, seen only at 31 ms, must
    not join the queue all at once (29 frames deep, marked): they keep their spacing, at
    most a serialisation time each, and the port carries them without a queue."""
    assert fast_pipeline.available(), "the compiled packet path is not built: run scripts/setup.sh"
    frame = udp_frame(1000, tos=0x02)
    cells = 13  # 1000 B in 80-byte cells
    per_frame = _serialisation(1000, 0.01)  # 819.2 us at 10 Mbit/s, the host link's rate too
    state = DataplaneState()
    state.forward[(1, MAC_B)] = 2
    state.wred[2] = WredProfile(min_cells=2 * cells, max_cells=6 * cells, max_prob_percent=100)
    rates = {p: PortSettings(rate_gbps=0.01) for p in (1, 2)}
    config = TmConfig(ports=rates, pfc=PfcConfig(enabled=False))
    program: SwitchProgram = (
        fast_pipeline.FastSwitchProgram(state, config, [1, 2])
        if compiled
        else ReferenceSwitchProgram(state, config, [1, 2])
    )
    program.advance(0.031)  # virtual time passes every stamp before the loop sees a frame
    for k in range(30):
        program.receive(1, frame, k * 1e-3)
    program.advance(1.0)
    due = list(program.tm.transmitted_due)
    assert len(due) == 30
    assert program.port_stats().get("ecn_marked", {}) == {}
    gaps = [b - a for a, b in zip(due, due[1:], strict=False)]
    # each left one serialisation after the previous (spaced, not queued behind 28 others)
    assert min(gaps) == pytest.approx(per_frame, rel=1e-6)
    assert max(gaps) == pytest.approx(per_frame, rel=1e-6)
    # the first one was received at 31 ms, when it was seen, and left one serialisation later
    assert due[0] == pytest.approx(0.031 + per_frame, rel=1e-6)


# --- per job and the deepest queue ---------------------------------------------------


def test_max_depth_is_the_deepest_queue_a_frame_found_until_reset() -> None:
    """Hand-computed: 200-byte frames are 3 cells of 80 B; the first goes on the wire at
    once, the next four find 0, 3, 6 and 9 cells queued; a tail-dropped one found 12."""
    config = TmConfig(default_rate_gbps=0.001, default_queue_cells=14, pfc=PfcConfig(enabled=False))
    tm = TrafficManager(config, [1, 2], {}, seed=1)
    frame = udp_frame(200)
    assert tm.enqueue(frame, 1, 2, 0.0, job_class=3) == Verdict.QUEUED  # on the wire
    assert tm.max_depth_cells[2] == 0
    for _ in range(4):
        assert tm.enqueue(frame, 1, 2, 0.0, job_class=3) == Verdict.QUEUED
    assert tm.queue_cells[2] == 12 and tm.max_depth_cells[2] == 9
    assert tm.enqueue(frame, 1, 2, 0.0) == Verdict.TAIL_DROPPED  # 12 + 3 > 14
    assert tm.max_depth_cells[2] == 12
    tm.max_depth_cells[2] = 0  # the reader's reset
    tm.advance(10.0)  # everything leaves
    assert tm.max_depth_cells[2] == 0 and tm.queue_cells[2] == 0
    # Five frames of class 3 left port 2, counted in cell 2 * 16 + 3.
    assert tm.job_tx_packets[2 * 16 + 3] == 5 and tm.job_tx_bytes[2 * 16 + 3] == 1000
    assert sum(tm.job_tx_packets) == tm.tx_packets[2] == 5
