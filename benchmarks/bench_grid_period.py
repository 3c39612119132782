"""Does the agents' grid hold a shifted pair run after run: derived period against measured?

Run as root: `.venv/bin/python benchmarks/bench_grid_period.py --runs 3 --out DIR`.

The paper's motivating experiment: two VGG19 jobs of 2 workers whose rings
share one ToR uplink (job vgg19-0 on s01, s05; vgg19-1 on s03, s13: only
tor1->agg1 carries both), on the default testbed at the default scale. On
one fabric: VGG19 with 2 workers is profiled alone first (`cassini
profile`'s `profile_models`), then, `--runs` times in turn, three cases:

- aligned: both jobs free (no agent), starting together;
- derived: Cassini's shift and period (`plan_link`, 5 degrees, paced) for
  the derived profiles, the grid the agents kept before measured profiles;
- measured: the same for the measured profiles as the agents pace them
  (`grid_profile`: the measured phases, period the measured p95).

The replicas run the model's own workload in every case; only the grid
differs. Printed per run and case: p90 and mean iteration time (iteration
0 left out; the time from an iteration's start to its end, the agent's idling before it
not included), the mean start-to-start time (the idling included: what
the job's throughput is), the agents' adjustments per minute per paced job, the shared
link's ECN marks, and the machine's 1-minute load average when the case
ended (the machine is shared). Then, per shifted case, p90 aligned over
p90 shifted, run by run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from emulation.emulate.plan import shared_links
from emulation.fabric.emulated import EmulatedFabric
from emulation.fabric.options import FabricOptions
from emulation.fabric.scaling import DEFAULT_SCALE
from emulation.jobs.launch import parse_schedule, plan_jobs
from emulation.jobs.run_folder import write_run
from emulation.jobs.run_settings import RunSettings
from emulation.jobs.supervisor import run_schedule
from emulation.profile.measure import MeasuredProfile, profile_models
from scheduler.cassini.plans import plan_link
from scheduler.workloads.profile_files import grid_profile
from scheduler.workloads.profiles import build_profile
from scheduler.workloads.types import Profile
from topologies.library import load_topology

TOPOLOGY = "cassini-testbed"
MODEL, WORKERS = "vgg19", 2
JOBS = {"vgg19-0": ("s01", "s05"), "vgg19-1": ("s03", "s13")}
WARMUP = 1


@dataclass(frozen=True)
class Row:
    run: int
    case: str
    period_ms: float | None
    shift_ms: float
    p90_ms: float
    mean_ms: float
    cycle_ms: float  # mean start to start: the throughput, idling for the grid included
    adjustments_per_min: float  # per paced job, mean over the pair
    adjusted_fraction: float  # of the paced jobs' iterations
    shared_link_marks: int
    load_1min: float
    error: str | None


def pair_schedule(profile: Profile, nic_gbps: float) -> dict[str, object]:
    """Cassini's shift and period for two jobs of `profile` on one link."""
    a, b = list(JOBS)
    pair = [replace(profile, name=a), replace(profile, name=b)]
    link = plan_link(pair, nic_gbps, 5.0, "auto", pace=True)
    names = [a, b]
    shift = link.solution.shifts_ms[names[1]] - link.solution.shifts_ms[names[0]]
    period = link.periods_ms[names[0]]
    return {
        "placement": {j: list(s) for j, s in JOBS.items()},
        "shifts_ms": {a: 0.0, b: float(shift)},
        "periods_ms": {a: float(period), b: float(period)},
    }


def run_case(fabric: EmulatedFabric, schedule: dict[str, object], case: str, run: int,
             iterations: int, folder: Path, shared: str) -> Row:  # fmt: skip
    topo = fabric.topo
    jobs = plan_jobs(parse_schedule(schedule, case), topo, where=case)
    result = run_schedule(fabric, jobs, RunSettings(iterations=iterations), folder)
    write_run(result, folder)
    if result.interrupted:
        raise KeyboardInterrupt
    kept = [r for r in result.records if r.iteration >= WARMUP]
    times = np.array([r.busy_ms for r in kept])  # start to end, as its table states
    # a job-iteration is adjusted when any of its workers re-aligned after it
    adjusted = {(r.job, r.iteration) for r in kept if r.adjusted}
    paced = [s for s in result.summaries if jobs[0].period_ms is not None]
    per_min = (
        float(np.mean([s.adjustments * 60.0 / result.duration_s for s in paced])) if paced else 0.0
    )
    job_iterations = {(r.job, r.iteration) for r in kept}
    periods = schedule.get("periods_ms") or {}
    shifts = schedule.get("shifts_ms") or {}
    assert isinstance(periods, dict) and isinstance(shifts, dict)
    return Row(
        run=run,
        case=case,
        period_ms=round(next(iter(periods.values())), 2) if periods else None,
        shift_ms=round(max(shifts.values(), default=0.0), 2),
        p90_ms=round(float(np.percentile(times, 90)), 1),
        mean_ms=round(float(times.mean()), 1),
        cycle_ms=round(cycle_ms(kept), 1),
        adjustments_per_min=round(per_min, 1),
        adjusted_fraction=round(len(adjusted) / len(job_iterations), 3) if paced else 0.0,
        shared_link_marks=sum(r.ecn_marked_packets for r in result.links if r.link == shared),
        load_1min=round(os.getloadavg()[0], 1),
        error=result.error,
    )


