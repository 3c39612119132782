"""The GPU-sharing table: NAGS and Muri against Themis and Th+Cassini over seeds.

Reads the `runs.parquet` of `cassini sweep` folders and prints, per load and
scheduler, the mean over seeds with a 95% Student-t interval (makespan, mean
JCT, communication overhead, mean and p99 iteration time, marked traffic),
then each sharing scheduler's per-seed reduction against the others
(1 - variant / base, paired by seed), the form of the papers' headlines.

    cassini sweep --config benchmarks/sweeps/nags.yaml --out results/nags --engine inline
    .venv/bin/python benchmarks/nags_table.py results/nags
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from emulation.reproduce.stats import t95  # the project's one t-table

METRICS = (
    ("makespan_s", "makespan s", 0),
    ("mean_jct_s", "mean JCT s", 1),
    ("comm_overhead", "comm overhead %", 1),
    ("mean_ms", "mean iter ms", 1),
    ("p99_ms", "p99 iter ms", 1),
    ("marked_gbit", "marked Gbit", 0),
)
ORDER = ("themis", "th+cassini", "nags", "muri")
PAIRS = (("nags", "themis"), ("nags", "th+cassini"), ("nags", "muri"), ("muri", "themis"))


def interval(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% t-interval."""
    x = np.asarray(values, dtype=float)
    if x.size < 2:
        return float(x.mean()), float("nan")
    return float(x.mean()), t95(x.size - 1) * float(x.std(ddof=1)) / np.sqrt(x.size)


def load(folder: Path) -> list[dict[str, object]]:
    import pyarrow.parquet as pq

    path = folder / "runs.parquet"
    if not path.exists():
        sys.exit(f"nags_table: no runs.parquet in {folder} (run cassini sweep first)")
    return list(pq.read_table(path).to_pylist())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("folders", nargs="+", type=Path, help="cassini sweep --out folders")
    args = ap.parse_args()
    by: dict[tuple[str, str], dict[int, dict[str, object]]] = defaultdict(dict)
    for r in (r for f in args.folders for r in load(f)):
        key = (f"{r['trace']} {r['load']}", str(r["scheduler"]))
        by[key][int(r["seed"])] = r  # type: ignore[call-overload]
    cells = sorted({c for c, _ in by})
    print("| trace | scheduler | seeds | " + " | ".join(m[1] for m in METRICS) + " |")
    print("|---|---|---|" + "---|" * len(METRICS))
    for cell in cells:
        for name in [n for n in ORDER if (cell, n) in by]:
            runs = by[(cell, name)]
            out = []
            for metric, _, digits in METRICS:
                scale = 100.0 if metric == "comm_overhead" else 1.0
                m, h = interval([float(r[metric]) * scale for r in runs.values()])  # type: ignore[arg-type]
                out.append(f"{m:.{digits}f} ± {h:.{digits}f}")
            print(f"| {cell} | {name} | {len(runs)} | " + " | ".join(out) + " |")
    print()
    print("| trace | variant vs base | makespan % | mean JCT % | mean iter % | p99 iter % |")
    print("|---|---|---|---|---|---|")
    for cell in cells:
        for variant, base in PAIRS:
            if (cell, variant) not in by or (cell, base) not in by:
                continue
            v, b = by[(cell, variant)], by[(cell, base)]
            seeds = sorted(set(v) & set(b))
            out = []
            for metric in ("makespan_s", "mean_jct_s", "mean_ms", "p99_ms"):
                red = [
                    100.0 * (1.0 - float(v[s][metric]) / float(b[s][metric]))  # type: ignore[arg-type]
                    for s in seeds
                    if float(b[s][metric]) > 0  # type: ignore[arg-type]
                ]
                m, h = interval(red)
                out.append(f"{m:.1f} ± {h:.1f} (best {max(red):.1f})")
            print(f"| {cell} | {variant} vs {base} | " + " | ".join(out) + " |")


if __name__ == "__main__":
    main()
