"""A RoCE sender honours PFC (issue 26, section 2): on a veth between two namespaces,
802.1Qbb frames sent to the sender's interface (the software switch's own frames,
`softswitch.packet.build_pfc_frame`) stop its data for quanta x 512 bit times at the
link's rate, and an XON (quanta 0) resumes it before the pause runs out; the bytes
still all arrive, none sent twice (go-back-N's 0.1 s timer stands still while
paused). A 2:1 RoCE incast on the fabric with a small XOFF threshold makes
the switch pause the senders, which count the frames and the time paused; a 4:1
incast with the default thresholds loses nothing anywhere either, not even a
non-ECN-capable TCP frame (RoCE in its own queue class, `jobs.roce_classes`)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from controlplane.gnmi import GnmiReader
from controlplane.p4names import QUEUE_CLASS_TABLE
from controlplane.settings import ControlPlaneSettings, PfcSettings
from emulation.fabric.emulated import EmulatedFabric
from emulation.fabric.netns import NetnsLab
from emulation.fabric.options import FabricOptions
from emulation.jobs.launch import JobPlan
from emulation.jobs.roce_classes import reply_class, roce_class
from emulation.jobs.run_settings import RunSettings
from emulation.jobs.supervisor import run_schedule
from emulation.roce.pfc import pause_seconds
from emulation.softswitch.packet import build_pfc_frame
from emulation.softswitch.tm_config import PfcConfig
from scheduler.workloads.types import Profile
from tests.emulation.test_roce_fabric import ITERATIONS, PHASES, SCALE, TOPOLOGY, incast_jobs
from tests.helpers.leftovers import leftovers
from topologies.library import load_topology

RATE_BPS = 10e6  # the (scaled) link rate both ends count pauses at
PORT = 4791
BYTES = 500_000  # ~490 packets, ~0.43 s at 10 Mbit/s unpaused
PRIORITY = PfcConfig().priority
SENDER = """
import json, socket, sys
from emulation.jobs.roce_links import OVERHEAD, PAYLOAD, open_pause_socket
from emulation.roce.dcqcn import DcqcnSettings
from emulation.roce.native import compiled, settings_tuple
from emulation.roce.pfc import data_tos
ifname, rate, nbytes, priority = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, data_tos(priority))
s.bind(("10.9.1.1", 0)); s.connect(("10.9.1.2", 4791))
pause = open_pause_socket(ifname)
st = settings_tuple(DcqcnSettings(line_rate_bps=rate, min_rate_bps=rate / 10))
r = compiled.transfer(st, PAYLOAD, OVERHEAD, 0.1, 16, 20.0, 4e-6, -1,
                      [(s.fileno(), 0x100, 0, bytearray(compiled.RP_STATE_BYTES), [nbytes])],
                      [], 0, False, (pause.fileno(), priority, rate, 0.0))
print(json.dumps({"status": r[0], "frames": r[5], "paused_s": r[6], "sent": r[8][0][0]}))
"""
RECEIVER = """
import json, socket, sys
from emulation.jobs.roce_links import OVERHEAD, PAYLOAD
from emulation.roce.dcqcn import DcqcnSettings
from emulation.roce.native import compiled, settings_tuple
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
s.bind(("10.9.1.2", 4791))
st = settings_tuple(DcqcnSettings(line_rate_bps=1e9))
r = compiled.transfer(st, PAYLOAD, OVERHEAD, 1.0, 16, 20.0, 4e-6, s.fileno(), [],
                      [(0x100, 0, [int(sys.argv[1])])], 0, False, None)
