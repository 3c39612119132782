"""Per-link solver: run time vs jobs and precision, exact vs fast, and the score gap.

Run: .venv/bin/python benchmarks/bench_solver.py [--seeds 10] [--family models|synthetic|both]

Two families of random link mixes (seeded):
- models: 2-8 jobs drawn from the 13 built-in models with 2-4 workers each
  (real iteration times, so the unified circle may be approximated);
- synthetic: jobs with one common iteration time and random Up fraction,
  rate and phase offset, the hardest case (every rotation is distinct).
Exact runs only where its search (combinations x bins) stays under
--max-exact-ops; the table shows '-' elsewhere. Prints Markdown tables.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from dataclasses import replace

import numpy as np

from scheduler.cassini.compatibility import (
    discretize,
    exact_rotations,
    fast_rotations,
    search_space,
)
from scheduler.workloads.profiles import build_profile, model_names
from scheduler.workloads.types import Phase, Profile

CAPACITY = 50.0


def model_mix(k: int, seed: int) -> list[Profile]:
    rng = np.random.default_rng(seed)
    names = model_names()
    return [
        replace(build_profile(str(rng.choice(names)), int(rng.integers(2, 5))), name=f"j{i}")
        for i in range(k)
    ]


def synthetic_mix(k: int, seed: int, iteration_ms: float = 200.0) -> list[Profile]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(k):
        up = float(rng.uniform(0.15, 0.6)) * iteration_ms
        offset = float(rng.uniform(0, iteration_ms - up))
        phases = (
            Phase(offset, 0.0),
            Phase(up, float(rng.uniform(20, 50))),
            Phase(iteration_ms - up - offset, 0.0),
        )
        out.append(
            Profile(
                f"j{i}",
                "synthetic",
                "data",
                2,
                iteration_ms,
                tuple(p for p in phases if p.duration_ms > 0),
            )
        )
    return out


def timed(fn, *args):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    result = fn(*args)
    return result, (time.perf_counter() - start) * 1e3


def run(
    family: str, jobs: list[int], precisions: list[float], seeds: int, max_exact_ops: float
) -> None:
    make = model_mix if family == "models" else synthetic_mix
    print(f"\n### {family} mixes, {seeds} seeds each, capacity {CAPACITY:g} Gbps\n")
    print(
        "| jobs | precision (deg) | exact ms (median) | fast ms (median) | fast ms (max) | speed-up | max score gap | mean score gap |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for k in jobs:
        for precision in precisions:
            exact_ms, fast_ms, gaps = [], [], []
            for seed in range(seeds):
                profiles = make(k, 1000 * k + seed)
                problem = discretize(profiles, precision)
                (_, fast_excess), t_fast = timed(fast_rotations, problem, CAPACITY)
                fast_ms.append(t_fast)
                if search_space(problem) * problem.bins <= max_exact_ops:
                    (_, exact_excess), t_exact = timed(exact_rotations, problem, CAPACITY)
                    exact_ms.append(t_exact)
                    norm = problem.bins * CAPACITY
                    gaps.append((1 - exact_excess / norm) - (1 - fast_excess / norm))
            med_fast = statistics.median(fast_ms)
            if exact_ms:
                med_exact = statistics.median(exact_ms)
                exact_cell = f"{med_exact:.2f}"
                speed = f"{med_exact / med_fast:.1f}x"
                gap_max = f"{max(gaps) * 100:.2f}%"
                gap_mean = f"{statistics.mean(gaps) * 100:.3f}%"
            else:
                exact_cell = speed = gap_max = gap_mean = "-"
            print(
                f"| {k} | {precision:g} | {exact_cell} | {med_fast:.2f} | {max(fast_ms):.2f} | {speed} | {gap_max} | {gap_mean} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--family", choices=["models", "synthetic", "both"], default="both")
    parser.add_argument("--jobs", default="2,3,4,5,6,7,8")
    parser.add_argument("--precisions", default="1,2.5,5,10,20")
    parser.add_argument("--max-exact-ops", type=float, default=3e8)
    args = parser.parse_args()
    jobs = [int(x) for x in args.jobs.split(",")]
    precisions = [float(x) for x in args.precisions.split(",")]
    # Warm up numpy's FFT plans and allocator so the first row is not an outlier.
    fast_rotations(discretize(synthetic_mix(3, 0), 5.0), CAPACITY)
    families = ["models", "synthetic"] if args.family == "both" else [args.family]
    for family in families:
        run(family, jobs, precisions, args.seeds, args.max_exact_ops)
    assert math.isfinite(args.max_exact_ops)


if __name__ == "__main__":
    main()
