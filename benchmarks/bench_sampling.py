"""What does the switch's 10 ms sampling cost? The shift case, sampling off and on, paired.

Run as root: `.venv/bin/python benchmarks/bench_sampling.py --model resnet50 --iterations 20`;
`--parts` instead measures the parts: one sample over the testbed's chip
ports timed 20,000 times, and an idle two-port switch's packet loop CPU over
10 s with sampling off and on.

The packet loop samples the per-(port, job) counters and the ports' deepest
queues every 10 ms into a ring in shared memory (emulation/softswitch/
sample_ring.py); it reads CASSINI_SWITCH_SAMPLING when it starts ("off": no
sampling). Each run starts a fabric of its own with the variable set, runs
case (a) of `bench_shift_cases.py` (the pair on one grid, shift 0: the case
with the most traffic and queueing on the shared link), and prints the
switch's CPU (its service and packet loop over the run, 1.0 = one core,
`switch_cpu_cores` of the run), the frames it handed to hosts and how late
(`/fidelity` over gNMI, read before and after the run: p99 and max lateness,
frames later than 1.024 ms, late loop wake-ups) and the jobs' mean
iteration time. Runs alternate off/on, on/off, ... so that a drift of the
machine's load falls on both. A run subscribes to the switch's gNMI STREAM
of the ring (`emulation/jobs/job_telemetry.py`), which has nothing to send
when the loop does not sample; `--no-gnmi` collects by P4Runtime reads
instead, the same work either way, so that only the loop's sampling differs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from bench_shift_cases import WARMUP, shift_cases

from emulation.emulate.fidelity import switch_lateness
from emulation.emulate.runner import read_lateness
from emulation.fabric.emulated import EmulatedFabric
from emulation.fabric.netns import NetnsLab
from emulation.fabric.options import FabricOptions
from emulation.fabric.scaling import DEFAULT_SCALE
from emulation.jobs.launch import parse_schedule, plan_jobs
from emulation.jobs.run_settings import RunSettings
from emulation.jobs.supervisor import run_schedule
from emulation.softswitch.datapath_process import SAMPLING_ENV
from emulation.softswitch.fast_pipeline import FastSwitchProgram
from emulation.softswitch.sample_ring import SampleRing, ring_words
from emulation.softswitch.state import DataplaneState
from emulation.softswitch.switch import SoftwareSwitch
from emulation.softswitch.tm_config import TmConfig
from topologies.chip_mapping import map_to_chip
from topologies.library import load_topology

TOPOLOGY = "cassini-testbed"


def one_run(sampling: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """One fabric, one case, with the switch's sampling `sampling` ("on" or "off")."""
    os.environ[SAMPLING_ENV] = sampling
    topo = load_topology(TOPOLOGY)
    schedule = shift_cases(topo, args.model)[args.case]
    jobs = plan_jobs(parse_schedule(schedule, f"case {args.case}"), topo, where="case")
    with EmulatedFabric(topo, FabricOptions(scale=args.scale)) as fabric:
        before = read_lateness(fabric)
        settings = RunSettings(iterations=args.iterations, gnmi=not args.no_gnmi)
        result = run_schedule(fabric, jobs, settings, out)
        after = read_lateness(fabric)
    kept = [r.iteration_ms for r in result.records if r.iteration >= WARMUP]
    return {
        "sampling": sampling,
        "switch_cpu_cores": result.fidelity.get("switch_cpu_cores"),
        **switch_lateness(before, after),
        "mean_iteration_ms": round(statistics.fmean(kept), 1) if kept else None,
        "median_iteration_ms": round(statistics.median(kept), 1) if kept else None,
        "switch_ecn_marked": result.switch_ecn_marked,
        "error": result.error,
    }


def sample_cost(samples: int = 20_000) -> str:
    """Microseconds per sample of the compiled pipeline over the testbed's chip ports."""
    ports = sorted(map_to_chip(load_topology(TOPOLOGY)).ports())
    program = FastSwitchProgram(DataplaneState(), TmConfig(), ports)
    ring = SampleRing(np.zeros(ring_words(len(program.ports)), np.int64), program.ports)
    program.start_sampling(ring, 0.0)
    start = time.perf_counter()
    for i in range(samples):
        program.sample(i * 0.01, i * 0.01)
    each = (time.perf_counter() - start) / samples
    return f"{len(ports)} ports: {each * 1e6:.2f} us per sample, {each * 1e4:.3f}% of a core"


def idle_cpu(sampling: str, seconds: float = 10.0) -> str:
    """An idle two-port switch's packet loop CPU (ticks of /proc/PID/stat)."""
    os.environ[SAMPLING_ENV] = sampling

    def cpu_s(pid: int) -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    with NetnsLab() as lab:
        ports = {}
        for i in (1, 2):
            ns = lab.namespace(f"h{i}")
            _host, switch_end = lab.veth(f"h{i}", f"s{i}", ns_a=ns)
            ports[i] = switch_end
        with SoftwareSwitch(1, ports, None, TmConfig()) as switch:
            assert switch.datapath is not None and switch.datapath.pid is not None
            pid = switch.datapath.pid
            time.sleep(1.0)
            before, start = cpu_s(pid), time.monotonic()
            time.sleep(seconds)
            used = (cpu_s(pid) - before) / (time.monotonic() - start)
    return f"sampling {sampling}: idle loop {used:.2%} of a core"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--case", default="a", choices=("a", "b", "c"))
    parser.add_argument("--pairs", type=int, default=1, help="off/on pairs to run")
    parser.add_argument("--scale", type=float, default=DEFAULT_SCALE)
    parser.add_argument("--parts", action="store_true", help="measure the parts only")
    parser.add_argument(
        "--no-gnmi",
        action="store_true",
        help="the run's telemetry by P4Runtime reads of the job counters, not the gNMI "
        "STREAM of the ring: the same work whether the loop samples or not",
    )
    args = parser.parse_args()
    if args.parts:
        print(sample_cost())
        for sampling in ("off", "on", "off", "on"):
            print(idle_cpu(sampling), flush=True)
        return 0
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for pair in range(args.pairs):
            order = ("off", "on") if pair % 2 == 0 else ("on", "off")
            for sampling in order:
                row = one_run(sampling, args, Path(scratch) / f"{pair}-{sampling}")
                print(row, file=sys.stderr, flush=True)
                rows.append(row)
    print("| sampling | switch CPU (cores) | frames | frame lateness p99 ms | max ms | "
          "frames > 1 ms | late wake-ups | mean iteration ms | median | CE marks |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['sampling']} | {r['switch_cpu_cores']} | {r.get('frames')} | "
            f"{r.get('frame_late_p99_ms')} | {r.get('frame_late_max_ms')} | "
            f"{r.get('late_frames')} | {r.get('late_wakeups')} | {r['mean_iteration_ms']} | "
            f"{r['median_iteration_ms']} | {r['switch_ecn_marked']} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
