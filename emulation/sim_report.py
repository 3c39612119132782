"""Files a `cassini simulate` run leaves behind: summary, raw records, plots, report.

DIR/summary.json   per scheduler figures + Cassini speedups + settings
DIR/iterations.csv one row per iteration: scheduler, job, model, iteration, start_ms, end_ms
DIR/jobs.csv       one row per job: scheduler, job, model, workers, arrival_s, finish_s, jct_s
DIR/*.png          iteration-time CDF, mean iteration time per model, per-link congestion
DIR/report.md      the settings, the table and the plots
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from scheduler.affinity import link_id
from scheduler.experiment import Experiment

ORDER = ("ideal", "th+cassini", "themis", "po+cassini", "pollux", "random")


def write_outputs(exp: Experiment, out_dir: str | Path) -> dict[str, Path]:
    """Write every artefact; returns name -> path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    paths["summary"] = out / "summary.json"
    paths["summary"].write_text(json.dumps(_finite(exp.to_json()), indent=1) + "\n")
    paths["iterations"] = _write_iterations(exp, out / "iterations.csv")
    paths["jobs"] = _write_jobs(exp, out / "jobs.csv")
    paths["links"] = _write_links(exp, out / "links.csv")
    paths.update(_plots(exp, out))
    paths["report"] = _write_report(exp, out / "report.md", paths)
    return paths


