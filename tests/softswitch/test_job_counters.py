"""Per-job counting end to end: job-class entries written over P4Runtime reach the
packet path, frames count per (egress port, job class), and a P4Runtime Read of the
job counters through the switch service returns them."""

from __future__ import annotations

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether

from controlplane.entries import TableEntry, Update, UpdateType
from controlplane.job_classes import JOB_CLASSES, JobSockets, job_class_entries
from controlplane.p4info import load_p4info
from controlplane.p4names import JOB_ECN_MARKED, JOB_TX, PORT_TX
from controlplane.session import P4RuntimeSession
from emulation.fabric.netns import NetnsLab
from emulation.softswitch.p4runtime_service import RunningServer, serve
from emulation.softswitch.state import socket_key
from emulation.softswitch.switch import SoftwareSwitch
from emulation.softswitch.tm_config import TmConfig
from tests.helpers.hosts import Host, make_hosts
from tests.helpers.waiting import wait_for

JOBS = [
    JobSockets("resnet50-0", (("10.0.0.2", 47000), ("10.0.0.1", 47001))),
    JobSockets("vgg16-1", (("10.0.0.2", 47002),)),
]


@pytest.fixture
def device() -> RunningServer:
    server = serve(device_id=1)
    yield server
    server.stop()


def test_job_entries_reach_the_packet_path_and_counters_read_back(device) -> None:
    index = load_p4info()
    with P4RuntimeSession.connect(device.address, 1, p4info=index) as session:
        session.set_pipeline(index)
        session.write([Update(UpdateType.INSERT, e) for e in job_class_entries(JOBS)])
        state = device.state
        assert state is not None
        assert state.job_by_dst == {
            socket_key(0x0A000002, 47000): 1,
            socket_key(0x0A000001, 47001): 1,
            socket_key(0x0A000002, 47002): 2,
        }
        assert state.job_by_src == state.job_by_dst
        state.counter(JOB_TX)[3 * JOB_CLASSES + 2] = (5, 7500)
        state.counter(JOB_ECN_MARKED)[3 * JOB_CLASSES + 2] = (1, 1500)
        got = session.read_counters("job_tx", index=3 * JOB_CLASSES + 2)
        assert [(s.counter, s.index, s.packets, s.bytes) for s in got] == [(JOB_TX, 50, 5, 7500)]
        marked = session.read_counters("job_ecn_marked", index=50)
        assert [(s.packets, s.bytes) for s in marked] == [(1, 1500)]
        assert len(session.read_counters("job_tx")) == 512 * JOB_CLASSES
        # A deleted entry leaves the packet path.
        first = job_class_entries(JOBS)[0]
        session.write([Update(UpdateType.DELETE, first)])
        assert socket_key(0x0A000002, 47000) not in state.job_by_dst
        assert socket_key(0x0A000002, 47000) in state.job_by_src


def _frame(src: Host, dst: Host, sport: int, dport: int, tcp: bool, size: int = 300) -> bytes:
    l4 = TCP(sport=sport, dport=dport, flags="A") if tcp else UDP(sport=sport, dport=dport)
    head = (
        Ether(dst=dst.mac.hex(":"), src=src.mac.hex(":"))
        / IP(src="10.0.0.1", dst="10.0.0.2", tos=2)
        / l4
    )
    return bytes(head / bytes(size - len(head)))


@pytest.mark.root
@pytest.mark.parametrize("fast", [True, False], ids=["compiled", "reference"])
def test_frames_count_per_job_over_p4runtime(lab: NetnsLab, fast: bool) -> None:
    h1, h2 = make_hosts(lab, 2)
    ports = {1: h1.switch_ifname, 2: h2.switch_ifname}
    with SoftwareSwitch(5, ports, "127.0.0.1:0", TmConfig(), fast=fast) as switch:
        assert switch.grpc_address is not None
        forward = TableEntry(
            "CassiniIngress.logical_forward",
            {"ingress_port": 1, "dst_mac": h2.mac.hex(":")},
            "CassiniIngress.set_egress_port",
            {"port": 2},
        )
        with P4RuntimeSession.connect(switch.grpc_address, 5) as session:
            session.set_pipeline(load_p4info())
            updates = [forward, *job_class_entries(JOBS)]
            session.write([Update(UpdateType.INSERT, e) for e in updates])
            sent = (
                [_frame(h1, h2, 40000, 47000, True)] * 6  # to resnet50's worker 0: class 1
                + [_frame(h1, h2, 47001, 50000, True)] * 4  # ACKs from its worker 1: class 1
                + [_frame(h1, h2, 40001, 47002, False)] * 3  # to vgg16's worker: class 2
                + [_frame(h1, h2, 40002, 9999, True)] * 2  # no job: class 0
            )
            for frame in sent:
                h1.send(frame)
            assert len(h2.received(expect=len(sent))) == len(sent)
            assert wait_for(lambda: session.read_counters(PORT_TX, 2)[0].packets == len(sent))
            cells = range(2 * JOB_CLASSES, 3 * JOB_CLASSES)
            by_class = {
                s.index - 2 * JOB_CLASSES: (s.packets, s.bytes)
                for s in session.read_counters(JOB_TX, indices=cells)
                if s.packets
            }
            assert by_class == {1: (10, 3000), 2: (3, 900), 0: (2, 600)}
