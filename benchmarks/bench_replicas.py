"""CPU of job replicas per Gbit/s of emulated traffic, next to the switch's.

Brings up a fabric at scale S, runs one data-parallel job (ring AllReduce,
the model's profile, unpaced: iterations back to back) with one replica per
server, and measures each replica's CPU time exactly (the rusage `wait4`
returns for the process) and the software switch's (its process tree's
/proc/<pid>/stat) over the run. Traffic is the bytes the replicas sent
(their records) over the run's wall time. Needs root; the fabric is torn
down on exit.

    sudo .venv/bin/python benchmarks/bench_replicas.py \
        [--topology leaf-spine:2:1:4] [--workers 8] [--iterations 20] [--scale 0.001]

Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from emulation.fabric.emulated import EmulatedFabric  # noqa: E402
from emulation.fabric.options import FabricOptions  # noqa: E402
from emulation.jobs.cpu_usage import cpu_seconds, process_tree  # noqa: E402
from emulation.jobs.records import read_records  # noqa: E402
from emulation.jobs.replica import ReplicaSpec  # noqa: E402
from emulation.jobs.ring import Address  # noqa: E402
from scheduler.workloads.profiles import build_profile  # noqa: E402
from topologies.library import load_topology  # noqa: E402


def tree_cpu_s(pid: int) -> float:
    """utime + stime of a process and its descendants (seconds)."""
    return cpu_seconds(process_tree(pid))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--topology", default="leaf-spine:2:1:4")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--model", default="vgg19")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--scale", type=float, default=0.001)
    parser.add_argument("--congestion-control", default="cubic")
    args = parser.parse_args()
    topo = load_topology(args.topology)
    profile = build_profile(args.model, args.workers, nic_gbps=topo.nic_gbps())
    options = FabricOptions(scale=args.scale)
    with tempfile.TemporaryDirectory() as out, EmulatedFabric(topo, options) as fabric:
        servers = sorted(fabric.hosts)[: args.workers]
        peers = tuple(Address(fabric.hosts[s].ip, 47000) for s in servers)
        specs = [
            ReplicaSpec(
                job="bench", model=args.model, worker=w, peers=peers, phases=profile.phases,
                out=f"{out}/w{w}.jsonl", iterations=args.iterations, scale=args.scale,
                nic_gbps=topo.nic_gbps(), congestion_control=args.congestion_control,
            )
            for w in range(len(servers))
        ]  # fmt: skip
        switch_pid = fabric.switch_pid
        switch_before = tree_cpu_s(switch_pid) if switch_pid else 0.0
        started = time.monotonic()
        processes = [
            fabric.lab.popen(fabric.hosts[servers[s.worker]].namespace, s.argv(),
                             stderr=subprocess.DEVNULL)
            for s in specs
        ]  # fmt: skip
        cpu = []
        for process in processes:
            _, status, usage = os.wait4(process.pid, 0)
            process.returncode = os.waitstatus_to_exitcode(status)
            if process.returncode != 0:
                raise SystemExit(f"replica pid {process.pid} exited {process.returncode}")
            cpu.append(usage.ru_utime + usage.ru_stime)
        wall = time.monotonic() - started
        switch_cpu = (tree_cpu_s(switch_pid) - switch_before) if switch_pid else float("nan")
        records = [r for s in specs for r in read_records(s.out)]
    sent_bits = 8 * sum(r.bytes for r in records)
    first = min(r.start_ms for r in records)
    last = max(r.end_ms for r in records)
    run_s = (last - first) / 1e3
    gbps = sent_bits / run_s / 1e9
    replica_cores = sum(cpu) / wall
    iteration = sorted(r.iteration_ms for r in records)
    print(f"{args.workers} replicas, {args.model} ({profile.iteration_ms:.0f} ms profile), "
          f"S = {args.scale}, {args.iterations} iterations, {args.congestion_control}")  # fmt: skip
    print()
    print("| quantity | value |")
    print("|---|---|")
    print(f"| emulated traffic (replicas' bytes / iteration span) | {gbps * 1e3:.1f} Mbit/s |")
    print(f"| replica CPU, all replicas (incl. start-up) | {sum(cpu):.2f} s over {wall:.1f} s |")
    print(f"| replica CPU per replica | {replica_cores / len(cpu):.3f} cores |")
    print(f"| replica CPU per emulated Gbit/s | {replica_cores / gbps:.1f} cores |")
    print(f"| switch CPU | {switch_cpu / wall:.2f} cores |")
    print(f"| switch CPU per emulated Gbit/s | {switch_cpu / wall / gbps:.1f} cores |")
    print(f"| median iteration | {iteration[len(iteration) // 2]:.0f} ms |")


if __name__ == "__main__":
    main()