def _finite(obj: Any) -> Any:
    """JSON has no infinity: write it as null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


def _write_iterations(exp: Experiment, path: Path) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["scheduler", "job", "model", "iteration", "start_ms", "end_ms"])
        for name, res in exp.results.items():
            for job in res.jobs:
                for i, (s, e) in enumerate(
                    zip(job.iteration_start_ms.tolist(), job.iteration_end_ms.tolist(), strict=True)
                ):
                    w.writerow([name, job.name, job.model, i, f"{s:.3f}", f"{e:.3f}"])
    return path


def _write_jobs(exp: Experiment, path: Path) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(
            [
                "scheduler",
                "job",
                "model",
                "workers",
                "arrival_s",
                "finish_s",
                "jct_s",
                "iterations",
                "adjustments",
                "migrations",
                "marked_mbit",
            ]
        )
        for name, res in exp.results.items():
            for j in res.jobs:
                w.writerow(
                    [
                        name,
                        j.name,
                        j.model,
                        j.workers,
                        f"{j.arrival_s:.3f}",
                        f"{j.finish_s:.3f}",
                        f"{j.completion_s:.3f}",
                        len(j.iteration_ms),
                        j.adjustments,
                        j.migrations,
                        f"{j.marked_mbit:.3f}",
                    ]
                )
    return path


def _write_links(exp: Experiment, path: Path) -> Path:
    """Per scheduler, time bucket and directed link that carried traffic: the series."""
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(
            ["scheduler", "bucket_start_s", "link", "utilization", "oversub_ms", "excess_mbit"]
        )
        for name, res in exp.results.items():
            series = res.links
            util = series.utilization()
            for b, k in zip(*np.nonzero(series.carried_mbit), strict=True):
                w.writerow(
                    [
                        name,
                        f"{b * series.bucket_s:.3f}",
                        link_id(series.links[k]),
                        f"{util[b, k]:.6f}",
                        f"{series.oversub_ms[b, k]:.3f}",
                        f"{series.excess_mbit[b, k]:.3f}",
                    ]
                )
    return path


def format_ratio(ratio: float) -> str:
    """A base / variant ratio for people: infinite when the variant has none left."""
    return f"{ratio:.2f}x" if math.isfinite(ratio) else "inf (none left)"


def _ordered(names: list[str]) -> list[str]:
    return sorted(names, key=lambda n: ORDER.index(n) if n in ORDER else len(ORDER))


def _plots(exp: Experiment, out: Path) -> dict[str, Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths: dict[str, Path] = {}
    names = _ordered(list(exp.results))
    # 1. iteration-time CDF
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in names:
        it = np.concatenate([j.iteration_ms for j in exp.results[name].jobs])
        it.sort()
        ax.plot(it, np.arange(1, it.size + 1) / it.size, label=name)
    ax.set_xlabel("iteration time (ms)")
    ax.set_ylabel("CDF")
    ax.set_xscale("log")
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title("Iteration time, all jobs")
    fig.tight_layout()
    paths["cdf"] = out / "iteration_cdf.png"
    fig.savefig(paths["cdf"], dpi=110)
    plt.close(fig)
    # 2. mean iteration time per model
    models = sorted({m for s in exp.summaries for m in s.per_model_mean_ms})
    fig, ax = plt.subplots(figsize=(max(7, len(models) * 0.7), 4.5))
    width = 0.8 / max(1, len(names))
    by = {s.name: s for s in exp.summaries}
    for i, name in enumerate(names):
        vals = [by[name].per_model_mean_ms.get(m, 0.0) for m in models]
        ax.bar(np.arange(len(models)) + i * width, vals, width, label=name)
    ax.set_xticks(np.arange(len(models)) + 0.4 - width / 2)
    ax.set_xticklabels(models, rotation=45, ha="right")
    ax.set_ylabel("mean iteration time (ms)")
    ax.legend(fontsize=8)
    ax.set_title("Mean iteration time per model")
    fig.tight_layout()
    paths["per_model"] = out / "per_model.png"
    fig.savefig(paths["per_model"], dpi=110)
    plt.close(fig)
    # 3. per-link congestion: the most oversubscribed links, and over time
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name in names:
        links = exp.results[name].links
        per_link = links.oversub_ms.sum(axis=0) / 1e3
        top = np.sort(per_link)[::-1][:30]
        ax1.plot(np.arange(1, top.size + 1), top, marker=".", label=name)
        t = np.arange(links.oversub_ms.shape[0]) * links.bucket_s
        ax2.plot(t, links.oversub_ms.sum(axis=1) / (links.bucket_s * 1e3), label=name)
    ax1.set_xlabel("link rank (most congested first)")
    ax1.set_ylabel("oversubscribed time (s)")
    ax1.set_title("Per-link congestion (ECN stand-in)")
    ax1.legend(fontsize=8)
    ax2.set_xlabel("time (s)")
    ax2.set_ylabel("links oversubscribed (average count)")
    ax2.set_title("Congested links over time")
    fig.tight_layout()
    paths["congestion"] = out / "link_congestion.png"
    fig.savefig(paths["congestion"], dpi=110)
    plt.close(fig)
    return paths


def _write_report(exp: Experiment, path: Path, paths: dict[str, Path]) -> Path:
    s = exp.settings
    lines = [
        "# Cassini fluid-simulation report",
        "",
        f"Topology **{s.get('topology')}** ({s.get('servers')} servers, {s.get('gpus')} GPUs); "
        f"trace **{s.get('trace')}** ({s.get('jobs')} jobs); seed {s.get('seed')}; "
        f"up to {s.get('candidates')} candidate placements per decision; "
        f"model profiles: {s.get('models', 'built-in')}.",
        "",
        f"Simulator settings: `{json.dumps(s.get('simulator'))}`. Harness {s.get('harness')}, "
        f"Python {s.get('python')}, numpy {s.get('numpy')}, numba {s.get('numba')}.",
        "",
        "Congestion is the simulator's stand-in for ECN marks: link-seconds during which the "
        "offered demand on a directed link exceeded its capacity (a switch would mark in exactly "
        "those periods; the fluid model has no queues, so these are not packet counts). "
        "Marked Gbit is the traffic jobs sent through a link while it was oversubscribed: what a "
        "marking switch would have marked, the paper's per-job ECN count.",
        "",
        "| scheduler | mean ms | p50 | p90 | p99 | mean slowdown | p99 slowdown | mean JCT s | oversub link-s | excess Gbit | marked Gbit | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    by = {x.name: x for x in exp.summaries}
    for name in _ordered(list(by)):
        x = by[name]
        lines.append(
            f"| {name} | {x.mean_ms:.1f} | {x.p50_ms:.1f} | {x.p90_ms:.1f} | {x.p99_ms:.1f} | "
            f"{x.mean_slowdown:.3f} | {x.p99_slowdown:.3f} | {x.mean_jct_s:.1f} | {x.oversub_link_s:.1f} | {x.excess_gbit:.1f} | {x.marked_gbit:.1f} | {x.wall_s:.1f} |"
        )
    if exp.speedups:
        lines += [
            "",
            "Cassini speedups over the base scheduler (base / variant; > 1 is better):",
            "",
        ]
        for variant, sp in exp.speedups.items():
            lines.append(
                f"- **{variant}** vs {sp['base']}: mean {sp['mean']:.2f}x, p50 {sp['p50']:.2f}x, "
                f"p90 {sp['p90']:.2f}x, p99 {sp['p99']:.2f}x, JCT {sp['jct']:.2f}x, "
                f"slowdown mean {sp['mean_slowdown']:.2f}x / p99 {sp['p99_slowdown']:.2f}x, congestion {format_ratio(sp['congestion'])}, "
                f"marked traffic {format_ratio(sp['marked'])}"
            )
    lines += [
        "",
        "Paper (testbed, Poisson trace): Th+Cassini 1.4x mean / 1.5x p99 over Themis; similar for Po+Cassini. "
        "Pollux changes worker counts, so its raw iteration times are not comparable to Ideal's; "
        "the slowdown column (iteration time over the same job alone at the same size) is. "
        "Raw p99 iteration time is often set by the slowest model's own iteration time (which no "
        "placement changes); p99 slowdown isolates what the network adds.",
        "",
        f"![iteration time CDF]({paths['cdf'].name})",
        "",
        f"![mean iteration time per model]({paths['per_model'].name})",
        "",
        f"![per-link congestion]({paths['congestion'].name})",
        "",
        f"Raw records: `{paths['iterations'].name}` (per iteration), `{paths['jobs'].name}` (per job), "
        f"`{paths['links'].name}` (per link and {exp.settings.get('simulator', {}).get('bucket_s', '')} s bucket), "
        f"`{paths['summary'].name}`.",
        "",
    ]
    path.write_text("\n".join(lines))
    return path
