"""CE counting at the receiving host: the BPF filter against scapy-built frames.

A veth pair between two namespaces; the counter runs in its own process
inside the receiving namespace (as in a replica), the test sends frames
from the other end and from the receiver itself, then asks for the count.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from scapy.layers.inet import IP, TCP, UDP, IPOption
from scapy.layers.l2 import Ether

from emulation.fabric.netns import NetnsLab
from emulation.jobs.ce_count import ce_filter
from tests.helpers.leftovers import leftovers

PORT = 47000
MAC_A, MAC_B = "02:00:00:00:0a:01", "02:00:00:00:0a:02"
IP_A, IP_B = "10.9.7.1", "10.9.7.2"
COUNTER = """
import sys
from emulation.jobs.ce_count import CeCounter
with CeCounter(sys.argv[1], [int(p) for p in sys.argv[2].split(",")]) as counter:
    print("ready", flush=True)
    for _ in sys.stdin:
        print(counter.read(), flush=True)
"""


class Pair:
    """Two namespaces on a veth; a counter process on b's end for PORT."""

    def __init__(self, lab: NetnsLab) -> None:
        self.ns_a, self.ns_b = lab.namespace("a"), lab.namespace("b")
        self.if_a, self.if_b = lab.veth(
            "a", "b", ns_a=self.ns_a, ns_b=self.ns_b, mac_a=MAC_A, mac_b=MAC_B,
            ip_a=IP_A + "/24", ip_b=IP_B + "/24",
        )  # fmt: skip
        self.counter = lab.popen(
            self.ns_b, [sys.executable, "-c", COUNTER, self.if_b, f"{PORT},{PORT + 1}"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.counter.stdout is not None and self.counter.stdout.readline() == "ready\n"
        self.from_a = lab.packet_socket(self.ns_a, self.if_a)
        self.from_b = lab.packet_socket(self.ns_b, self.if_b)

    def count(self) -> int:
        time.sleep(0.1)  # veth delivery goes through the receiving CPU's backlog
        assert self.counter.stdin is not None and self.counter.stdout is not None
        self.counter.stdin.write("read\n")
        self.counter.stdin.flush()
        return int(self.counter.stdout.readline())


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    with NetnsLab() as lab:
        p = Pair(lab)
        yield p
        p.from_a.close()
        p.from_b.close()
        prefix = lab.prefix
    assert leftovers(prefix) == []


def tcp_frame(
    tos: int = 3, dport: int = PORT, sport: int = 40000, options: bool = False,
    frag: int = 0, dst_mac: str = MAC_B, src_mac: str = MAC_A, dst: str = IP_B, src: str = IP_A,
) -> bytes:  # fmt: skip
    ip = IP(src=src, dst=dst, tos=tos, frag=frag)
    if options:
        ip.options = [IPOption(b"\x01\x01\x01\x00")]  # NOPs and an end: IHL 6
    return bytes(
        Ether(src=src_mac, dst=dst_mac) / ip / TCP(sport=sport, dport=dport) / (b"x" * 100)
    )


def test_the_program_ends_in_reject_then_accept_with_jumps_in_range() -> None:
    program = ce_filter([PORT, PORT + 1, PORT])  # duplicates are folded
    assert (program[-2].k, program[-1].k) == (0, 1)
    assert len(program) == 13 + 2 + 2
    for i, insn in enumerate(program):
        if insn.code & 0x07 == 0x05:  # BPF_JMP: both targets lie inside the program
            assert i + 1 + insn.jt < len(program) and i + 1 + insn.jf < len(program)
    with pytest.raises(ValueError, match="TCP ports"):
        ce_filter([])
    with pytest.raises(ValueError, match="TCP ports"):
        ce_filter([70000])


@pytest.mark.root
def test_only_ce_tcp_segments_to_the_job_ports_arriving_here_count(pair: Pair) -> None:
    assert pair.count() == 0
    for _ in range(7):
        pair.from_a.send(tcp_frame())
    pair.from_a.send(tcp_frame(dport=PORT + 1))
    pair.from_a.send(tcp_frame(options=True))  # IHL 6: the port is found past the options
    assert pair.count() == 9
    assert pair.count() == 0  # the count resets on each read
    rejected = [
        tcp_frame(tos=0),  # not ECT
        tcp_frame(tos=2),  # ECT(0)
        tcp_frame(tos=1),  # ECT(1)
        tcp_frame(tos=0xB8 | 2),  # DSCP EF, ECT(0): only the ECN bits matter
        tcp_frame(dport=PORT + 2),  # another job's port
        tcp_frame(sport=PORT, dport=40000),  # the job's port as source: an ACK's direction
        tcp_frame(frag=10),  # a later fragment: no TCP header there
        tcp_frame(dst_mac="02:00:00:00:0a:99"),  # another host's frame (PACKET_OTHERHOST)
        bytes(Ether(src=MAC_A, dst=MAC_B) / IP(src=IP_A, dst=IP_B, tos=3) / UDP(dport=PORT)),
    ]
    for frame in rejected:
        pair.from_a.send(frame)
    assert pair.count() == 0
    # CE with DSCP bits set is still CE.
    pair.from_a.send(tcp_frame(tos=0xB8 | 3))
    assert pair.count() == 1
    # The receiver's own CE frames to the port leave it: PACKET_OUTGOING, not counted.
    for _ in range(5):
        pair.from_b.send(tcp_frame(src_mac=MAC_B, dst_mac=MAC_A, src=IP_B, dst=IP_A))
    assert pair.count() == 0


@pytest.mark.root
def test_a_burst_beyond_the_socket_buffer_is_counted_whole(pair: Pair) -> None:
    for _ in range(2000):
        pair.from_a.send(tcp_frame())
    assert pair.count() == 2000
