"""How much do Th+Cassini and Po+Cassini gain over their bases, across seeds?

Run by hand: `.venv/bin/python benchmarks/seed_sweep.py [--seeds 1-20] [--jobs 60]
[--load 0.9] [--topology cassini-testbed]`. Simulates the Poisson trace of each
seed under all six schedulers and prints, per measure, the mean base /
variant ratio over the seeds, its range, and on how many seeds the variant
wins (ratio > 1); and on how many seeds Ideal has the lowest and Random the
highest mean slowdown. It also prints how far each base is from Ideal (its
mean slowdown over Ideal's) and what share of that distance the Cassini
variant closes: the headroom a network-aware placement can win at all.
One seed is noisy: which iterations land in the top 1%
depends on which jobs the trajectory happens to slow, so the table is the
figure to quote, not one run.
"""

from __future__ import annotations

import argparse

import numpy as np

from scheduler.experiment import run_experiment, speedups
from scheduler.simulator import SimSettings
from scheduler.traces import poisson_trace
from topologies.library import load_topology

MEASURES = ("mean", "p99", "p99_slowdown", "jct", "congestion", "marked")


def seed_list(text: str) -> list[int]:
    """`1-20` or `1,4,7`."""
    if "-" in text:
        lo, hi = text.split("-", 1)
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in text.split(",")]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="1-20", type=seed_list)
    ap.add_argument("--jobs", type=int, default=60)
    ap.add_argument("--load", type=float, default=0.9)
    ap.add_argument("--topology", default="cassini-testbed")
    args = ap.parse_args()
    topo = load_topology(args.topology)
    ratios: dict[str, dict[str, list[float]]] = {}
    ideal_best = random_worst = 0
    headroom: dict[str, list[tuple[float, float]]] = {}
    for seed in args.seeds:
        trace = poisson_trace(args.jobs, topo.total_gpus(), args.load, seed)
        exp = run_experiment(
            trace,
            topo,
            ["themis", "th+cassini", "pollux", "po+cassini", "random", "ideal"],
            seed,
            SimSettings(seed=seed),
            trace_label="poisson",
        )
        slowdown = {s.name: s.mean_slowdown for s in exp.summaries}
        ideal_best += min(slowdown, key=slowdown.__getitem__) == "ideal"
        random_worst += max(slowdown, key=slowdown.__getitem__) == "random"
        for variant, sp in speedups(exp.summaries).items():
            for m in MEASURES:
                ratios.setdefault(variant, {}).setdefault(m, []).append(sp[m])
            base, ours, ideal = slowdown[sp["base"]], slowdown[variant], slowdown["ideal"]
            closed = (base - ours) / (base - ideal) if base > ideal else 0.0
            headroom.setdefault(variant, []).append((base / ideal, closed))
        line = "  ".join(
            f"{v} mean {sp['mean']:.2f}x p99 {sp['p99']:.2f}x"
            for v, sp in speedups(exp.summaries).items()
        )
        print(f"seed {seed}: {line}", flush=True)
    print(f"\n{len(args.seeds)} seeds, {args.jobs} jobs, load {args.load}, {topo.name}")
    print(
        f"lowest mean slowdown: Ideal on {ideal_best}/{len(args.seeds)} seeds; "
        f"highest: Random on {random_worst}/{len(args.seeds)}"
    )
    print(f"{'measure':14s}" + "".join(f"{v:>34s}" for v in ratios))
    for m in MEASURES:
        cells = []
        for per in ratios.values():
            r = np.array(per[m])
            cells.append(
                f"{r.mean():.2f}x [{r.min():.2f}-{r.max():.2f}] wins {int((r > 1).sum())}/{len(r)}"
            )
        print(f"{m:14s}" + "".join(f"{c:>34s}" for c in cells))
    print()
    for variant, pairs in headroom.items():
        gap, closed = np.array(pairs).T
        base = ratios[variant]
        print(
            f"{variant}: its base's mean slowdown is {gap.mean():.2f}x Ideal's "
            f"[{gap.min():.2f}-{gap.max():.2f}]; {variant} closes {closed.mean():.0%} of that "
            f"gap on average [{closed.min():.0%} to {closed.max():.0%}] over {len(base['mean'])} seeds"
        )


if __name__ == "__main__":
    main()
