"""Do the jobs and the switch notice the 10 ms telemetry? The aligned pair, telemetry on and off.

Run as root: `.venv/bin/python benchmarks/bench_telemetry_pairs.py --pairs 3 --iterations 20`.

"On" is what `cassini emulate` does: the packet loop samples every 10 ms
into its ring (`CASSINI_SWITCH_SAMPLING` unset) and the run collects the
samples (`emulation/jobs/job_telemetry.py`: the switch's gNMI STREAM);
"off" is the loop not sampling (`CASSINI_SWITCH_SAMPLING=off`) and the run
collecting nothing (its `RunTelemetry` replaced by one that does nothing).
Each run starts a fabric of its own and runs the shift cases' case (a) (the
pair on one grid, shift 0: the most traffic and queueing on the shared
link); runs alternate off/on, on/off, ... so that a drift of the machine's
load falls on both. Printed per run: the jobs' mean iteration time
(iteration 0 left out), the switch's frame lateness (`/fidelity`, read
before and after), the telemetry's samples and losses, the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from emulation.emulate.fidelity import switch_lateness
from emulation.emulate.runner import read_lateness
from emulation.fabric.emulated import EmulatedFabric
from emulation.fabric.options import FabricOptions
from emulation.fabric.scaling import DEFAULT_SCALE
from emulation.jobs import supervisor
from emulation.jobs.job_telemetry import RunTelemetry, Series
from emulation.jobs.launch import parse_schedule, plan_jobs
from emulation.jobs.run_settings import RunSettings
from emulation.softswitch.datapath_process import SAMPLING_ENV
from topologies.library import load_topology

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_shift_cases import TOPOLOGY, WARMUP, shift_cases  # noqa: E402


class NoTelemetry:
    """A RunTelemetry that installs and collects nothing."""

    def __init__(self, *args: Any) -> None:
        pass

    def start(self) -> NoTelemetry:
        return self

    def stop(self) -> Series:
        return Series()


def one_run(mode: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """One fabric, case (a), the telemetry `mode` ("on" or "off")."""
    os.environ[SAMPLING_ENV] = mode
    chosen: Any = RunTelemetry if mode == "on" else NoTelemetry
    supervisor.RunTelemetry = chosen  # type: ignore[misc]
    topo = load_topology(TOPOLOGY)
    schedule = shift_cases(topo, args.model)["a"]
    jobs = plan_jobs(parse_schedule(schedule, "case a"), topo, where="case")
    load = os.getloadavg()[0]
    with EmulatedFabric(topo, FabricOptions(scale=args.scale)) as fabric:
        before = read_lateness(fabric)
        result = supervisor.run_schedule(fabric, jobs, RunSettings(iterations=args.iterations), out)
        after = read_lateness(fabric)
    kept = [r.iteration_ms for r in result.records if r.iteration >= WARMUP]
    info = result.telemetry_info or {}
    return {
        "telemetry": mode,
        "load_1min": round((load + os.getloadavg()[0]) / 2, 1),
        "switch_cpu_cores": result.fidelity.get("switch_cpu_cores"),
        **switch_lateness(before, after),
        "mean_iteration_ms": round(statistics.fmean(kept), 1) if kept else None,
        "samples": info.get("samples"),
        "lost": info.get("lost_samples"),
        "error": result.error,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=3, help="off/on pairs to run")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--scale", type=float, default=DEFAULT_SCALE)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for pair in range(args.pairs):
            for mode in ("off", "on") if pair % 2 == 0 else ("on", "off"):
                row = one_run(mode, args, Path(scratch) / f"{pair}-{mode}")
                print(row, file=sys.stderr, flush=True)
                rows.append(row)
    print("| telemetry | load | switch CPU | frame lateness p99 ms | frames > 1 ms | "
          "mean iteration ms | samples (lost) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['telemetry']} | {r['load_1min']} | {r['switch_cpu_cores']} | "
            f"{r.get('frame_late_p99_ms')} | {r.get('late_frames')} | "
            f"{r['mean_iteration_ms']} | {r['samples']} ({r['lost']}) |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
