"""Forwarding rate of the software P4Runtime target next to a Linux bridge.

Builds, per port pair, sender namespace -> veth -> switch port -> switch port
-> veth -> receiver namespace; blasts prebuilt UDP frames with raw sockets
from the sender namespace and counts what the receiving interfaces got over
a measurement window. Needs root; everything it creates is removed on exit
(also on Ctrl-C).

    sudo .venv/bin/python benchmarks/bench_target.py [--seconds 3] [--senders 2]

Prints a Markdown table. The switch runs the full pipeline (P4Runtime
service up, exact-match forwarding, WRED profile installed, counters) with
ports at 100 Gbps so the traffic manager never throttles: the number is the
pipeline's packet rate, not a configured port rate.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from controlplane.p4names import PORT_TX  # noqa: E402
from emulation.netns import NetnsLab  # noqa: E402
from emulation.target.state import WredProfile  # noqa: E402
from emulation.target.switch import SoftwareSwitch  # noqa: E402
from emulation.target.tm_config import PfcConfig, TmConfig  # noqa: E402

SENDER_CODE = """
import socket, sys, time
frame, seconds, names = bytes.fromhex(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
sends = []
for name in names:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.setsockopt(263, 20, 1)  # PACKET_QDISC_BYPASS
    s.bind((name, 0))
    sends.append(s.send)
end = time.monotonic() + seconds
sent = 0
while time.monotonic() < end:
    for send in sends:
        for _ in range(256):
            try:
                send(frame)
            except OSError:
                pass
        sent += 256
print(sent)
"""

DST_MAC = "02000000b001"
DST_MAC_TEXT = ":".join(DST_MAC[j : j + 2] for j in range(0, 12, 2))


def test_frame(size: int) -> bytes:
    """A UDP frame of `size` bytes with valid checksums (a bridge with
    br_netfilter drops IPv4 headers with bad ones)."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    head = (
        Ether(dst=DST_MAC_TEXT, src="02:00:00:00:0a:01")
        / IP(src="10.0.0.1", dst="10.0.1.1", tos=2)
        / UDP(sport=4000, dport=4791)
    )
    return bytes(head / (b"\x00" * (size - len(head))))


def rx_packets(lab: NetnsLab, ns: str, ifnames: list[str]) -> int:
    paths = [f"/sys/class/net/{name}/statistics/rx_packets" for name in ifnames]
    out = lab.run(ns, ["cat", *paths]).stdout.split()
    return sum(int(v) for v in out)


def build(lab: NetnsLab, pairs: int) -> tuple[str, str, list[str], list[str], dict[int, str]]:
    src = lab.namespace("src")
    dst = lab.namespace("dst")
    sender_ifs, receiver_ifs, ports = [], [], {}
    for i in range(pairs):
        a, sa = lab.veth(f"a{i}", f"sa{i}", ns_a=src)
        sb, b = lab.veth(
            f"sb{i}",
            f"b{i}",
            ns_b=dst,
            mac_b=DST_MAC_TEXT,
        )
        sender_ifs.append(a)
        receiver_ifs.append(b)
        ports[2 * i + 1] = sa
        ports[2 * i + 2] = sb
    return src, dst, sender_ifs, receiver_ifs, ports


def blast(
    lab: NetnsLab,
    src: str,
    dst: str,
    sender_ifs: list[str],
    receiver_ifs: list[str],
    size: int,
    seconds: float,
    senders: int,
    cpu_pids: list[int] | None = None,
) -> tuple[float, int, float]:
    """Received packets/s over the middle of the blast, frames offered, and the
    fraction of one core the `cpu_pids` used meanwhile."""
    frame = test_frame(size)
    groups = [sender_ifs[i::senders] for i in range(senders) if sender_ifs[i::senders]]
    procs = [
        lab.popen(
            src,
            [sys.executable, "-c", SENDER_CODE, frame.hex(), str(seconds + 1.0), *group],
            stdout=-1,
            text=True,
        )
        for group in groups
    ]
    time.sleep(0.5)
    start_count, start = rx_packets(lab, dst, receiver_ifs), time.monotonic()
    pids = cpu_pids or [os.getpid()]
    cpu_start = _cpu_seconds(pids)
    time.sleep(seconds)
    cpu = _cpu_seconds(pids) - cpu_start
    end_count, end = rx_packets(lab, dst, receiver_ifs), time.monotonic()
    offered = 0
    for proc in procs:
        out, _ = proc.communicate(timeout=seconds + 10)
        offered += int(out.strip() or 0)
    return (end_count - start_count) / (end - start), offered, cpu / (end - start)


