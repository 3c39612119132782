"""Twelve TCP flows across the emulated fabric: aggregate, fairness, switch CPU.

`cassini fabric up` at the given scale (default S = 0.001: 50 Mbit/s links),
then one TCP flow from each of s01-s12 to s13-s24 (the servers of one pod to
the other's, five logical switches each way), every flow as fast as TCP goes
for the window. Prints the flows' goodput, their sum against the ceiling
(the largest total the routed paths carry at the link rates, a small linear
program, converted to TCP goodput: payload over wire bytes per frame; the
paths are the chip's, `Router.path`, so the ceiling is below the 2:1 cut's
300 Mbit/s), Jain's fairness index of the flows (and of the max-min fair
allocation, from the fluid simulator's `max_min_rates`: the fairest the
routing allows), and the CPU the switch's processes used.

    sudo .venv/bin/python benchmarks/bench_fabric_flows.py [--seconds 10] [--profile out.txt]

`--profile FILE` samples the packet loop with py-spy during the window and
writes the functions that took the most samples (self and total).
No iperf3 here: the sender and receiver are the small scripts below.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_target import py_spy_profile  # noqa: E402

from emulation.fabric.emulated import EmulatedFabric  # noqa: E402
from emulation.fabric.options import FabricOptions  # noqa: E402
from emulation.jobs.cpu_usage import cpu_seconds, process_tree  # noqa: E402
from scheduler.workloads.max_min import max_min_rates  # noqa: E402
from topologies.library import load_topology  # noqa: E402
from topologies.routing import Router  # noqa: E402

PORT = 5201
# IPv4 20 + TCP 20 + timestamps 12 = 52 header bytes in a 1500-byte MTU.
MSS_BYTES = 1448
FRAME_BYTES = 1514

RECEIVER = """
import json, socket, sys, time
start, end = float(sys.argv[1]), float(sys.argv[2])
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("0.0.0.0", int(sys.argv[3])))
server.listen(1)
print("listening", flush=True)
conn, _ = server.accept()
conn.settimeout(0.2)  # a stalled flow must not keep us past the window
buffer = bytearray(1 << 18)
counted = 0
while time.monotonic() < end:
    try:
        n = conn.recv_into(buffer)
    except socket.timeout:
        continue
    now = time.monotonic()
    if not n or now >= end:
        break
    if now >= start:
        counted += n
print(json.dumps({"bytes": counted, "seconds": end - start}), flush=True)
"""

SENDER = """
import socket, sys, time
host, port, go, end = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
sock = socket.create_connection((host, port), timeout=10)
# Every flow connects before any sends: under load a SYN (not ECN-capable) meets
# WRED's drops in a full queue, and a late flow could miss the window altogether.
time.sleep(max(0.0, go - time.monotonic()))
chunk = bytes(1 << 16)
while time.monotonic() < end:
    try:
        sock.sendall(chunk)
    except OSError:
        break
sock.close()
"""


def jain(values: list[float] | np.ndarray) -> float:
    """Jain's fairness index: (sum x)^2 / (n sum x^2); 1 when all are equal."""
    x = np.asarray(values, dtype=float)
    return float(x.sum() ** 2 / (len(x) * (x**2).sum())) if (x**2).sum() > 0 else 0.0


def max_total(incidence: np.ndarray, capacity: float) -> float:
    """Largest sum of flow rates over fixed paths (maximise 1.x, A x <= c, x >= 0): a
    small tableau simplex with Bland's rule (the origin is feasible)."""
    links, flows = incidence.T.shape
    table = np.zeros((links + 1, flows + links + 1))
    table[:links, :flows] = incidence.T
    table[:links, flows : flows + links] = np.eye(links)
    table[:links, -1] = capacity
    table[-1, :flows] = -1.0
    while True:
        entering = next((j for j in range(flows + links) if table[-1, j] < -1e-12), None)
        if entering is None:
            return float(table[-1, -1])
        column = table[:links, entering]
        ratios = [(table[i, -1] / column[i], i) for i in range(links) if column[i] > 1e-12]
        _ratio, row = min(ratios)
        table[row] /= table[row, entering]
        for i in range(links + 1):
            if i != row:
                table[i] -= table[i, entering] * table[row]


def ceiling(
    topo_name: str, pairs: list[tuple[str, str]], link_mbps: float, overhead: int
) -> tuple[np.ndarray, float, float, np.ndarray]:
    """Max-min goodput (Mbit/s) per flow over the routed paths, the largest total goodput
    those paths allow, the wire->goodput factor and the flows x links incidence."""
    topo = load_topology(topo_name)
    router = Router(topo)
    links: dict[object, int] = {}
    rows = []
    for src, dst in pairs:
        crossed = Router.path_links(router.path(src, dst))
        rows.append([links.setdefault(link, len(links)) for link in crossed])
    incidence = np.zeros((len(pairs), len(links)), dtype=bool)
    for f, row in enumerate(rows):
        incidence[f, row] = True
    wire = max_min_rates(incidence, np.full(len(pairs), np.inf), np.full(len(links), link_mbps))
    factor = MSS_BYTES / (FRAME_BYTES + overhead)
    return wire * factor, max_total(incidence, link_mbps) * factor, factor, incidence


