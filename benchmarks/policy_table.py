"""Network-side policies against Cassini in the fluid simulator: mean and p99 iteration time, marked traffic.

Runs Themis alone, Themis with each network policy (`scheduler.policies`:
strict-priority classes per flow, honoured by the simulator) and Th+Cassini
on the same traces, over held-out seeds, and prints per trace the mean over
seeds with a 95% Student-t interval, then the per-seed ratio themis /
variant (paired by seed; above 1 is better than Themis).

    .venv/bin/python benchmarks/policy_table.py --seeds 21-30
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict

import numpy as np

from emulation.reproduce.stats import t95  # the project's one t-table
from scheduler.baselines import make_scheduler
from scheduler.baselines.base import ProfileBook
from scheduler.policies import make_policy
from scheduler.simulator import SimSettings, simulate
from scheduler.simulator.experiment import summarise
from scheduler.workloads.traces import resolve_trace
from scheduler.workloads.traffic import JobRouter
from topologies.library import load_topology

VARIANTS = (("themis", "none"), ("themis", "crux"), ("themis", "echelon"), ("th+cassini", "none"))
METRICS = (
    ("mean_ms", "mean iter ms", 1),
    ("p99_ms", "p99 iter ms", 1),
    ("marked_gbit", "marked Gbit", 0),
)


def interval(xs: list[float], digits: int) -> str:
    a = np.asarray(xs, dtype=float)
    half = t95(len(a) - 1) * a.std(ddof=1) / np.sqrt(len(a)) if len(a) > 1 else 0.0
    return f"{a.mean():.{digits}f} ± {half:.{digits}f}"


def seeds_of(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="21-30", help="held-out seeds, e.g. 21-30")
    p.add_argument("--traces", default="four-jobs,poisson", help="trace kinds")
    p.add_argument("--jobs", type=int, default=60)
    p.add_argument("--load", type=float, default=0.9)
    p.add_argument("--topology", default="cassini-testbed")
    args = p.parse_args(argv)
    topo = load_topology(args.topology)
    router = JobRouter(topo)
    book = ProfileBook(nic_gbps=topo.nic_gbps())
    rows: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    t0 = time.perf_counter()
    kinds = args.traces.split(",")
    for kind in kinds:
        for seed in seeds_of(args.seeds):
            trace, _ = resolve_trace(kind, topo.total_gpus(), args.jobs, args.load, seed)
            for sched_name, pol in VARIANTS:
                sched = make_scheduler(sched_name, topo, seed, router=router, book=book)
                policy = None if pol == "none" else make_policy(pol)
                res = simulate(trace, topo, sched, SimSettings(seed=seed), router, book=book,
                               policy=policy)  # fmt: skip
                s = summarise(res)
                key = f"{sched_name}+{pol}" if pol != "none" else sched_name
                for m, _, _ in METRICS:
                    rows[(kind, key)][m].append(getattr(s, m))
            print(f"{kind} seed {seed} done, {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    head = (
        "| trace | variant | "
        + " | ".join(t for _, t, _ in METRICS)
        + " | themis / variant: mean | p99 |"
    )
    print(head)
    print("|" + "---|" * (len(METRICS) + 4))
    for kind in kinds:
        base = rows[(kind, "themis")]
        for sched_name, pol in VARIANTS:
            key = f"{sched_name}+{pol}" if pol != "none" else sched_name
            r = rows[(kind, key)]
            cells = [interval(r[m], d) for m, _, d in METRICS]
            ratios = [
                interval([b / v for b, v in zip(base[m], r[m], strict=True)], 3)
                for m in ("mean_ms", "p99_ms")
            ]
            print(f"| {kind} | {key} | " + " | ".join(cells + ratios) + " |")
    print(f"\n{len(seeds_of(args.seeds))} seeds, {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