def cycle_ms(records: list) -> float:
    """Mean start-to-start interval of the jobs' iterations (their first worker's start)."""
    starts: dict[str, dict[int, float]] = {}
    for r in records:
        mine = starts.setdefault(r.job, {})
        mine[r.iteration] = min(mine.get(r.iteration, r.start_ms), r.start_ms)
    gaps = [np.diff([s[k] for k in sorted(s)]) for s in starts.values() if len(s) > 1]
    return float(np.concatenate(gaps).mean()) if gaps else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--profile-iterations", type=int, default=40)
    parser.add_argument("--scale", type=float, default=DEFAULT_SCALE)
    parser.add_argument("--cases", default="aligned,derived,measured")
    parser.add_argument("--out", type=Path, help="keep the run folders here")
    parser.add_argument(
        "--calm-grid", action="store_true", help="grid period without the starved iterations"
    )
    args = parser.parse_args()
    topo = load_topology(TOPOLOGY)
    shared = list(shared_links(JOBS, topo))
    if shared != ["tor1->agg1"]:
        raise SystemExit(f"the pair shares {shared}, not exactly tor1's uplink")
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as scratch:
        out = args.out or Path(scratch)
        with EmulatedFabric(topo, FabricOptions(scale=args.scale)) as fabric:
            settings = RunSettings(iterations=args.profile_iterations)
            (measured,) = profile_models(
                fabric, [MODEL], WORKERS, settings, out / "profile", calm_grid=args.calm_grid
            )
            print(json.dumps(measured.to_dict()["measured"]), file=sys.stderr, flush=True)
            schedules = schedules_for(measured, topo.nic_gbps())
            for run in range(args.runs):
                for case in args.cases.split(","):
                    folder = out / f"run-{run}" / case
                    row = run_case(fabric, schedules[case], case, run, args.iterations,
                                   folder, shared[0])  # fmt: skip
                    rows.append(row)
                    print(json.dumps(asdict(row)), file=sys.stderr, flush=True)
    print(table(rows))
    return 0


def schedules_for(measured: MeasuredProfile, nic_gbps: float) -> dict[str, dict[str, object]]:
    derived = build_profile(MODEL, WORKERS, nic_gbps=nic_gbps)
    paced = grid_profile(measured.to_profile(), measured.period_ms)
    aligned = {"placement": {j: list(s) for j, s in JOBS.items()},
               "shifts_ms": dict.fromkeys(JOBS, 0.0)}  # fmt: skip
    return {
        "aligned": aligned,
        "derived": pair_schedule(derived, nic_gbps),
        "measured": pair_schedule(paced, nic_gbps),
    }


def table(rows: list[Row]) -> str:
    lines = [
        "| run | case | period ms | shift ms | p90 ms | mean ms | start to start ms | "
        "adjustments/min per job | iterations adjusted | shared-link marks | load (1 min) | "
        "p90 aligned / p90 case |",
        "|" + "---|" * 12,
    ]
    aligned = {r.run: r.p90_ms for r in rows if r.case == "aligned"}
    for r in rows:
        ratio = aligned.get(r.run)
        shown = f"{ratio / r.p90_ms:.2f}x" if ratio and r.case != "aligned" else "-"
        period = "free" if r.period_ms is None else f"{r.period_ms:.1f}"
        lines.append(
            f"| {r.run} | {r.case} | {period} | {r.shift_ms:.1f} | {r.p90_ms:.1f} | "
            f"{r.mean_ms:.1f} | {r.cycle_ms:.1f} | {r.adjustments_per_min:.1f} | {r.adjusted_fraction:.0%} | "
            f"{r.shared_link_marks} | {r.load_1min:.1f} | {shown} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
