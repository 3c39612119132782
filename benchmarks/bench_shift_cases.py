"""Two VGG19 jobs sharing one ToR uplink: no shift, Cassini's shift, one job alone.

Run as root: `.venv/bin/python benchmarks/bench_shift_cases.py --iterations 40 [--transport roce]`.

On the default testbed at S = 0.001, job vgg19-0 runs on s01, s02 (tor1)
and s05, s06 (tor2), job vgg19-1 on s03, s04 (tor1) and s13, s14 (tor4):
their rings share exactly one directed link, tor1's uplink to agg1 (2:1:
two 50 Mbit/s senders into one 50 Mbit/s link). Cases, on one fabric:

- (a) both paced on one grid with shift 0: their Up phases overlap;
- (b) the shift and period `cassini compat --jobs vgg19,vgg19` gives;
  (`--model wideresnet101`: two of that model instead, a pair Cassini can
  interleave fully, compatibility score 1.0, where the VGG19 pair's Up
  phases, 138 ms each in a 253 ms period, cannot be);
- (c) vgg19-0 alone.

Printed per case: CE marks per iteration (counted at the receiving hosts,
summed over a job's workers) and on the shared link (the switch's
counter), mean and p99 iteration time, the mean over the profile's
iteration time and over the fluid simulator's mean for the same schedule.
Iteration 0 (connections' slow start) is left out of the figures (our
choice); every iteration is in each case's folder. Goals (issue 14, section 5) are checked
and printed as met or missed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from emulation.emulate.plan import shared_links
from emulation.fabric.emulated import EmulatedFabric
from emulation.fabric.options import FabricOptions
from emulation.fabric.scaling import DEFAULT_SCALE
from emulation.jobs.launch import JobPlan, parse_schedule, plan_jobs
from emulation.jobs.prediction import simulated_means
from emulation.jobs.run_folder import write_run
from emulation.jobs.run_result import RunResult
from emulation.jobs.run_settings import RunSettings
from emulation.jobs.supervisor import run_schedule
from scheduler.cassini.plans import plan_link
from scheduler.workloads.profiles import profiles_from_list
from topologies.library import load_topology
from topologies.model import Topology

TOPOLOGY = "cassini-testbed"
JOB_A, JOB_B = "vgg19-0", "vgg19-1"
SERVERS_A = ("s01", "s02", "s05", "s06")
SERVERS_B = ("s03", "s04", "s13", "s14")
WARMUP = 1  # iterations left out of the figures


def shift_cases(
    topo: Topology, model: str = "vgg19", stretch: float = 1.0
) -> dict[str, dict[str, Any]]:
    """The three schedules (schedule-file keys), with Cassini's shift for (b); `stretch`
    scales the period and the shift alike (the pattern kept, the grid slower)."""
    job_a, job_b = (JOB_A, JOB_B) if model == "vgg19" else (f"{model}-0", f"{model}-1")
    pair = {job_a: SERVERS_A, job_b: SERVERS_B}
    shared = list(shared_links(pair, topo))
    if len(shared) != 1 or not shared[0].startswith("tor"):
        raise SystemExit(f"placement shares {shared}, not exactly one ToR uplink")
    # What `cassini compat --jobs vgg19,vgg19` computes (a 50 Gbps link, 5 degrees).
    profiles = profiles_from_list(f"{model},{model}", 4)
    link = plan_link(profiles, topo.nic_gbps(), 5.0, "auto", pace=True)
    names = list(link.solution.shifts_ms)  # vgg19, vgg19#2
    shift = (link.solution.shifts_ms[names[1]] - link.solution.shifts_ms[names[0]]) * stretch
    period = link.periods_ms[names[0]] * stretch
    both = {job_a: list(SERVERS_A), job_b: list(SERVERS_B)}
    return {
        "a": {"placement": both, "shifts_ms": {job_a: 0.0, job_b: 0.0},
              "periods_ms": {job_a: period, job_b: period}},
        "b": {"placement": both, "shifts_ms": {job_a: 0.0, job_b: shift},
              "periods_ms": {job_a: period, job_b: period}},
        "c": {"placement": {job_a: list(SERVERS_A)}, "periods_ms": {job_a: period}},
        "shared_link": shared[0],  # type: ignore[dict-item]
    }  # fmt: skip


@dataclass(frozen=True)
class CaseFigures:
    case: str
    shift_ms: float
    iterations: int  # per job, after the warm-up
    ce_per_iteration: float  # host CE marks per job-iteration
    iterations_marked: float  # fraction of job-iterations with a CE mark
    shared_link_marks: int  # the switch's ecn_marked on the shared link
    switch_ecn_marked: int
    host_ce_marks: int | None
    mean_ms: float
    p99_ms: float
    profile_ms: float
    simulated_ms: float
    error: str | None
    cnps: int | None = None  # RoCE: CNPs the receivers sent; None under TCP
    drops: int = 0  # every loss the switch's ports counted
    pause_frames: int | None = None  # RoCE: the switch's pauses the hosts honoured
    paused_ms: float | None = None  # RoCE: how long they stopped the senders


def figures(case: str, result: RunResult, jobs: tuple[JobPlan, ...], shared: str,
            simulated: dict[str, float]) -> CaseFigures:  # fmt: skip
    """One case's row, from the run's records and counter series."""
    kept = [r for r in result.records if r.iteration >= WARMUP]
    times = np.array([r.iteration_ms for r in kept], dtype=float)
    per_iteration: dict[tuple[str, int], int] = {}
    for r in kept:
        key = (r.job, r.iteration)
        per_iteration[key] = per_iteration.get(key, 0) + (r.ce_marks or 0)
    marks = list(per_iteration.values())
    return CaseFigures(
        case=case,
        shift_ms=max(j.shift_ms for j in jobs),
        iterations=len(marks) // len(jobs) if marks else 0,
        ce_per_iteration=statistics.fmean(marks) if marks else 0.0,
        iterations_marked=sum(1 for m in marks if m > 0) / len(marks) if marks else 0.0,
        shared_link_marks=sum(r.ecn_marked_packets for r in result.links if r.link == shared),
        switch_ecn_marked=result.switch_ecn_marked,
        host_ce_marks=result.host_ce_marks,
        mean_ms=float(times.mean()) if times.size else float("nan"),
        p99_ms=float(np.percentile(times, 99)) if times.size else float("nan"),
        profile_ms=jobs[0].profile.iteration_ms,
        simulated_ms=statistics.fmean(simulated.values()),
        error=result.error,
        cnps=result.cnps,
        drops=result.drops,
        pause_frames=result.pfc_pause_frames,
        paused_ms=result.pfc_paused_ms,
    )



def run_cases(fabric: EmulatedFabric, topo: Topology, iterations: int, out: Path,
              cases: str = "abc", settings: RunSettings | None = None,
              model: str = "vgg19", stretch: float = 1.0) -> list[CaseFigures]:  # fmt: skip
    """Each case on the running fabric, one after the other; folders under `out`."""
    schedules = shift_cases(topo, model, stretch)
    shared = schedules.pop("shared_link")
    rows = []
    for case in cases:
        where = f"case {case}"
        jobs = plan_jobs(parse_schedule(schedules[case], where), topo, where=where)
        folder = out / f"case-{case}"
        given = settings or RunSettings()
        run = replace(given, iterations=iterations)
        result = run_schedule(fabric, jobs, run, folder)
        write_run(result, folder)
        if result.interrupted:
            raise KeyboardInterrupt
        simulated = simulated_means(topo, jobs, iterations)
        rows.append(figures(case, result, jobs, str(shared), simulated))
        print(f"case {case} done: {result.duration_s:.1f} s", file=sys.stderr, flush=True)
    return rows


def table(rows: list[CaseFigures]) -> str:
    roce = any(r.cnps is not None for r in rows)
    head = ("| case | shift ms | iters | CE marks / iteration | iterations marked | shared-link "
            "marks | mean ms | p99 ms | mean / profile | mean / simulated (sim ms) | drops |")  # fmt: skip
    if roce:
        head += " host CE | CNPs | pauses honoured | paused ms |"
    lines = [head, "|" + "---|" * head.count(" |")]
    for r in rows:
        line = (
            f"| {r.case} | {r.shift_ms:.1f} | {r.iterations} | {r.ce_per_iteration:.1f} | "
            f"{r.iterations_marked:.0%} | {r.shared_link_marks} | {r.mean_ms:.1f} | "
            f"{r.p99_ms:.1f} | {r.mean_ms / r.profile_ms:.3f} | "
            f"{r.mean_ms / r.simulated_ms:.3f} ({r.simulated_ms:.1f}) | {r.drops} |"
        )
        if roce:
            line += f" {r.host_ce_marks} | {r.cnps} | {r.pause_frames} | {r.paused_ms} |"
        lines.append(line)
    return "\n".join(lines)


def goals(rows: list[CaseFigures]) -> list[tuple[str, bool]]:
    """The issue's goals, each with whether it was met."""
    by = {r.case: r for r in rows}
    out: list[tuple[str, bool]] = []
    a, b, c = by.get("a"), by.get("b"), by.get("c")
    if a and c:
        out.append(("(a) CE marks in every iteration", a.iterations_marked == 1.0))
        out.append(("(a) mean above the job alone", a.mean_ms > c.mean_ms))
    if a and b:
        ratio = a.ce_per_iteration / b.ce_per_iteration if b.ce_per_iteration else float("inf")
        out.append((f"(b) >= 10x fewer CE marks than (a): {ratio:.1f}x", ratio >= 10))
    if b and c:
        out.append((f"(b) mean within 10% of alone: {b.mean_ms / c.mean_ms:.3f}",
                    abs(b.mean_ms / c.mean_ms - 1) <= 0.10))  # fmt: skip
    if c:
        out.append(("(c) no CE marks", c.ce_per_iteration == 0 and c.shared_link_marks == 0))
        out.append((f"(c) within 10% of the profile: {c.mean_ms / c.profile_ms:.3f}",
                    abs(c.mean_ms / c.profile_ms - 1) <= 0.10))  # fmt: skip
    for r in rows:
        ratio = r.mean_ms / r.simulated_ms
        out.append((f"({r.case}) within 15% of the simulator: {ratio:.3f}", abs(ratio - 1) <= 0.15))
    if a:
        out.append((f"(a) host CE {a.host_ce_marks} == switch ecn_marked {a.switch_ecn_marked}",
                    a.host_ce_marks == a.switch_ecn_marked))  # fmt: skip
    for r in rows:
        if r.cnps is None:
            continue
        out.append((f"({r.case}) no drop: {r.drops}", r.drops == 0))
        host_ce = r.host_ce_marks or 0
        out.append((f"({r.case}) CNPs {r.cnps} <= host CE marks {host_ce}", r.cnps <= host_ce))
    if a and a.cnps is not None:
        out.append((f"(a) paused by PFC: {a.pause_frames} pauses, {a.paused_ms} ms",
                    bool(a.pause_frames)))  # fmt: skip
    if b and b.cnps is not None:
        out.append((f"(b) not paused: {b.pause_frames} pauses", not b.pause_frames))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--scale", type=float, default=DEFAULT_SCALE)
    parser.add_argument("--cases", default="abc", help="which cases, e.g. ac")
    parser.add_argument(
        "--model", default="vgg19", help="both jobs' model (default vgg19; e.g. wideresnet101)"
    )
    parser.add_argument(
        "--period-stretch",
        type=float,
        default=1.0,
        help="periods and shift x this (e.g. 1.15: the grid the jobs' emulated iterations "
        "keep, when they run that much past the profile alone)",
    )
    parser.add_argument("--out", type=Path, help="keep each case's run folder here")
    parser.add_argument("--json", action="store_true", help="also print the rows as JSON")
    parser.add_argument("--poll-interval", type=float, default=0.5, help="counter polls (s)")
    parser.add_argument("--no-gnmi", action="store_true", help="poll the P4 counters only")
    parser.add_argument(
        "--transport", default="tcp", choices=("tcp", "roce"),
        help="the replicas' transport (roce: RoCEv2 with DCQCN, hosts honour PFC)",
    )  # fmt: skip
    args = parser.parse_args()
    topo = load_topology(TOPOLOGY)
    with tempfile.TemporaryDirectory() as scratch:
        out = args.out or Path(scratch)
        with EmulatedFabric(topo, FabricOptions(scale=args.scale)) as fabric:
            settings = RunSettings(
                poll_interval_s=args.poll_interval, gnmi=not args.no_gnmi, transport=args.transport
            )
            rows = run_cases(
                fabric, topo, args.iterations, out, args.cases, settings, args.model,
                args.period_stretch,
            )  # fmt: skip
    print(table(rows))
    for text, met in goals(rows):
        print(f"  {'met   ' if met else 'MISSED'} {text}")
    for r in rows:
        if r.error:
            print(f"  case {r.case} error: {r.error}")
    if args.json:
        print(json.dumps([r.__dict__ for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
