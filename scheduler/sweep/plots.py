"""What does a sweep look like? CDFs over its runs and the ratio against load (PNG).

- `ratio_cdf.png`: per Cassini variant, the CDF over cells of the base /
  variant ratio of mean iteration time, p99 slowdown and congestion.
- `iteration_cdf.png`: per scheduler, the CDF of iteration times pooled over
  all cells (each cell contributes its 101 percentiles, weighted by its
  iteration count).
- `ratio_vs_load.png`: mean ratio over the seeds against load, the range as
  a band (only when the sweep has more than one load).
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..baselines.registry import CASSINI_BASE
from .aggregate import DISPLAY, SeedRun, describe_group, load_curve


def save_png(fig: Any, path: Path) -> Path:
    """`fig` as a PNG at `path`, through the one writer of results (never through a link)."""
    from topologies.outputs import write_file

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    return write_file(path, buffer.getvalue())


def write_plots(
    records: Sequence[Mapping[str, Any]], runs: Sequence[SeedRun], out: Path
) -> dict[str, Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths: dict[str, Path] = {}
    variants = list(dict.fromkeys(v for r in runs for v in r.speedups))
    if variants:
        measures = (
            ("mean", "mean iteration time"),
            ("p99_slowdown", "p99 slowdown"),
            ("congestion", "congestion"),
        )
        fig, axes = plt.subplots(1, len(measures), figsize=(12, 3.6))
        for ax, (m, title) in zip(axes, measures, strict=True):
            for v in variants:
                r = np.sort([float(x.speedups[v][m]) for x in runs if v in x.speedups])
                r = r[np.isfinite(r)]
                if r.size:
                    ax.step(
                        r, np.arange(1, r.size + 1) / r.size, where="post", label=DISPLAY.get(v, v)
                    )
            ax.axvline(1.0, color="grey", lw=0.8, ls=":")
            ax.set_xlabel(f"base / variant, {title}")
            ax.set_ylabel("fraction of cells")
            ax.legend(fontsize=8)
        fig.tight_layout()
        paths["ratio_cdf"] = save_png(fig, out / "ratio_cdf.png")
        plt.close(fig)

    pooled: dict[str, list[tuple[np.ndarray, int]]] = {}
    for rec in records:
        counts = {s["name"]: int(s["iterations"]) for s in rec["summaries"]}
        for name, q in rec["iteration_ms_q"].items():
            pooled.setdefault(name, []).append((np.asarray(q), counts.get(name, 1)))
    if pooled:
        fig, ax = plt.subplots(figsize=(6, 4))
        for name, parts in pooled.items():
            values = np.concatenate([q for q, _ in parts])
            weights = np.concatenate([np.full(q.size, n / q.size) for q, n in parts])
            order = np.argsort(values)
            cdf = np.cumsum(weights[order]) / weights.sum()
            ax.plot(values[order], cdf, label=DISPLAY.get(name, name))
        ax.set_xscale("log")
        ax.set_xlabel("iteration time (ms)")
        ax.set_ylabel("fraction of iterations")
        ax.set_title(f"iteration times over {len(records)} cells")
        ax.legend(fontsize=8)
        fig.tight_layout()
        paths["iteration_cdf"] = save_png(fig, out / "iteration_cdf.png")
        plt.close(fig)

    curves = load_curve(runs)
    if any(len(p) > 1 for per in curves.values() for p in per.values()):
        fig, ax = plt.subplots(figsize=(6, 4))
        many = len(curves) > 1
        for rest, per in curves.items():
            for v, points in per.items():
                x = [p[0] for p in points]
                base = CASSINI_BASE.get(v, "base")
                label = f"{DISPLAY.get(v, v)} vs {DISPLAY.get(base, base)}"
                label += f" ({describe_group(rest)})" if many else ""
                (line,) = ax.plot(x, [p[1].mean for p in points], marker="o", label=label)
                lo = [p[1].lo if math.isfinite(p[1].lo) else np.nan for p in points]
                hi = [p[1].hi if math.isfinite(p[1].hi) else np.nan for p in points]
                ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.15)
        ax.axhline(1.0, color="grey", lw=0.8, ls=":")
        ax.set_xlabel("Poisson load")
        ax.set_ylabel("base / variant mean iteration time")
        seeds = len({r.seed for r in runs})
        ax.set_title(f"mean over {seeds} seeds, range shaded")
        ax.legend(fontsize=8)
        fig.tight_layout()
        paths["ratio_vs_load"] = save_png(fig, out / "ratio_vs_load.png")
        plt.close(fig)
    return paths
