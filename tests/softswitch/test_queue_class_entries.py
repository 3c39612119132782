"""Queue-class entries written over P4Runtime reach the packet path's tables, and a
frame's class follows the P4 program's order: flow first, then DSCP, else 0."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Dot1Q, Ether

from controlplane.entries import Update, UpdateType
from controlplane.p4info import load_p4info
from controlplane.queue_classes import Flow, queue_class_entries
from controlplane.session import P4RuntimeSession
from emulation.softswitch.p4runtime_service import RunningServer, serve
from emulation.softswitch.reference_program import queue_class
from emulation.softswitch.state import flow_key

FLOW = Flow("10.0.0.1", "10.0.0.2", "udp", 4791, 4791)
KEY = flow_key(0x0A000001, 0x0A000002, 17, 4791, 4791)


@pytest.fixture
def device() -> Iterator[RunningServer]:
    server = serve(device_id=1)
    yield server
    server.stop()


def test_entries_reach_the_packet_path_and_a_delete_removes_them(device: RunningServer) -> None:
    index = load_p4info()
    entries = queue_class_entries({46: 7, 10: 2}, {FLOW: 6})
    with P4RuntimeSession.connect(device.address, 1, p4info=index) as session:
        session.set_pipeline(index)
        session.write([Update(UpdateType.INSERT, e) for e in entries])
        state = device.state
        assert state is not None
        assert state.queue_by_dscp == {46: 7, 10: 2}
        assert state.queue_by_flow == {KEY: 6}
        session.write([Update(UpdateType.DELETE, entries[-1])])
        assert state.queue_by_flow == {}
        assert state.queue_by_dscp == {46: 7, 10: 2}


def _frame(
    tos: int, sport: int = 4791, tcp: bool = False, frag: int = 0, vlan: bool = False
) -> bytes:
    head = Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01")
    if vlan:
        head = head / Dot1Q(vlan=3)
    l4 = TCP(sport=sport, dport=4791) if tcp else UDP(sport=sport, dport=4791)
    return bytes(head / IP(src="10.0.0.1", dst="10.0.0.2", tos=tos, frag=frag) / l4 / bytes(20))


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        (_frame(46 << 2 | 2), 6),  # the flow's entry wins over its DSCP's
        (_frame(46 << 2 | 2, sport=1), 7),  # another flow: by DSCP (ECN bits ignored)
        (_frame(46 << 2, tcp=True), 7),  # TCP, not the UDP flow: by DSCP
        (_frame(10 << 2, sport=1), 2),
        (_frame(12 << 2, sport=1), 0),  # a DSCP without an entry
        (_frame(12 << 2, frag=100), 0),  # a later fragment: no ports, DSCP 12 has none
        (_frame(46 << 2, frag=100), 7),  # ... but its DSCP still counts
        (_frame(46 << 2, vlan=True), 0),  # no IPv4 parsed behind a VLAN tag
    ],
)
def test_class_of_a_frame(frame: bytes, expected: int) -> None:
    assert queue_class(frame, {46: 7, 10: 2}, {KEY: 6}) == expected
