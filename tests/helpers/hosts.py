"""Hosts on veths for the network tests: a namespace, one veth and a raw socket each.

The switch side of every veth stays in the root namespace, for the switch
under test to open. scapy builds the frames.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from emulation.fabric.netns import NetnsLab
from emulation.softswitch.ports import (
    MAX_FRAME_BYTES,
    PACKET_AUXDATA,
    RECV_ANCILLARY_BYTES,
    SOL_PACKET,
    restore_vlan_tag,
)
from tests.helpers.waiting import WAIT_S

PACKET_OUTGOING = 4


@dataclass
class Host:
    ns: str
    ifname: str  # host end
    switch_ifname: str  # switch end, root namespace
    mac: bytes
    sock: socket.socket
    restore_vlan_tags: bool = False  # frames as on the wire: put back tags the kernel stripped
    deadline: float = 3.0  # received() stops after this long even if the link never goes quiet

    def send(self, frame: bytes) -> None:
        self.sock.send(frame)

    def received(
        self, quiet: float = 0.15, deadline: float | None = None, expect: int = 0
    ) -> list[bytes]:
        """Frames that arrived (not our own), until the link is quiet for `quiet` s.

        With `expect`, a quiet link does not end the wait before that many have
        come (a busy machine can hold a frame back longer than `quiet`), up to a
        deadline of WAIT_S unless one is given; after them, quiet does."""
        frames: list[bytes] = []
        if deadline is None:
            deadline = WAIT_S if expect else self.deadline
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            left = end - time.monotonic()
            self.sock.settimeout(quiet if len(frames) >= expect else max(left, 1e-3))
            try:
                frame, address = self._receive()
            except TimeoutError:
                break
            if address[2] != PACKET_OUTGOING:
                frames.append(frame)
        return frames

    def _receive(self) -> tuple[bytes, tuple]:
        if not self.restore_vlan_tags:
            return self.sock.recvfrom(65535)
        frame, ancillary, _flags, address = self.sock.recvmsg(MAX_FRAME_BYTES, RECV_ANCILLARY_BYTES)
        return restore_vlan_tag(ancillary, frame), address


def mac_of(i: int) -> bytes:
    return bytes.fromhex(f"0200000000{i:02x}")


def udp(src: Host, dst_mac: bytes, size: int = 200, tos: int = 0, seq: int = 0) -> bytes:
    """A UDP frame of `size` bytes from `src`, its payload starting with `seq`."""
    head = (
        Ether(dst=dst_mac.hex(":"), src=src.mac.hex(":"))
        / IP(src="10.0.0.1", dst="10.0.0.2", tos=tos)
        / UDP(sport=5000, dport=6000)
    )
    return bytes(head / (seq.to_bytes(4, "big") + bytes(size - len(head) - 4)))


def make_hosts(
    lab: NetnsLab, count: int, restore_vlan_tags: bool = False, deadline: float = 3.0
) -> list[Host]:
    """Hosts h1..h<count> with MACs mac_of(1..count); their switch ends are s1..s<count>."""
    hosts = []
    for i in range(1, count + 1):
        ns = lab.namespace(f"h{i}")
        host_if, switch_if = lab.veth(f"h{i}", f"s{i}", ns_a=ns, mac_a=mac_of(i).hex(":"))
        sock = lab.packet_socket(ns, host_if)
        if restore_vlan_tags:
            sock.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)  # the kernel strips tags here too
        hosts.append(Host(ns, host_if, switch_if, mac_of(i), sock, restore_vlan_tags, deadline))
    return hosts
