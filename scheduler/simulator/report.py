"""Files a `cassini simulate` run leaves behind: summary, raw records, plots, report.

DIR/summary.json   per scheduler figures + Cassini speedups + settings
DIR/iterations.csv one row per iteration: scheduler, job, model, iteration, start_ms, end_ms
DIR/jobs.csv       one row per job: scheduler, job, model, workers, arrival_s, finish_s, jct_s
DIR/*.png          iteration-time and slowdown CDFs, mean iteration time per model,
                   marked traffic per job, per-link congestion, congestion over time
                   (titles name the trace, the topology and the seed)
DIR/report.md      the settings, the table, the paper's figures for the trace's kind, the plots
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from scheduler.cassini.affinity import link_id

from .experiment import Experiment, _ratio

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


# ---------------------------------------------------------------- plot data
# Pure functions: what each plot draws, so tests can check the series.


def subtitle(exp: Experiment) -> str:
    """What every plot title names: the trace, the topology and (for a file) the seed."""
    s = exp.settings
    seed = f", seed {s.get('seed')}" if s.get("trace_kind", "file") == "file" else ""
    return f"trace {s.get('trace')}{seed}, {s.get('topology')}"


def cdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted values and their empirical CDF (i / n)."""
    x = np.sort(np.asarray(values, dtype=float))
    return x, np.arange(1, x.size + 1) / max(1, x.size)


