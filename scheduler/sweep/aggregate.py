"""How do many runs reduce to the README's seed table?

Cells that differ only in their seed form a group. Per group, each Cassini
variant gets its base / variant ratio per seed (`scheduler.simulator.experiment.speedups`,
so the formulas are the simulator's own), and per measure the mean of those
ratios, their range and on how many seeds the variant wins (ratio > 1;
exact ties do not count). Ratios above 1 mean Cassini is better.

>>> stats = RatioStats.of([1.1, 0.9, 1.2])
>>> stats.cell("")
'1.07x [0.90-1.20], 2/3'
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from scheduler.simulator.experiment import speedups

from .cells import summary_from_record
from .config import seed_label

# measure key of `speedups`, its name in the table, and the word after "x"
MEASURES = (
    ("mean", "mean iteration time", ""),
    ("p99", "p99 iteration time", ""),
    ("p99_slowdown", "p99 slowdown", ""),
    ("jct", "mean job completion time", ""),
    ("congestion", "congestion (oversubscribed link-seconds)", " lower"),
    ("marked", "traffic through oversubscribed links", " less"),
)
DISPLAY = {
    "themis": "Themis",
    "th+cassini": "Th+Cassini",
    "pollux": "Pollux",
    "po+cassini": "Po+Cassini",
    "random": "Random",
    "ideal": "Ideal",
}
GROUP_KEYS = (
    "trace",
    "load",
    "jobs",
    "topology",
    "precision",
    "aggregate",
    "pacing",
    "candidates",
    "drift",
    "exact",
    "models",
)

Group = tuple[tuple[str, Any], ...]


def fmt(x: float) -> str:
    """2 decimals below 10, 1 below 100 (39.5), none above; `inf` for none left."""
    if not math.isfinite(x):
        return "inf"
    return f"{x:.2f}" if abs(x) < 10 else f"{x:.1f}" if abs(x) < 100 else f"{x:.0f}"


@dataclass(frozen=True)
class RatioStats:
    mean: float
    lo: float
    hi: float
    wins: int
    n: int

    @staticmethod
    def of(ratios: Sequence[float]) -> RatioStats:
        r = np.asarray(ratios, dtype=float)
        return RatioStats(
            float(r.mean()), float(r.min()), float(r.max()), int((r > 1).sum()), r.size
        )

    def cell(self, word: str) -> str:
        x = "x" if math.isfinite(self.mean) else ""
        return f"{fmt(self.mean)}{x}{word} [{fmt(self.lo)}-{fmt(self.hi)}], {self.wins}/{self.n}"


@dataclass(frozen=True)
class SeedRun:
    """One cell's schedulers, reduced: mean slowdowns and each variant's ratios."""

    group: Group
    seed: int
    slowdown: Mapping[str, float]
    speedups: Mapping[str, Mapping[str, Any]]


def seed_runs(records: Sequence[Mapping[str, Any]]) -> list[SeedRun]:
    """Per stored cell, its slowdowns and `speedups` (in the order given)."""
    out = []
    for r in records:
        cell = r["cell"]
        summaries = [summary_from_record(s) for s in r["summaries"]]
        out.append(
            SeedRun(
                group=tuple((k, cell.get(k)) for k in GROUP_KEYS),
                seed=int(cell["seed"]),
                slowdown={s.name: s.mean_slowdown for s in summaries},
                speedups=speedups(summaries),
            )
        )
    return out


def by_group(runs: Sequence[SeedRun]) -> dict[Group, list[SeedRun]]:
    out: dict[Group, list[SeedRun]] = {}
    for run in runs:
        out.setdefault(run.group, []).append(run)
    return out


def ratio_stats(runs: Sequence[SeedRun]) -> dict[str, dict[str, RatioStats]]:
    """Per variant and measure over the seeds of one group."""
    per: dict[str, dict[str, list[float]]] = {}
    for run in runs:
        for variant, sp in run.speedups.items():
            for m, _, _ in MEASURES:
                per.setdefault(variant, {}).setdefault(m, []).append(float(sp[m]))
    return {v: {m: RatioStats.of(r) for m, r in ms.items()} for v, ms in per.items()}


@dataclass(frozen=True)
class Headroom:
    """How far a base is from Ideal (mean slowdown ratio) and the share its variant closes."""

    variant: str
    gap: tuple[float, ...]
    closed: tuple[float, ...]


def headroom(runs: Sequence[SeedRun]) -> list[Headroom]:
    per: dict[str, list[tuple[float, float]]] = {}
    for run in runs:
        if "ideal" not in run.slowdown:
            continue
        for variant, sp in run.speedups.items():
            base = run.slowdown[str(sp["base"])]
            ours, ideal = run.slowdown[variant], run.slowdown["ideal"]
            closed = (base - ours) / (base - ideal) if base > ideal else 0.0
            per.setdefault(variant, []).append((base / ideal, closed))
    out = []
    for variant, pairs in per.items():
        gap, closed = np.array(pairs).T
        out.append(Headroom(variant, tuple(gap.tolist()), tuple(closed.tolist())))
    return out


def extremes(runs: Sequence[SeedRun]) -> tuple[int, int] | None:
    """On how many seeds Ideal has the lowest and Random the highest mean slowdown."""
    if not runs or not all({"ideal", "random"} <= set(r.slowdown) for r in runs):
        return None
    lowest = sum(min(r.slowdown, key=r.slowdown.__getitem__) == "ideal" for r in runs)
    highest = sum(max(r.slowdown, key=r.slowdown.__getitem__) == "random" for r in runs)
    return lowest, highest


def describe_group(group: Group, varying: Sequence[str] | None = None) -> str:
    """`poisson, load 0.9, 60 jobs, cassini-testbed` (only `varying` keys if given)."""
    g = dict(group)
    parts = []
    for k in GROUP_KEYS:
        v = g.get(k)
        if v is None or (varying is not None and k not in varying):
            continue
        if k == "trace":
            parts.append(str(v))
        elif k == "jobs":
            parts.append(f"{v} jobs")
        elif k == "topology":
            parts.append(str(v))
        elif k in ("exact", "pacing"):
            parts.append(f"{k} {'on' if v else 'off'}")
        else:
            parts.append(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}")
    return ", ".join(parts)


def markdown_table(runs: Sequence[SeedRun]) -> str:
    """One group's table, as the README's held-out seed table shows it."""
    stats = ratio_stats(runs)
    seeds = seed_label([r.seed for r in runs])
    head = [f"{_pair(v, runs)}, seeds {seeds}" for v in stats]
    lines = ["| | " + " | ".join(head) + " |", "|---|" + "---|" * len(head)]
    for m, name, word in MEASURES:
        cells = [stats[v][m].cell(word) for v in stats]
        lines.append("| " + " | ".join([name, *cells]) + " |")
    return "\n".join(lines)


def _pair(variant: str, runs: Sequence[SeedRun]) -> str:
    base = str(runs[0].speedups[variant]["base"])
    return f"{DISPLAY.get(variant, variant)} vs {DISPLAY.get(base, base)}"


def load_curve(
    runs: Sequence[SeedRun], measure: str = "mean"
) -> dict[Group, dict[str, list[tuple[float, RatioStats]]]]:
    """Per group without the load: per variant, (load, ratio stats) in load order."""
    out: dict[Group, dict[str, list[tuple[float, RatioStats]]]] = {}
    for group, members in by_group(runs).items():
        g = dict(group)
        load = g.get("load")
        if load is None:
            continue
        rest = tuple((k, v) for k, v in group if k != "load")
        for variant, ms in ratio_stats(members).items():
            out.setdefault(rest, {}).setdefault(variant, []).append((float(load), ms[measure]))
    for per in out.values():
        for points in per.values():
            points.sort(key=lambda p: p[0])
    return out


def markdown_report(records: Sequence[Mapping[str, Any]]) -> str:
    """table.md: per group the seed table, Ideal/Random extremes and the gap to Ideal."""
    runs = seed_runs(records)
    groups = by_group(runs)
    varying = [k for k in GROUP_KEYS if len({dict(g).get(k) for g in groups}) > 1]
    out = [
        "# Sweep results",
        "",
        "Ratios are base over Cassini variant (> 1: Cassini is better): the mean over",
        "the seeds, the range in brackets, and on how many seeds the variant is better.",
        "",
    ]
    for group, members in groups.items():
        out += [f"## {describe_group(group)}", ""]
        if any(m.speedups for m in members):
            out += [markdown_table(members), ""]
        ext = extremes(members)
        if ext is not None:
            out.append(
                f"Lowest mean slowdown: Ideal on {ext[0]}/{len(members)} seeds; "
                f"highest: Random on {ext[1]}/{len(members)}."
            )
        for h in headroom(members):
            out.append(headroom_line(h))
        out.append("")
    curves = load_curve(runs)
    if curves and any(len(p) > 1 for per in curves.values() for p in per.values()):
        out += ["## Mean iteration time ratio vs load", ""]
        for rest, per in curves.items():
            if len(groups) > 1 and varying != ["load"]:
                out += [
                    f"{describe_group(rest, [k for k in varying if k != 'load']) or 'all cells'}:",
                    "",
                ]
            variants = list(per)
            out.append(
                "| load | " + " | ".join(_pair(v, runs_of(runs, rest)) for v in variants) + " |"
            )
            out.append("|---|" + "---|" * len(variants))
            loads = sorted({load for pts in per.values() for load, _ in pts})
            for load in loads:
                cells = []
                for v in variants:
                    hit = [s for x, s in per[v] if x == load]
                    cells.append(hit[0].cell("") if hit else "")
                out.append(f"| {load:g} | " + " | ".join(cells) + " |")
            out.append("")
    return "\n".join(out)


def runs_of(runs: Sequence[SeedRun], rest: Group) -> list[SeedRun]:
    return [r for r in runs if tuple((k, v) for k, v in r.group if k != "load") == rest]


def headroom_line(h: Headroom) -> str:
    """The seed sweep's sentence on the gap to Ideal."""
    gap, closed = np.array(h.gap), np.array(h.closed)
    return (
        f"{h.variant}: its base's mean slowdown is {gap.mean():.2f}x Ideal's "
        f"[{gap.min():.2f}-{gap.max():.2f}]; {h.variant} closes {closed.mean():.0%} of that "
        f"gap on average [{closed.min():.0%} to {closed.max():.0%}] over {len(gap)} seeds"
    )
