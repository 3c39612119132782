"""What do Cassini's time-shifts add on top of its choice of placement?

Run by hand: `.venv/bin/python benchmarks/shift_ablation.py [--seeds 1-10]
[--jobs 60] [--load 0.9]`. Runs Themis, Th+Cassini, and Th+Cassini with
`apply_shifts=False` (it picks the same kind of placement but gives the
agents no schedule, so jobs start iterations as soon as they are ready). It
does this on the Poisson trace of each seed, and on two snapshot mixes where
every job spans two racks: four VGG19s (one period, so shifts can interleave
them without idling), and VGG19, VGG16, WideResNet101 and BERT (different
periods, so interleaving needs pacing). Ratios are Themis over the variant
(> 1 is better).
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np
from seed_sweep import seed_list

from scheduler.baselines.base import ProfileBook
from scheduler.baselines.registry import make_scheduler
from scheduler.simulator import SimSettings, simulate
from scheduler.simulator.experiment import SchedulerSummary, summarise
from scheduler.workloads.traces import TraceJob, poisson_trace
from scheduler.workloads.traffic import JobRouter
from topologies.library import load_topology
from topologies.model import Topology

MIXES = {
    "4 x VGG19": ("vgg19", "vgg19", "vgg19", "vgg19"),
    "VGG19+VGG16+WRN101+BERT": ("vgg19", "vgg16", "wideresnet101", "bert"),
}
VARIANTS = ("th+cassini", "placement only")


def run_three(
    trace: tuple[TraceJob, ...], topo: Topology, seed: int
) -> dict[str, SchedulerSummary]:
    """Themis, Th+Cassini and its placement-only ablation on one trace."""
    router = JobRouter(topo)
    book = ProfileBook(nic_gbps=topo.nic_gbps())
    full = make_scheduler("th+cassini", topo, seed, 10, router, book=book)
    schedulers = {
        "themis": make_scheduler("themis", topo, seed, 10, router, book=book),
        "th+cassini": full,
        "placement only": replace(full, apply_shifts=False, solutions={}),
    }
    settings = SimSettings(seed=seed)
    return {
        name: summarise(simulate(trace, topo, sched, settings, router, book=book))
        for name, sched in schedulers.items()
    }


def ratios(by: dict[str, SchedulerSummary]) -> dict[str, tuple[float, float]]:
    """Per variant: Themis's mean iteration time and congestion over the variant's."""
    base = by["themis"]
    return {
        v: (base.mean_ms / by[v].mean_ms, base.oversub_link_s / max(by[v].oversub_link_s, 1e-9))
        for v in VARIANTS
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="1-10", type=seed_list)
    ap.add_argument("--jobs", type=int, default=60)
    ap.add_argument("--load", type=float, default=0.9)
    args = ap.parse_args()
    topo = load_topology("cassini-testbed")
    for label, models in MIXES.items():
        trace = tuple(TraceJob(f"j{i}-{m}", m, 6, 500) for i, m in enumerate(models))
        r = ratios(run_three(trace, topo, 1))
        cells = "  ".join(f"{v} mean {m:.2f}x congestion {c:.2f}x" for v, (m, c) in r.items())
        print(f"snapshot {label:26s} {cells}", flush=True)
    per: dict[str, list[tuple[float, float]]] = {v: [] for v in VARIANTS}
    for seed in args.seeds:
        r = ratios(
            run_three(poisson_trace(args.jobs, topo.total_gpus(), args.load, seed), topo, seed)
        )
        for v in VARIANTS:
            per[v].append(r[v])
        cells = "  ".join(f"{v} mean {m:.3f}x" for v, (m, _) in r.items())
        print(f"poisson seed {seed:3d}  {cells}", flush=True)
    print(f"\nPoisson, {len(args.seeds)} seeds, {args.jobs} jobs, load {args.load}:")
    for v in VARIANTS:
        mean, cong = np.array(per[v]).T
        print(
            f"  {v:15s} mean iteration time {mean.mean():.3f}x [{mean.min():.2f}-{mean.max():.2f}], "
            f"congestion {cong.mean():.2f}x lower"
        )


if __name__ == "__main__":
    main()