def _pooled(arrays: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(arrays) if arrays else np.zeros(0)


def iteration_cdfs(exp: Experiment) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per scheduler: the CDF of every iteration time (ms), all jobs pooled."""
    return {
        name: cdf(_pooled([j.iteration_ms for j in exp.results[name].jobs]))
        for name in _ordered(list(exp.results))
    }


def slowdown_cdfs(exp: Experiment) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per scheduler: the CDF of every iteration's slowdown (time over the job alone).

    The fair comparison: Pollux gives jobs fewer GPUs, so raw iteration times
    differ for reasons that are not the network.
    """
    return {
        name: cdf(_pooled([j.slowdown for j in exp.results[name].jobs]))
        for name in _ordered(list(exp.results))
    }


def marked_per_job(exp: Experiment, top: int = 12) -> tuple[list[str], dict[str, list[float]]]:
    """The `top` jobs by marked traffic (Gbit), per scheduler: the paper's per-job ECN marks.

    The paper's dynamic case compares DLRM's marks under a base scheduler and
    its Cassini variant, so the schedulers shown are the Cassini pairs that
    ran (all schedulers if none did), and jobs are ranked by the most any of
    them marked. A job a scheduler never ran counts 0.
    """
    pairs = {n for variant, sp in exp.speedups.items() for n in (variant, str(sp["base"]))}
    names = _ordered([n for n in exp.results if n in pairs] or list(exp.results))
    per = {n: {j.name: j.marked_mbit / 1e3 for j in exp.results[n].jobs} for n in names}
    jobs = {job for marks in per.values() for job in marks}
    ranked = sorted(jobs, key=lambda job: (-max(per[n].get(job, 0.0) for n in names), job))
    chosen = ranked[:top]
    return chosen, {n: [per[n].get(job, 0.0) for job in chosen] for n in names}


def congestion_over_time(
    exp: Experiment, points: int = 200
) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per scheduler: bucket start (s), links oversubscribed (average count), and its
    moving average over a window that leaves about `points` windows in the longest run.

    The raw series is one value per 5 s bucket: at 200 jobs that is thousands
    of steps per scheduler, which drawn on top of each other read as noise.
    """
    names = _ordered(list(exp.results))
    window = _window_buckets(exp, points)
    out = {}
    for name in names:
        links = exp.results[name].links
        raw = links.oversub_ms.sum(axis=1) / (links.bucket_s * 1e3)
        t = np.arange(raw.size) * links.bucket_s
        kernel = np.ones(window) / window
        smooth = np.convolve(raw, kernel, mode="same") if raw.size >= window else raw.copy()
        out[name] = (t, raw, smooth)
    return out


# ---------------------------------------------------------------- plots


PLOT_FILES = {
    "cdf": "iteration_cdf.png",
    "slowdown_cdf": "slowdown_cdf.png",
    "per_model": "per_model.png",
    "marked_per_job": "marked_per_job.png",
    "congestion": "link_congestion.png",
    "congestion_over_time": "congestion_over_time.png",
}


def _plots(exp: Experiment, out: Path) -> dict[str, Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = {key: out / name for key, name in PLOT_FILES.items()}
    names = _ordered(list(exp.results))
    colour = {n: f"C{i}" for i, n in enumerate(names)}
    sub = subtitle(exp)

    def save(fig: Any, key: str, title: str) -> None:
        fig.suptitle(f"{title}\n{sub}", fontsize=10)
        fig.tight_layout()
        fig.savefig(paths[key], dpi=110, metadata={"Title": f"{title}; {sub}"})
        plt.close(fig)

    # 1. iteration-time and slowdown CDFs
    for key, cdfs, xlabel, title, xscale in (
        ("cdf", iteration_cdfs(exp), "iteration time (ms)", "Iteration time, all jobs", "log"),
        (
            "slowdown_cdf",
            slowdown_cdfs(exp),
            "slowdown (iteration time / same job alone)",
            "Iteration slowdown, all jobs (the fair comparison)",
            "linear",
        ),
    ):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for name, (x, y) in cdfs.items():
            ax.plot(x, y, label=name, color=colour[name])
        ax.set_xlabel(xlabel)
        ax.set_ylabel("CDF")
        ax.set_xscale(xscale)
        ax.grid(alpha=0.3)
        ax.legend()
        save(fig, key, title)
    # 2. mean iteration time per model
    models = sorted({m for s in exp.summaries for m in s.per_model_mean_ms})
    fig, ax = plt.subplots(figsize=(max(7, len(models) * 0.7), 4.5))
    width = 0.8 / max(1, len(names))
    by = {s.name: s for s in exp.summaries}
    for i, name in enumerate(names):
        vals = [by[name].per_model_mean_ms.get(m, 0.0) for m in models]
        ax.bar(np.arange(len(models)) + i * width, vals, width, label=name, color=colour[name])
    ax.set_xticks(np.arange(len(models)) + 0.4 - width / 2)
    ax.set_xticklabels(models, rotation=45, ha="right")
    ax.set_ylabel("mean iteration time (ms)")
    ax.legend(fontsize=8)
    save(fig, "per_model", "Mean iteration time per model")
    # 3. marked traffic per job
    jobs, marked = marked_per_job(exp)
    shown_names = list(marked)
    fig, ax = plt.subplots(figsize=(8, 1.8 + 0.18 * len(jobs) * len(shown_names)))
    height = 0.8 / max(1, len(shown_names))
    for i, name in enumerate(shown_names):
        ax.barh(
            np.arange(len(jobs)) + i * height,
            marked[name],
            height,
            label=name,
            color=colour[name],
        )
    ax.set_yticks(np.arange(len(jobs)) + 0.4 - height / 2)
    ax.set_yticklabels(jobs, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("traffic sent through oversubscribed links (Gbit; what a switch would mark)")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=8)
    shown = f"the {len(jobs)} most marked jobs" if len(jobs) < _job_count(exp) else "every job"
    save(fig, "marked_per_job", f"Marked traffic per job (ECN stand-in), {shown}")
    # 4. per-link congestion: the most oversubscribed links
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in names:
        per_link = exp.results[name].links.oversub_ms.sum(axis=0) / 1e3
        top = np.sort(per_link)[::-1][:30]
        ax.plot(np.arange(1, top.size + 1), top, marker=".", label=name, color=colour[name])
    ax.set_xlabel("link rank (most congested first)")
    ax.set_ylabel("oversubscribed time (s)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, "congestion", "Per-link congestion (ECN stand-in), 30 most congested links")
    # 5. congested links over time: one row per scheduler, shared axes
    series = congestion_over_time(exp)
    span = max((float(t[-1]) for t, _, _ in series.values() if t.size), default=0.0)
    unit, scale = ("h", 3600.0) if span > 3 * 3600 else ("min", 60.0) if span > 1200 else ("s", 1.0)
    fig, axes = plt.subplots(
        len(names), 1, figsize=(10, 1.3 * len(names) + 1.2), sharex=True, sharey=True, squeeze=False
    )
    peak = max((float(sm.max()) for _, _, sm in series.values() if sm.size), default=0.0)
    for ax, name in zip(axes[:, 0], names, strict=True):
        t, _, smooth = series[name]
        ax.fill_between(t / scale, smooth, color=colour[name], alpha=0.3, lw=0)
        ax.plot(t / scale, smooth, color=colour[name], lw=1.0)
        ax.set_ylabel(name, rotation=0, ha="right", va="center", fontsize=9)
        ax.grid(alpha=0.3)
        ax.set_ylim(0, max(peak * 1.1, 1.0))
    axes[-1, 0].set_xlabel(f"time ({unit}); moving average over {_window_s(exp):g} s")
    save(fig, "congestion_over_time", "Links oversubscribed over time (average count)")
    return paths


def _job_count(exp: Experiment) -> int:
    return max((len(r.jobs) for r in exp.results.values()), default=0)


def _window_buckets(exp: Experiment, points: int = 200) -> int:
    """Buckets per moving-average window: about `points` windows in the longest run."""
    longest = max((r.links.oversub_ms.shape[0] for r in exp.results.values()), default=1)
    return max(1, round(longest / points))


def _window_s(exp: Experiment) -> float:
    bucket = next((r.links.bucket_s for r in exp.results.values()), 0.0)
    return _window_buckets(exp) * bucket


# ---------------------------------------------------------------- report

# The paper's headline figures (NSDI 2024, testbed of 24 servers), per trace kind.
PAPER_FIGURES = {
    "poisson": (
        "Paper (testbed, Poisson trace): Th+Cassini 1.4x mean / 1.5x p99 iteration time over "
        "Themis, close to Ideal; similar for Po+Cassini over Pollux."
    ),
    "dynamic": (
        "Paper (testbed, dynamic trace: DLRM and ResNet50 arrive into a busy cluster): "
        "Th+Cassini 1.5x mean / 2.2x p99 iteration time over Themis, Po+Cassini 1.6x / 2.5x "
        "over Pollux; DLRM sees 27x (Themis) and 33x (Pollux) more ECN marks than with Cassini. "
        "The per-job marked traffic plot below is this simulation's counterpart of those marks."
    ),
}


def _newcomer_lines(exp: Experiment) -> list[str]:
    """Per Cassini variant, the marked traffic of the jobs that arrived after t = 0."""
    lines = []
    for variant, sp in exp.speedups.items():
        base = str(sp["base"])
        b = {j.name: j for j in exp.results[base].jobs}
        v = {j.name: j for j in exp.results[variant].jobs}
        for name in sorted(n for n in v if v[n].arrival_s > 0 and n in b):
            ratio = _ratio(b[name].marked_mbit, v[name].marked_mbit)
            lines.append(
                f"- {name}: marked {b[name].marked_mbit / 1e3:.1f} Gbit under {base}, "
                f"{v[name].marked_mbit / 1e3:.1f} Gbit under {variant} "
                f"({base} / {variant}: {format_ratio(ratio)})"
            )
    return lines


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
        "marking switch would have marked, the paper's per-job ECN count. "
        "Makespan runs from the first arrival to the last job's end; JCT from a job's arrival to "
        "its end (queueing included). Comm overhead is the share of all iteration time above the "
        "jobs' profiles alone: what sharing the network added (for Cassini, pacing idle too).",
        "",
        "| scheduler | mean ms | p50 | p90 | p99 | mean slowdown | p99 slowdown | mean JCT s | oversub link-s | excess Gbit | marked Gbit | wall s | makespan s | comm overhead |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    by = {x.name: x for x in exp.summaries}
    for name in _ordered(list(by)):
        x = by[name]
        lines.append(
            f"| {name} | {x.mean_ms:.1f} | {x.p50_ms:.1f} | {x.p90_ms:.1f} | {x.p99_ms:.1f} | "
            f"{x.mean_slowdown:.3f} | {x.p99_slowdown:.3f} | {x.mean_jct_s:.1f} | {x.oversub_link_s:.1f} | {x.excess_gbit:.1f} | {x.marked_gbit:.1f} | {x.wall_s:.1f} | "
            f"{x.makespan_s:.1f} | {x.comm_overhead:.3f} |"
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
                f"makespan {format_ratio(sp.get('makespan', 1.0))}, "
                f"slowdown mean {sp['mean_slowdown']:.2f}x / p99 {sp['p99_slowdown']:.2f}x, congestion {format_ratio(sp['congestion'])}, "
                f"marked traffic {format_ratio(sp['marked'])}"
            )
    kind = str(s.get("trace_kind", "file"))
    paper = PAPER_FIGURES.get(
        kind,
        PAPER_FIGURES["poisson"] + " (This trace is not one of "
        "the paper's, so the comparison is loose.)",
    )
    lines += ["", paper]
    if kind == "dynamic":
        newcomers = _newcomer_lines(exp)
        if newcomers:
            lines += ["", "Marked traffic of the arriving jobs (base / Cassini variant):", ""]
            lines += newcomers
    lines += [
        "",
        "Pollux changes worker counts, so its raw iteration times are not comparable to Ideal's; "
        "the slowdown column and CDF (iteration time over the same job alone at the same size) are. "
        "Raw p99 iteration time is often set by the slowest model's own iteration time (which no "
        "placement changes); p99 slowdown isolates what the network adds.",
        "",
        f"![iteration slowdown CDF]({paths['slowdown_cdf'].name})",
        "",
        f"![iteration time CDF]({paths['cdf'].name})",
        "",
        f"![mean iteration time per model]({paths['per_model'].name})",
        "",
        f"![marked traffic per job]({paths['marked_per_job'].name})",
        "",
        f"![per-link congestion]({paths['congestion'].name})",
        "",
        f"![links oversubscribed over time]({paths['congestion_over_time'].name})",
        "",
        f"Raw records: `{paths['iterations'].name}` (per iteration), `{paths['jobs'].name}` (per job), "
        f"`{paths['links'].name}` (per link and {exp.settings.get('simulator', {}).get('bucket_s', '')} s bucket), "
        f"`{paths['summary'].name}`.",
        "",
    ]
    path.write_text("\n".join(lines))
    return path
