"""Forwarding rate of the software P4Runtime target next to a Linux bridge.

Builds, per port pair, sender namespace -> veth -> switch port -> switch port
-> veth -> receiver namespace; blasts prebuilt UDP frames with raw sockets
from the sender namespace and counts what the receiving interfaces got over
a measurement window. Needs root; everything it creates is removed on exit
(also on Ctrl-C).

    sudo .venv/bin/python benchmarks/bench_target.py [--seconds 3] [--senders 3] [--hops 1,3,5]

Prints a Markdown table. The switch runs the full pipeline (P4Runtime
service up, exact-match forwarding, WRED profile installed, counters) with
ports at 100 Gbps so the traffic manager never throttles: the number is the
pipeline's packet rate, not a configured port rate. A path of h hops crosses
h logical switches: h - 1 loopback cables inside the switch, as the fabric's
paths do. Each row runs the Python reference pipeline and the compiled one
side by side; several sender processes share the interfaces so the sender
is not the bottleneck (the bridge run's offered rate shows what they offer).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from controlplane.p4names import PORT_TX  # noqa: E402
from emulation.fabric.netns import NetnsLab  # noqa: E402
from emulation.jobs.cpu_usage import cpu_seconds  # noqa: E402
from emulation.softswitch.state import WredProfile  # noqa: E402
from emulation.softswitch.switch import SoftwareSwitch  # noqa: E402
from emulation.softswitch.tm_config import LoopbackCable, PfcConfig, TmConfig  # noqa: E402

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
    # Every interface gets at least one sender process; with more processes than
    # interfaces, several share one (the sender must not be the bottleneck).
    groups = [
        [sender_ifs[j] for j in range(len(sender_ifs)) if j % senders == i % senders]
        or [sender_ifs[i % len(sender_ifs)]]
        for i in range(max(senders, 1))
    ]
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
    cpu_start = cpu_seconds(pids)
    time.sleep(seconds)
    cpu = cpu_seconds(pids) - cpu_start
    end_count, end = rx_packets(lab, dst, receiver_ifs), time.monotonic()
    offered = 0
    for proc in procs:
        out, _ = proc.communicate(timeout=seconds + 10)
        offered += int(out.strip() or 0)
    return (end_count - start_count) / (end - start), offered, cpu / (end - start)


def py_spy_profile(pid: int, seconds: float, out: Path) -> Callable[[], None]:
    """Start sampling `pid` with py-spy (native frames too); the returned call waits for
    it and writes the functions with the most samples, self and total, to `out`."""
    raw = out.with_suffix(".raw")
    py_spy = str(Path(sys.executable).parent / "py-spy")
    proc = subprocess.Popen(
        [
            py_spy,
            "record",
            "-p",
            str(pid),
            "-d",
            str(max(1, int(seconds))),
            "-r",
            "200",
            "--native",
            "--format",
            "raw",
            "-o",
            str(raw),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def finish() -> None:
        proc.wait(timeout=seconds + 60)
        own: dict[str, int] = {}
        inclusive: dict[str, int] = {}
        samples = 0
        for line in raw.read_text().splitlines():
            stack, _, count_text = line.rpartition(" ")
            count = int(count_text)
            frames = stack.split(";")
            samples += count
            own[frames[-1]] = own.get(frames[-1], 0) + count
            for frame in set(frames):
                inclusive[frame] = inclusive.get(frame, 0) + count
        lines = [f"# py-spy, pid {pid}, {samples} samples"]
        for title, table in (("self", own), ("total", inclusive)):
            lines.append(f"\n## {title}")
            for frame, count in sorted(table.items(), key=lambda kv: -kv[1])[:40]:
                lines.append(f"{count / max(samples, 1):6.1%}  {frame}")
        out.write_text("\n".join(lines) + "\n")

    return finish


def hop_ports(pairs: int, hops: int) -> tuple[list[LoopbackCable], dict[tuple[int, bytes], int]]:
    """Loopback cables and forwarding entries that take pair i's frames from port 2i+1
    over `hops` logical switches (hops - 1 cables inside the switch) to port 2i+2."""
    dst_mac = bytes.fromhex(DST_MAC)
    cables, entries = [], {}
    for i in range(pairs):
        at = 2 * i + 1
        for k in range(hops - 1):
            a, b = 100 + 10 * i + 2 * k, 100 + 10 * i + 2 * k + 1
            cables.append(LoopbackCable(a, b, 1.0))
            entries[(at, dst_mac)] = a
            at = b
        entries[(at, dst_mac)] = 2 * i + 2
    return cables, entries


def measure_switch(
    pairs: int,
    size: int,
    seconds: float,
    senders: int,
    hops: int = 1,
    fast: bool = True,
    profile: Path | None = None,
) -> tuple[float, float]:
    """Forwarded packets/s, and the switch's share of one core while forwarding
    (`profile`: py-spy's summary of the packet loop to that file)."""
    with NetnsLab(prefix="casbench") as lab:
        src, dst, sender_ifs, receiver_ifs, ports = build(lab, pairs)
        cables, entries = hop_ports(pairs, hops)
        tm = TmConfig(
            default_rate_gbps=100.0, pfc=PfcConfig(enabled=False), loopback_cables=tuple(cables)
        )
        with SoftwareSwitch(1, ports, "127.0.0.1:0", tm, fast=fast) as switch:
            switch.forward(entries)
            switch.wred({out: WredProfile(1000, 2000, 10) for out in entries.values()})
            assert switch.datapath is not None and switch.datapath.pid is not None
            finish = None
            if profile is not None:
                finish = py_spy_profile(switch.datapath.pid, seconds + 0.5, profile)
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
            if finish is not None:
                finish()
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
    parser.add_argument("--senders", type=int, default=3, help="sender processes")
    parser.add_argument("--sizes", default="64,1500")
    parser.add_argument("--pairs", default="1,4")
    parser.add_argument("--hops", default="1,3,5", help="logical switches on each path")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    print(
        f"# software target (Python reference vs compiled pipeline) vs Linux bridge: "
        f"{os.cpu_count()} CPUs, load average {load:.2f} at start, {args.seconds:g} s "
        f"windows, {args.senders} sender process(es)\n"
    )
    print(
        "| frame (no FCS) | hops | port pairs | reference pps | reference CPU "
        "| reference pps per core-second | compiled pps | compiled CPU "
        "| compiled pps per core-second | per core-second ratio "
        "| Linux bridge pps (1 hop) | sender offered pps (bridge run) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for size in [int(s) for s in args.sizes.split(",")]:
        for pairs in [int(p) for p in args.pairs.split(",")]:
            bridge_pps, offered = measure_bridge(pairs, size, args.seconds, args.senders)
            for hops in [int(h) for h in args.hops.split(",")]:
                ref_pps, ref_cpu = measure_switch(
                    pairs, size, args.seconds, args.senders, hops, fast=False
                )
                pps, cpu = measure_switch(pairs, size, args.seconds, args.senders, hops)
                ref_core = ref_pps / max(ref_cpu, 1e-9)
                core = pps / max(cpu, 1e-9)
                print(
                    f"| {size} B | {hops} | {pairs} | {ref_pps:,.0f} | {ref_cpu:.0%} "
                    f"| {ref_core:,.0f} | {pps:,.0f} | {cpu:.0%} | {core:,.0f} "
                    f"| {core / max(ref_core, 1e-9):.2f} | {bridge_pps:,.0f} | {offered:,.0f} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
