"""The delay scheduler's table: makespan, JCT, communication overhead and iteration times over seeds.

Reads the `runs.parquet` of one or more `cassini sweep` folders and prints,
per trace and scheduler, the mean over seeds with a 95% Student-t interval,
then the per-seed reduction of each delay variant against Themis and
Th+Cassini (1 - delay / base, paired by seed), the form of the paper's
headline ("up to 69% better makespan").

    cassini sweep --config benchmarks/sweeps/delay.yaml --out results/delay --engine inline
    .venv/bin/python benchmarks/delay_table.py results/delay results/delay_dynamic
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
ORDER = ("themis", "th+cassini", "delay", "delay+cassini")


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
        sys.exit(f"delay_table: no runs.parquet in {folder} (run cassini sweep first)")
    return list(pq.read_table(path).to_pylist())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("folders", nargs="+", type=Path, help="cassini sweep --out folders")
    args = ap.parse_args()
    rows = [r for f in args.folders for r in load(f)]
    by: dict[tuple[str, str], dict[int, dict[str, object]]] = defaultdict(dict)
    for r in rows:
        by[(str(r["trace"]), str(r["scheduler"]))][int(r["seed"])] = r  # type: ignore[call-overload]
    traces = sorted({t for t, _ in by})
    head = " | ".join(label for _, label, _ in METRICS)
    print(f"| trace | scheduler | seeds | {head} |")
    print("|---|---|---|" + "---|" * len(METRICS))
    for trace in traces:
        for name in [n for n in ORDER if (trace, n) in by]:
            runs = by[(trace, name)]
            cells = []
            for key, _, digits in METRICS:
                scale = 100.0 if key == "comm_overhead" else 1.0
                m, h = interval([float(r[key]) * scale for r in runs.values()])  # type: ignore[arg-type]
                cells.append(f"{m:.{digits}f} ± {h:.{digits}f}")
            print(f"| {trace} | {name} | {len(runs)} | " + " | ".join(cells) + " |")
    print()
    print(
        "| trace | variant vs base | makespan reduction % | mean JCT reduction % | comm overhead reduction % |"
    )
    print("|---|---|---|---|---|")
    for trace in traces:
        for variant in ("delay", "delay+cassini"):
            for base in ("themis", "th+cassini"):
                if (trace, variant) not in by or (trace, base) not in by:
                    continue
                v, b = by[(trace, variant)], by[(trace, base)]
                seeds = sorted(set(v) & set(b))
                cells = []
                for key in ("makespan_s", "mean_jct_s", "comm_overhead"):
                    red = [
                        100.0 * (1.0 - float(v[s][key]) / float(b[s][key]))  # type: ignore[arg-type]
                        for s in seeds
                        if float(b[s][key]) > 0  # type: ignore[arg-type]
                    ]
                    m, h = interval(red)
                    best = max(red) if red else float("nan")
                    cells.append(f"{m:.1f} ± {h:.1f} (best {best:.1f})")
                print(f"| {trace} | {variant} vs {base} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