def bottleneck_use(
    incidence: np.ndarray, fair: np.ndarray, measured: np.ndarray, capacity: float
) -> np.ndarray:
    """How full the measured flows kept each link the max-min allocation fills (its
    bottlenecks): what TCP's sharing can reach, where the max-total ceiling needs an
    unfair split."""
    full = incidence.T.astype(float) @ fair >= capacity * (1 - 1e-6)
    return (incidence.T.astype(float) @ measured)[full] / capacity


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topology", default="cassini-testbed")
    parser.add_argument("--scale", type=float, default=0.001)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--flows", type=int, default=12)
    parser.add_argument("--profile", help="py-spy summary of the packet loop to this file")
    parser.add_argument("--no-pfc", action="store_true", help="the fabric without PFC")
    parser.add_argument(
        "--no-pin",
        action="store_true",
        help="the packet loop not pinned and the hosts' receive work not steered away from "
        "it (before emulation/housekeeping/cpu_split.py)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    pairs = [(f"s{i:02d}", f"s{i + args.flows:02d}") for i in range(1, args.flows + 1)]
    topo = load_topology(args.topology)
    options = FabricOptions(scale=args.scale, pfc=not args.no_pfc, pin_loop=not args.no_pin)
    with EmulatedFabric(topo, options) as fabric:
        tm = fabric.profile.tm
        link_mbps = tm.default_rate_gbps * 1e3
        fair, most, factor, incidence = ceiling(
            args.topology, pairs, link_mbps, tm.wire_overhead_bytes
        )
        now = time.monotonic()
        start = now + 2.0 + args.warmup
        end = start + args.seconds
        receivers = []
        for _src, dst in pairs:
            proc = fabric.lab.popen(
                fabric.hosts[dst].namespace,
                [sys.executable, "-c", RECEIVER, str(start), str(end), str(PORT)],
                stdout=subprocess.PIPE,
                text=True,
            )
            receivers.append(proc)
        for proc in receivers:
            assert proc.stdout is not None
            proc.stdout.readline()
        senders = [
            fabric.lab.popen(
                fabric.hosts[src].namespace,
                [
                    sys.executable,
                    "-c",
                    SENDER,
                    fabric.hosts[dst].ip,
                    str(PORT),
                    str(start - args.warmup),
                    str(end + 0.5),
                ],
            )
            for src, dst in pairs
        ]
        switch_pid = fabric.switch_pid
        assert switch_pid is not None
        pids = process_tree(switch_pid)
        time.sleep(max(0.0, start - time.monotonic()))
        cpu0, loop0, t0 = cpu_seconds(pids), cpu_seconds([max(pids)]), time.monotonic()
        profiler = None
        if args.profile:
            loop_pid = max(pids)  # the packet loop is the newest process of the switch
            profiler = py_spy_profile(loop_pid, args.seconds - 0.5, Path(args.profile))
        time.sleep(max(0.0, end - time.monotonic()))
        elapsed = time.monotonic() - t0
        cpu = (cpu_seconds(pids) - cpu0) / elapsed
        loop_cpu = (cpu_seconds([max(pids)]) - loop0) / elapsed
        if profiler is not None:
            profiler()
        rates = []
        for proc in receivers:
            out, _ = proc.communicate(timeout=30)
            record = json.loads(out.strip().splitlines()[-1])
            rates.append(record["bytes"] * 8 / record["seconds"] / 1e6)
        for proc in senders:
            proc.wait(timeout=30)
    total, best = sum(rates), most
    use = bottleneck_use(incidence, fair, np.array(rates), link_mbps * factor)
    result = {
        "flows": dict(zip([f"{s}->{d}" for s, d in pairs], rates, strict=True)),
        "aggregate_mbps": total,
        "ceiling_mbps": best,
        "max_min_total_mbps": float(fair.sum()),
        "of_ceiling": total / best,
        "jain": jain(rates),
        "jain_max_min": jain(fair),
        "bottleneck_links": len(use),
        "bottleneck_use_min": float(use.min()),
        "bottleneck_use_mean": float(use.mean()),
        "switch_cpu": cpu,
        "packet_loop_cpu": loop_cpu,
        "goodput_per_wire": factor,
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(
        f"# {args.flows} TCP flows, {args.topology} at S = {args.scale:g} "
        f"({link_mbps:g} Mbit/s links, PFC {'off' if args.no_pfc else 'on'}"
        f"{', loop not pinned' if args.no_pin else ''}), "
        f"{args.seconds:g} s window, "
        f"load average {os.getloadavg()[0]:.2f}\n"
    )
    print("| flow | goodput Mbit/s | max-min share |")
    print("|---|---|---|")
    for (pair, rate), share in zip(result["flows"].items(), fair, strict=True):
        print(f"| {pair} | {rate:.1f} | {share:.1f} |")
    print(
        f"\naggregate {total:.1f} Mbit/s of a {best:.1f} Mbit/s goodput ceiling "
        f"({total / best:.1%}; the most the routed paths carry, {best / factor:.0f} Mbit/s "
        f"on the wire; max-min fair total {float(fair.sum()):.1f}), "
        f"Jain {result['jain']:.3f} (max-min allocation {result['jain_max_min']:.3f}), "
        f"switch CPU {cpu:.0%} of a core (service + packet loop; the loop alone {loop_cpu:.0%}); "
        f"the {len(use)} links the max-min allocation fills carried {use.min():.1%}-"
        f"{use.max():.1%} of their goodput (mean {use.mean():.1%})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
