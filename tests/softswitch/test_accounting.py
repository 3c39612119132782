"""Does the software target count what really crossed its ports?

End to end, over real veths: entries are programmed and P4 counters read
over P4Runtime, the other statistics with `SoftwareSwitch.stats()`, and
what the hosts received is the reference. ECN marks against the CE frames
that arrived; MAC-control frames that must end in the MAC; 802.1Q tags the
kernel strips on receive; receive overruns the kernel counts.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1Q, Ether

from controlplane.entries import TableEntry, Update, UpdateType
from controlplane.p4info import load_p4info
from controlplane.p4names import ECN_MARKED, PORT_RX, PORT_TX
from controlplane.session import P4RuntimeSession
from emulation.fabric.netns import NetnsLab
from emulation.softswitch.packet import build_pfc_frame
from emulation.softswitch.ports import (
    MAX_FRAME_BYTES,
    RECV_ANCILLARY_BYTES,
    open_port,
    restore_vlan_tag,
)
from emulation.softswitch.switch import SoftwareSwitch
from emulation.softswitch.tm_config import PfcConfig, PortSettings, TmConfig
from tests.helpers.hosts import Host, mac_of, udp
from tests.helpers.hosts import make_hosts as make_plain_hosts
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.root
DEVICE_ID = 7


def make_hosts(lab: NetnsLab, count: int) -> list[Host]:
    """Hosts that see frames as they were on the wire, 802.1Q tags included."""
    return make_plain_hosts(lab, count, restore_vlan_tags=True, deadline=5.0)


def forward(ingress_port: int, dst_mac: bytes, port: int) -> Update:
    return Update(
        UpdateType.INSERT,
        TableEntry(
            "CassiniIngress.logical_forward",
            {"ingress_port": ingress_port, "dst_mac": dst_mac.hex(":")},
            "CassiniIngress.set_egress_port",
            {"port": port},
        ),
    )


def wred(port: int, min_cells: int, max_cells: int, max_prob: int) -> Update:
    """A wred_profile entry as controlplane.compile.wred_entries builds them."""
    return Update(
        UpdateType.INSERT,
        TableEntry(
            "CassiniEgress.wred_profile",
            {"egress_port": port},
            "CassiniEgress.set_wred",
            {"min_cells": min_cells, "max_cells": max_cells, "max_prob": max_prob},
        ),
    )


def connect(switch: SoftwareSwitch) -> P4RuntimeSession:
    assert switch.grpc_address is not None
    session = P4RuntimeSession.connect(switch.grpc_address, DEVICE_ID)
    session.set_pipeline(load_p4info())
    return session


# --- ECN marks are frames that left marked --------------------------------------------


def _paced_sender(host: Host, dst: bytes, count: int, interval: float) -> threading.Thread:
    """`count` 1000-byte ECT(0) frames, frame i sent at start + i * interval
    (a late wake-up sends the frames it owes at once: the average rate holds)."""
    frames = [udp(host, dst, size=1000, tos=0x02, seq=i) for i in range(count)]

    def run() -> None:
        start = time.monotonic()
        for i, frame in enumerate(frames):
            delay = start + i * interval - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            host.send(frame)

    return threading.Thread(target=run)


@pytest.mark.parametrize("overload", [2, 10], ids=["2x", "10x"])
def test_ce_frames_the_receiver_sees_are_the_ecn_marked_count(lab: NetnsLab, overload: int) -> None:
    """Two senders at 8 Mbit/s each into a port that drains 16/overload Mbit/s,
    with a 5-frame queue limit: WRED marks and the queue limit drops, and a
    marked frame that is then dropped must not count as marked."""
    h1, h2, h3 = make_hosts(lab, 3)
    ports = {1: h1.switch_ifname, 2: h2.switch_ifname, 3: h3.switch_ifname}
    rate_gbps = 0.016 / overload
    tm = TmConfig(
        ports={3: PortSettings(rate_gbps=rate_gbps, queue_cells=65)},  # 5 x 13 cells
        pfc=PfcConfig(enabled=False),
    )
    per_sender = 150
    with SoftwareSwitch(DEVICE_ID, ports, "127.0.0.1:0", tm) as switch, connect(switch) as session:
        session.write([forward(1, h3.mac, 3), forward(2, h3.mac, 3), wred(3, 13, 39, 50)])
        senders = [_paced_sender(h, h3.mac, per_sender, 1e-3) for h in (h1, h2)]
        for thread in senders:
            thread.start()
        for thread in senders:
            thread.join()
        got = h3.received(quiet=0.3)
        ce = sum(Ether(f)[IP].tos & 3 == 3 for f in got)

        def counters() -> tuple[int, int]:
            marked = session.read_counters(ECN_MARKED, 3)[0].packets
            return marked, session.read_counters(PORT_TX, 3)[0].packets

        assert wait_for(lambda: counters()[1] == len(got)), (counters(), len(got))
        marked, tx = counters()
        stats = switch.stats()
        assert stats["tail_dropped"].get(3, 0) > 0  # the overload was real
        assert ce > 0
        assert marked == ce, (marked, ce, stats["tail_dropped"])
        assert marked <= tx
        assert stats["ecn_marked"].get(3, 0) == marked
        received = stats["rx_packets"].get(1, 0) + stats["rx_packets"].get(2, 0)
        assert received == 2 * per_sender
        assert received == tx + stats["tail_dropped"][3] + stats["wred_dropped"].get(3, 0)


# --- MAC control ends in the MAC ---------------------------------------------------------


def test_pfc_frame_to_a_forwarded_unicast_mac_pauses_and_is_not_forwarded(
    lab: NetnsLab,
) -> None:
    h1, h2 = make_hosts(lab, 2)
    tm = TmConfig(ports={2: PortSettings(rate_gbps=0.01)})  # 65535 quanta = 3.4 s
    ports = {1: h1.switch_ifname, 2: h2.switch_ifname}
    with SoftwareSwitch(DEVICE_ID, ports, "127.0.0.1:0", tm) as switch, connect(switch) as session:
        session.write([forward(1, h2.mac, 2), forward(2, h1.mac, 1)])
        # Addressed to h1's MAC, which port 2 has an entry for.
        pause = h1.mac + build_pfc_frame(h2.mac, 3, 0xFFFF)[6:]
        h2.send(pause)
        time.sleep(0.05)
        for i in range(5):
            h1.send(udp(h1, h2.mac, seq=i))
        assert h2.received(quiet=0.3) == []  # port 2 is paused
        h2.send(h1.mac + build_pfc_frame(h2.mac, 3, 0)[6:])
        assert len(h2.received(expect=5)) == 5
        assert h1.received(quiet=0.05) == []  # neither PFC frame reached h1
        stats = switch.stats()
        assert stats["pfc_received"] == {2: 2}
        assert stats["rx_packets"].get(2, 0) == 0 and stats["tx_packets"].get(1, 0) == 0
        assert session.read_counters(PORT_RX, 2)[0].packets == 0
        assert session.read_counters(PORT_TX, 1)[0].packets == 0


# --- VLAN tags ------------------------------------------------------------------------


def _tagged(src: Host, dst: Host, size: int = 300) -> bytes:
    head = (
        Ether(dst=dst.mac.hex(":"), src=src.mac.hex(":"))
        / Dot1Q(prio=3, vlan=42)
        / IP(src="10.0.0.1", dst="10.0.0.2", tos=0x02)
        / UDP(sport=5000, dport=6000)
    )
    return bytes(head / bytes(size - len(head)))


def _tag_crosses_the_switch(lab: NetnsLab, rx_ring: bool) -> None:
    h1, h2 = make_hosts(lab, 2)
    ports = {1: h1.switch_ifname, 2: h2.switch_ifname}
    tm = TmConfig()
    with (
        SoftwareSwitch(DEVICE_ID, ports, "127.0.0.1:0", tm, rx_ring=rx_ring) as switch,
        connect(switch) as session,
    ):
        session.write([forward(1, h2.mac, 2)])
        frames = [_tagged(h1, h2), _tagged(h1, h2, size=1500 + 18)]
        for frame in frames:
            h1.send(frame)
        got = h2.received(expect=len(frames))
        assert got == frames
        for frame in got:
            tag = Ether(frame)[Dot1Q]
            assert (tag.prio, tag.dei, tag.vlan) == (3, 0, 42)
        total = sum(len(f) for f in frames)
        assert wait_for(lambda: session.read_counters(PORT_TX, 2)[0].bytes == total), (
            session.read_counters(PORT_TX, 2)
        )
        assert session.read_counters(PORT_RX, 1)[0].bytes == total
        assert switch.stats()["rx_bytes"] == {1: total}


def test_a_vlan_tag_and_its_priority_cross_the_switch(lab: NetnsLab) -> None:
    _tag_crosses_the_switch(lab, rx_ring=True)


def test_a_vlan_tag_crosses_the_switch_on_the_recvmsg_path(lab: NetnsLab) -> None:
    _tag_crosses_the_switch(lab, rx_ring=False)


def test_recvmsg_auxdata_gives_back_the_tag_on_a_port_socket(lab: NetnsLab) -> None:
    """The recvmsg path's pieces without the loop: a port socket opened by
    open_port, the ancillary room the loop should ask for, restore_vlan_tag."""
    h1, h2 = make_hosts(lab, 2)
    port_socket = open_port(1, h1.switch_ifname, use_ring=False)
    try:
        frames = [_tagged(h1, h2), udp(h1, h2.mac)]
        for frame in frames:
            h1.send(frame)
        time.sleep(0.05)
        got = []
        for _ in frames:
            frame, ancillary, _flags, _address = port_socket.sock.recvmsg(
                MAX_FRAME_BYTES, RECV_ANCILLARY_BYTES
            )
            assert len(frame) in (len(frames[0]) - 4, len(frames[1]))  # the kernel stripped it
            got.append(restore_vlan_tag(ancillary, frame))
        assert got == frames
    finally:
        port_socket.close()


# --- receive overruns -------------------------------------------------------------------


def _readable(port_socket_read: Callable[[], bytes | None]) -> int:
    count = 0
    while port_socket_read() is not None:
        count += 1
    return count


@pytest.mark.parametrize("use_ring", [False, True], ids=["small-rcvbuf", "mmap-ring"])
def test_read_drops_counts_frames_the_kernel_could_not_queue(lab: NetnsLab, use_ring: bool) -> None:
    (h1,) = make_hosts(lab, 1)
    port_socket = open_port(1, h1.switch_ifname, use_ring=use_ring)
    try:
        if use_ring:
            assert port_socket.rx_ring is not None
            sent = port_socket.rx_ring.slots + 300
        else:
            # The smallest buffer the kernel allows: a handful of frames.
            port_socket.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)
            sent = 300
        assert port_socket.read_drops() == 0
        frame = udp(h1, mac_of(9))
        for i in range(sent):
            h1.send(frame)
            if i % 100 == 99:
                time.sleep(1e-3)  # let the softirq keep up: drops must be the socket's
        time.sleep(0.1)

        def read_one() -> bytes | None:
            if port_socket.rx_ring is not None:
                batch = port_socket.rx_ring.receive(1)
                return batch[0] if batch else None
            try:
                return port_socket.sock.recv(MAX_FRAME_BYTES)
            except BlockingIOError:
                return None

        readable = _readable(read_one)
        assert 0 < readable < sent
        assert port_socket.read_drops() == sent - readable
        assert port_socket.read_drops() == 0  # reading reset the kernel's count
        h1.send(frame)
        time.sleep(0.05)
        assert _readable(read_one) == 1 and port_socket.read_drops() == 0
    finally:
        port_socket.close()
