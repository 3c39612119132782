"""MLTCP on the shift cases' interleavable pair: do the jobs fall into turns by themselves?

Run as root: `.venv/bin/python benchmarks/bench_mltcp_pair.py --out DIR [--no-pfc]`,
then `.venv/bin/python benchmarks/mltcp_turns.py DIR/*`.

Two WideResNet101 jobs sharing tor1->agg1 (`bench_shift_cases.shift_cases`,
case (a): aligned), over RoCE, on one fabric, three ways: `dcqcn` (case (a)'s
schedule, both paced on one grid with shift 0), `dcqcn-unpaced` (no grid: the
control for MLTCP, whose agents do not pace) and `mltcp` (`--policy mltcp`).
The same runs as `cassini fabric run --transport roce [--policy mltcp]` on the
schedule; `--no-pfc` turns the switch's PFC off, which the command line does
not offer, to see whether the hosts' DCQCN alone decides the sharing.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bench_shift_cases import TOPOLOGY, shift_cases  # beside this file

from emulation.fabric.emulated import EmulatedFabric
from emulation.fabric.options import FabricOptions
from emulation.fabric.scaling import DEFAULT_SCALE
from emulation.jobs.launch import parse_schedule, plan_jobs
from emulation.jobs.run_folder import write_run
from emulation.jobs.run_result import RunResult
from emulation.jobs.run_settings import RunSettings
from emulation.jobs.supervisor import run_schedule
from topologies.library import load_topology
from topologies.model import Topology


def pair_ways(
    topo: Topology, model: str = "wideresnet101"
) -> list[tuple[str, dict[str, Any], str]]:
    """The three ways (name, schedule, policy), all over RoCE."""
    aligned = shift_cases(topo, model)["a"]
    unpaced = {k: v for k, v in aligned.items() if k != "periods_ms"}
    return [("dcqcn", aligned, "none"), ("dcqcn-unpaced", unpaced, "none"),
            ("mltcp", aligned, "mltcp")]  # fmt: skip


def run_way(fabric: EmulatedFabric, name: str, schedule: dict[str, Any],
            settings: RunSettings, folder: Path) -> RunResult:  # fmt: skip
    """One run of one way on the running fabric, its files written into `folder`."""
    jobs = plan_jobs(parse_schedule(schedule, name), fabric.topo, where=name)
    folder.mkdir(parents=True, exist_ok=True)
    result = run_schedule(fabric, jobs, settings, folder)
    write_run(result, folder)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--runs", type=int, default=1, help="runs of each way")
    parser.add_argument("--no-pfc", action="store_true", help="the switch sends no pauses")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    topo = load_topology(TOPOLOGY)
    ways = pair_ways(topo)
    options = FabricOptions(scale=DEFAULT_SCALE, pfc=not args.no_pfc)
    with EmulatedFabric(topo, options) as fabric:
        for run in range(1, args.runs + 1):
            for name, schedule, policy in ways:
                settings = RunSettings(iterations=args.iterations, transport="roce", policy=policy)
                folder = args.out / f"{name}-{run}"
                result = run_way(fabric, name, schedule, settings, folder)
                print(f"{folder}: {result.error or 'ok'}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