print(json.dumps({"status": r[0], "accepted": r[9][0][0]}))
"""


def data_arrivals(sock: socket.socket, until: float) -> list[float]:
    """Arrival times of the RoCE data frames the capture socket sees until `until`."""
    times: list[float] = []
    sock.settimeout(0.05)
    while time.monotonic() < until:
        try:
            frame, meta = sock.recvfrom(2048)
        except TimeoutError:
            continue
        if meta[2] == socket.PACKET_OUTGOING or frame[12:14] != b"\x08\x00":
            continue
        if frame[23] == 17 and int.from_bytes(frame[36:38], "big") == PORT:
            times.append(time.monotonic())
    return times


def gap_after(times: list[float], at: float) -> float:
    """The longest silence between two arrivals that ends after `at`."""
    return max((b - a for a, b in zip(times, times[1:], strict=False) if b > at), default=0.0)


@pytest.mark.root
def test_pause_frames_stop_the_sender_for_their_quanta_and_xon_resumes_it() -> None:
    with NetnsLab() as lab:
        host, switch = lab.namespace("h"), lab.namespace("s")
        host_if, switch_if = lab.veth(
            "h0", "s0", ns_a=host, ns_b=switch, ip_a="10.9.1.1/24", ip_b="10.9.1.2/24"
        )
        capture = lab.packet_socket(switch, switch_if)
        receiver = lab.popen(switch, [sys.executable, "-c", RECEIVER, str(BYTES)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        time.sleep(0.3)
        sender = lab.popen(
            host, [sys.executable, "-c", SENDER, host_if, str(RATE_BPS), str(BYTES), str(PRIORITY)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        mac = bytes.fromhex("0200000000aa")
        times: list[float] = []
        started = time.monotonic()
        while len(times) < 100 and time.monotonic() < started + 20:  # flowing at ~1.1 kpps
            times += data_arrivals(capture, time.monotonic() + 0.01)
        first = round(0.3 * RATE_BPS / 512)  # quanta for 0.3 s
        paused_at = time.monotonic()
        capture.send(build_pfc_frame(mac, PRIORITY, first))
        times += data_arrivals(capture, paused_at + 0.45)
        xoff_at = time.monotonic()
        capture.send(build_pfc_frame(mac, PRIORITY, 65535))  # 3.36 s at 10 Mbit/s ...
        times += data_arrivals(capture, xoff_at + 0.2)
        xon_at = time.monotonic()
        capture.send(build_pfc_frame(mac, PRIORITY, 0))  # ... cut short by XON after 0.2 s
        times += data_arrivals(capture, xon_at + 1.0)
        sent = json.loads(sender.communicate(timeout=30)[0])
        got = json.loads(receiver.communicate(timeout=30)[0])
        capture.close()
        prefix = lab.prefix
    assert leftovers(prefix) == []
    assert sent["status"] == 0 and got["status"] == 0, (sent, got)
    # every packet, once: no loss, and no go-back-N timeout (RTO 0.1 s) while paused 0.3 s
    assert got["accepted"] == sent["sent"] >= BYTES // 1024
    pause_s = pause_seconds(first, RATE_BPS)
    assert pause_s == pytest.approx(0.3, abs=1e-3)
    # Silent for the pause (a frame or two already on their way may land after it) ...
    first_gap = gap_after([t for t in times if t < xoff_at], paused_at)
    assert pause_s - 0.03 < first_gap < pause_s + 0.05, first_gap
    # ... and resumed by the XON after ~0.2 s, not after the 3.36 s the XOFF asked for.
    second_gap = gap_after([t for t in times if t > xoff_at - 0.05], xoff_at)
    held = xon_at - xoff_at  # >= 0.2 s, more when this process woke late
    assert held - 0.03 < second_gap < held + 0.05 < 1.0, (second_gap, held)
    assert any(t > xon_at for t in times)
    assert sent["frames"] == 2  # XOFFs; the XON counts as none
    assert sent["paused_s"] == pytest.approx(pause_s + (xon_at - xoff_at), abs=0.03)
    print(f"paused {first_gap * 1e3:.0f} ms for {pause_s * 1e3:.0f} ms of quanta; "
          f"XON after {(xon_at - xoff_at) * 1e3:.0f} ms resumed after {second_gap * 1e3:.0f} ms; "
          f"sender counted {sent['frames']} pauses, {sent['paused_s'] * 1e3:.0f} ms")  # fmt: skip


@pytest.mark.root
def test_the_switch_pauses_roce_senders_in_an_incast_and_they_honour_it(
    prefix: str, tmp_path: Path
) -> None:
    """XOFF at 500 cells (x F), below WRED's 1000: the incast's queue fills the
    senders' ingress share past it, the switch pauses their ports, they count the
    frames and stop; with gNMI the switch's ports report their losses, none, and the
    pause frames they sent."""
    topo = load_topology(TOPOLOGY)
    small_skid = ControlPlaneSettings(pfc=PfcSettings(skid_cells=500))
    options = FabricOptions(scale=SCALE, prefix=prefix, settings=small_skid)
    settings = RunSettings(iterations=ITERATIONS, socket_timeout_s=5.0, transport="roce")
    with EmulatedFabric(topo, options) as fabric:
        assert fabric.profile.tm.pfc.enabled
        result = run_schedule(fabric, incast_jobs(), settings, tmp_path)
    assert result.error is None, result.error
    senders = [r for r in result.records if r.worker == 0]  # s01 and s02, into s03
    frames = sum(r.pfc_pause_frames or 0 for r in senders)
    paused_ms = sum(r.pfc_paused_ms or 0.0 for r in senders)
    lost = sum(p.lost_packets for p in result.ports)
    print(f"pause frames honoured {frames}, paused {paused_ms:.0f} ms, switch losses {lost}, "
          f"ecn_marked {result.switch_ecn_marked}")  # fmt: skip
    assert frames > 0 and paused_ms > 0
    assert lost == 0
    # the switch's own count (gNMI pfc-pauses-sent), in summary.json beside the hosts':
    # every frame a host honoured is one the switch sent
    summary = result.summary()
    assert summary["switch_pfc_pauses"] >= summary["pfc_pause_frames"] == frames
    assert summary["switch_pfc_paused_ms"] > 0
    print(f"switch sent {summary['switch_pfc_pauses']} pauses, held "
          f"{summary['switch_pfc_paused_ms']} ms")  # fmt: skip


@pytest.mark.root
def test_a_4_to_1_roce_incast_with_pfc_loses_nothing_anywhere(prefix: str, tmp_path: Path) -> None:
    """Four 2-worker ring jobs, s01-s04 each with s05, on the smallest fabric with five
    servers under one leaf: s05's port takes four flows at once. With PFC on at the
    default thresholds (issue 26, section 2: lossless under a 4:1 incast) no port of the
    switch drops a frame for any cause (gNMI counters), WRED included: RoCE data rides
    the PFC priority's queue class, CNPs/ACKs the class above, and the replicas' non-ECT
    TCP control frames class 0 alone (`jobs.roce_classes`; before, all shared class 0
    and WRED dropped 0-4 TCP frames of 66-74 B a run). Go-back-N's resends are not
    asserted: with nothing lost, a paused sender's timer fired (154-452 resent in five
    runs of eight) until it stood still while paused (0, 0 and 48 in three)."""
    topo = load_topology("leaf-spine:1:1:5")
    profile = Profile("incast", "incast", "data", 2, 80.0, PHASES)
    jobs = [JobPlan(f"j{k}-0", "incast", (f"s0{k}", "s05"), profile) for k in range(1, 5)]
    settings = RunSettings(iterations=ITERATIONS, socket_timeout_s=5.0, transport="roce")
    with EmulatedFabric(topo, FabricOptions(scale=SCALE, prefix=prefix)) as fabric:
        assert fabric.profile.tm.pfc.enabled
        priority = fabric.profile.tm.pfc.priority
        result = run_schedule(fabric, jobs, settings, tmp_path)
        with fabric.session() as session:  # the run removed its DSCP entries
            held_after = session.read_table(QUEUE_CLASS_TABLE)
        assert fabric.grpc_address is not None
        with GnmiReader(fabric.grpc_address, timeout=fabric.timeout) as reader:
            queues = reader.read_queues()
    assert leftovers(prefix) == []
    assert result.error is None, result.error
    assert len(result.records) == 4 * 2 * ITERATIONS
    assert result.ports, "the switch's port counters were read"
    assert result.fidelity["roce_classes"]["error"] is None
    assert held_after == []
    wred = sum(p.wred_dropped_packets for p in result.ports)
    wred_bytes = sum(p.wred_dropped_bytes for p in result.ports)
    other = [(p.interface, p.lost_packets - p.wred_dropped_packets, p.tail_dropped)
             for p in result.ports if p.lost_packets != p.wred_dropped_packets]  # fmt: skip
    retransmits = sum(r.retransmits or 0 for r in result.records)
    late = max(r.late_max_ms or 0.0 for r in result.records)
    per_class: dict[int, list[int]] = {}
    for q in queues:
        row = per_class.setdefault(q.queue_class, [0, 0, 0, 0])
        for i, v in enumerate((q.transmit_pkts, q.transmit_octets, q.ecn_marked_pkts,
                               q.dropped_pkts)):  # fmt: skip
            row[i] += v
    print(f"drops {result.drops}: WRED {wred} ({wred_bytes} B), other {other}; ecn_marked "
          f"{result.switch_ecn_marked}; pause frames honoured {result.pfc_pause_frames}, "
          f"paused {result.pfc_paused_ms} ms; go-back-N resent {retransmits}; "
          f"replicas woke up to {late:.0f} ms late; per class [packets, bytes, marked, "
          f"dropped] {dict(sorted(per_class.items()))}")  # fmt: skip
    assert result.switch_ecn_marked > 0  # the incast did queue at s05's port
    assert other == []  # no tail drop, overrun or other loss anywhere
    assert wred == 0 and wred_bytes == 0  # nor a WRED drop of any frame, non-ECT ones too
    assert result.drops == 0
    # RoCE's bytes rode the PFC priority's class (marked there), its replies the class
    # above, and the TCP frames left class 0 with a small share; no class dropped one
    data, replies = per_class[roce_class(priority)], per_class[reply_class(priority)]
    assert data[2] > 0 and data[1] > 50 * per_class.get(0, [0, 0])[1]
    assert replies[0] > 0
    assert all(row[3] == 0 for row in per_class.values())