def _cpu_seconds(pids: list[int]) -> float:
    """CPU time of the processes (the switch: its service here, its packet loop in a child)."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def measure_switch(pairs: int, size: int, seconds: float, senders: int) -> tuple[float, float]:
    """Forwarded packets/s, and the switch's share of one core while forwarding."""
    with NetnsLab(prefix="casbench") as lab:
        src, dst, sender_ifs, receiver_ifs, ports = build(lab, pairs)
        tm = TmConfig(default_rate_gbps=100.0, pfc=PfcConfig(enabled=False))
        with SoftwareSwitch(1, ports, "127.0.0.1:0", tm) as switch:
            dst_mac = bytes.fromhex(DST_MAC)
            switch.forward({(2 * i + 1, dst_mac): 2 * i + 2 for i in range(pairs)})
            switch.wred({2 * i + 2: WredProfile(1000, 2000, 10) for i in range(pairs)})
            assert switch.datapath is not None and switch.datapath.pid is not None
            pps, _offered, cpu = blast(
                lab,
                src,
                dst,
                sender_ifs,
                receiver_ifs,
                size,
                seconds,
                senders,
                [os.getpid(), switch.datapath.pid],
            )
            time.sleep(0.05)
            tx = int(switch.counter(PORT_TX)[:, 0].sum())
            assert tx > 0, "the switch forwarded nothing"
        return pps, cpu


def measure_bridge(pairs: int, size: int, seconds: float, senders: int) -> tuple[float, float]:
    with NetnsLab(prefix="casbench") as lab:
        src, dst, sender_ifs, receiver_ifs, ports = build(lab, pairs)
        for i in range(pairs):
            bridge = f"casbenchbr{i}"
            lab.root_links.append(bridge)
            subprocess.run(["ip", "link", "add", bridge, "type", "bridge"], check=True)
            for ifname in (ports[2 * i + 1], ports[2 * i + 2]):
                subprocess.run(["ip", "link", "set", ifname, "master", bridge], check=True)
            subprocess.run(["ip", "link", "set", bridge, "up"], check=True)
        pps, offered, _cpu = blast(lab, src, dst, sender_ifs, receiver_ifs, size, seconds, senders)
        return pps, offered / (seconds + 1.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--senders", type=int, default=1, help="sender processes")
    parser.add_argument("--sizes", default="64,1500")
    parser.add_argument("--pairs", default="1,4")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    print(
        f"# software target vs Linux bridge: {os.cpu_count()} CPUs, load average {load:.2f} "
        f"at start, {args.seconds:g} s windows, {args.senders} sender process(es)\n"
    )
    print(
        "| frame (no FCS) | port pairs | target pps | target Mbit/s | target CPU (1 core = 100 %) "
        "| target pps per core-second | Linux bridge pps | sender offered pps (bridge run) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for size in [int(s) for s in args.sizes.split(",")]:
        for pairs in [int(p) for p in args.pairs.split(",")]:
            pps, cpu = measure_switch(pairs, size, args.seconds, args.senders)
            bridge_pps, offered = measure_bridge(pairs, size, args.seconds, args.senders)
            print(
                f"| {size} B | {pairs} | {pps:,.0f} | {pps * size * 8 / 1e6:,.0f} "
                f"| {cpu:.0%} | {pps / max(cpu, 1e-9):,.0f} "
                f"| {bridge_pps:,.0f} | {offered:,.0f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
