"""How much do Th+Cassini and Po+Cassini gain over their bases, across seeds?

Run by hand: `.venv/bin/python benchmarks/seed_sweep.py [--seeds 1-20] [--jobs 60]
[--load 0.9] [--topology cassini-testbed] [--workers N] [--out DIR]`. Simulates the
Poisson trace of each seed under all six schedulers and prints, per measure, the mean base /
variant ratio over the seeds, its range, and on how many seeds the variant
wins (ratio > 1); and on how many seeds Ideal has the lowest and Random the
highest mean slowdown. It also prints how far each base is from Ideal (its
mean slowdown over Ideal's) and what share of that distance the Cassini
variant closes: the headroom a network-aware placement can win at all.
One seed is noisy: which iterations land in the top 1%
depends on which jobs the trajectory happens to slow, so the table is the
figure to quote, not one run.

A thin call of the sweep library (`cassini sweep` with
`benchmarks/sweeps/held_out.yaml` runs the same grid): cells run on a local
Dask cluster, and with `--out DIR` a re-run reuses the seeds already done.
"""

from __future__ import annotations

import argparse
import tempfile

import numpy as np

from scheduler.sweep import make_engine, parse_seeds, parse_sweep_config, run_sweep
from scheduler.sweep.aggregate import MEASURES, extremes, headroom, headroom_line, seed_runs
from topologies.library import load_topology


def seed_list(text: str) -> list[int]:
    """`1-20` or `1,4,7`."""
    return parse_seeds(text, "--seeds")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="1-20", type=seed_list)
    ap.add_argument("--jobs", type=int, default=60)
    ap.add_argument("--load", type=float, default=0.9)
    ap.add_argument("--topology", default="cassini-testbed")
    ap.add_argument("--workers", type=int, help="local worker processes (default one per core)")
    ap.add_argument("--out", help="keep the cells here (and resume from them)")
    args = ap.parse_args()
    config = parse_sweep_config(
        {
            "trace": "poisson",
            "loads": args.load,
            "seeds": args.seeds,
            "jobs": args.jobs,
            "topologies": args.topology,
        },
        "seed_sweep.py arguments",
    )
    with tempfile.TemporaryDirectory() as tmp:
        engine = make_engine("local", workers=args.workers)
        try:
            result = run_sweep(config, args.out or tmp, engine)
        finally:
            engine.close()
    runs = seed_runs(result.records)
    for run in runs:
        line = "  ".join(
            f"{v} mean {sp['mean']:.2f}x p99 {sp['p99']:.2f}x" for v, sp in run.speedups.items()
        )
        print(f"seed {run.seed}: {line}", flush=True)
    topo = load_topology(args.topology)
    print(f"\n{len(runs)} seeds, {args.jobs} jobs, load {args.load}, {topo.name}")
    ext = extremes(runs) or (0, 0)
    print(
        f"lowest mean slowdown: Ideal on {ext[0]}/{len(runs)} seeds; "
        f"highest: Random on {ext[1]}/{len(runs)}"
    )
    variants = list(dict.fromkeys(v for r in runs for v in r.speedups))
    print(f"{'measure':14s}" + "".join(f"{v:>34s}" for v in variants))
    for m, _, _ in MEASURES:
        cells = []
        for v in variants:
            r = np.array([run.speedups[v][m] for run in runs])
            cells.append(
                f"{r.mean():.2f}x [{r.min():.2f}-{r.max():.2f}] wins {int((r > 1).sum())}/{len(r)}"
            )
        print(f"{m:14s}" + "".join(f"{c:>34s}" for c in cells))
    print()
    for h in headroom(runs):
        print(headroom_line(h))


if __name__ == "__main__":
    main()
