"""Which figures does the emulation report draw, and how are they saved?

Iteration-time CDF, mean/p99 per model, Cassini speed-up, ECN marks per
iteration per model, marks on shared links, per-link marks and utilisation
over time, measured vs simulated per job: every one from the runs and the
summary `report.write_report` computed, so the plots and the tables agree.
Each is saved as PNG (for the pages) and PDF (vector, for a paper); the
per-link heatmaps of all schedulers share one colour scale, so two
schedulers' marks compare by colour. The figures drawn from the 10 ms
telemetry are `report_telemetry_figures`'.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .results import SchedulerRun, job_iterations
from .telemetry_series import shared_range

PLOT_DPI = 110
# One marker per job in the measured-vs-simulated figure (more jobs than these: colours only).
JOB_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def save_figures(
    runs: Sequence[SchedulerRun], summary: Mapping[str, Any], out: Path
) -> dict[str, Path]:
    """Save every figure of `figures` as DIR/<name>.png and DIR/<name>.pdf."""
    import matplotlib.pyplot as plt

    paths: dict[str, Path] = {}
    for name, fig in figures(runs, summary).items():
        paths.update(save_figure(fig, out, name))
        plt.close(fig)
    return paths


def save_figure(fig: Any, out: Path, name: str) -> dict[str, Path]:
    """DIR/<name>.png (key `name`) and the vector DIR/<name>.pdf (key `vector_<name>`);
    the PDF without a creation date, so the same run draws the same file."""
    png, pdf = out / f"{name}.png", out / f"{name}.pdf"
    fig.savefig(png, dpi=PLOT_DPI)
    fig.savefig(pdf, metadata={"CreationDate": None})
    return {name: png, f"vector_{name}": pdf}


def figures(runs: Sequence[SchedulerRun], summary: Mapping[str, Any]) -> dict[str, Any]:
    """Every figure of the report by file name, laid out and not yet saved (the legibility
    test reads them as drawn)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    title = title_of(summary["settings"])
    paths: dict[str, Any] = {}
    if not runs:
        return paths
    colours = {r.scheduler: f"C{i}" for i, r in enumerate(runs)}
    its = {r.scheduler: job_iterations(r.records) for r in runs}

    def save(fig: Any, name: str) -> None:
        fig.suptitle(title, fontsize=9)
        fig.tight_layout(rect=(0, 0.07 if getattr(fig, "_legend_below", False) else 0, 1, 1))
        paths[name] = fig

    # iteration-time CDF
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for name, jobs in its.items():
        values = np.sort(np.concatenate([j.iteration_ms for j in jobs.values()] or [np.array([])]))
        if values.size:
            ax.step(values, np.arange(1, values.size + 1) / values.size, where="post",
                    label=name, color=colours[name])  # fmt: skip
    ax.set_xlabel("iteration time (ms)")
    ax.set_ylabel("fraction of iterations")
    ax.set_title("Iteration time CDF (all jobs)")
    ax.grid(alpha=0.3)
    ax.legend()
    save(fig, "iteration_cdf")

    models = sorted({j.model for jobs in its.values() for j in jobs.values()})
    width = 0.8 / max(1, len(runs))
    x = np.arange(len(models))

    # mean and p99 per model
    fig, axes = plt.subplots(1, 2, figsize=(9.6, 4.0))
    for col, (stat, label) in enumerate((("mean", "mean"), ("p99", "p99"))):
        ax = axes[col]
        for i, (name, jobs) in enumerate(its.items()):
            vals = []
            for model in models:
                times = np.concatenate(
                    [j.iteration_ms for j in jobs.values() if j.model == model] or [np.array([])]
                )
                if not times.size:
                    vals.append(np.nan)
                else:
                    vals.append(times.mean() if stat == "mean" else np.percentile(times, 99))
            ax.bar(x + i * width, vals, width, label=name, color=colours[name])
        ax.set_xticks(x + width * (len(runs) - 1) / 2, models, rotation=20)
        ax.set_ylabel(f"{label} iteration time (ms)")
        ax.set_title(f"{label.capitalize()} iteration time per model")
        ax.grid(axis="y", alpha=0.3)
    _legend_below(fig, axes[0], len(runs))
    save(fig, "iteration_by_model")

    # Cassini speed-up over its base
    ups = summary["speedups"]
    if ups:
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        for i, (variant, up) in enumerate(ups.items()):
            names = sorted(up["jobs"])
            vals = [up["jobs"][j] or np.nan for j in names] + [up["mean"] or np.nan]
            ax.bar(np.arange(len(vals)) + i * width, vals, width, label=f"{variant} / {up['base']}")
            ax.set_xticks(np.arange(len(vals)), [*names, "all"], rotation=20)
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_ylabel("speed-up of mean iteration time (x)")
        ax.set_title("Cassini's speed-up over its base scheduler")
        _legend_below(fig, ax, len(ups))
        ax.grid(axis="y", alpha=0.3)
        save(fig, "speedup")

    # ECN marks per iteration per model (host CE counts)
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for i, (name, jobs) in enumerate(its.items()):
        vals = []
        for model in models:
            marks = np.concatenate(
                [j.ce_marks for j in jobs.values() if j.model == model] or [np.array([])]
            )
            vals.append(np.nanmean(marks) if marks.size and not np.all(np.isnan(marks)) else np.nan)
        ax.bar(x + i * width, vals, width, label=name, color=colours[name])
    ax.set_xticks(x + width * (len(runs) - 1) / 2, models, rotation=20)
    ax.set_ylabel("CE-marked packets per iteration (received)")
    ax.set_title("ECN marks per iteration per model")
    ax.grid(axis="y", alpha=0.3)
    _legend_below(fig, ax, len(runs))
    save(fig, "ecn_per_iteration")

    # total marks on shared links
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    names = list(summary["schedulers"])
    shared = [summary["schedulers"][n]["ecn_marks_shared_links"] for n in names]
    total = [summary["schedulers"][n]["ecn_marks"] for n in names]
    xs = np.arange(len(names))
    ax.bar(xs - 0.2, total, 0.4, label="all ports", color="0.6")
    ax.bar(xs + 0.2, shared, 0.4, label="links shared by jobs", color="C3")
    ax.set_xticks(xs, names)
    ax.set_ylabel("ECN-marked packets (switch)")
    ax.set_title("ECN marks counted by the switch")
    _legend_below(fig, ax, 2)
    ax.grid(axis="y", alpha=0.3)
    save(fig, "ecn_shared_links")

    # per-link marks and utilisation over time, every scheduler on one scale of marks
    grids = {r.scheduler: link_grid(r) for r in runs}
    marks_range = shared_range(g.marks for g in grids.values() if g is not None)
    for run in runs:
        grid = grids[run.scheduler]
        if grid is not None:
            save(_link_heatmaps(plt, run, grid, marks_range), f"links_{slug(run.scheduler)}")

    # measured vs simulated
    fig, ax = plt.subplots(figsize=(5.6, 5.0))
    top = 0.0
    # colour: the scheduler; marker: the job, so a reader can tell which point is which
    job_names = sorted({j for s in summary["schedulers"].values() for j in s["jobs"]})
    markers = {j: JOB_MARKERS[i % len(JOB_MARKERS)] for i, j in enumerate(job_names)}
    for name, s in summary["schedulers"].items():
        for job, j in s["jobs"].items():
            if j["sim_mean_iteration_ms"] and j["mean_iteration_ms"]:
                ax.scatter(j["sim_mean_iteration_ms"], j["mean_iteration_ms"],
                           color=colours[name], marker=markers[job], zorder=3)  # fmt: skip
                top = max(top, j["sim_mean_iteration_ms"], j["mean_iteration_ms"])
    for name in summary["schedulers"]:
        ax.scatter([], [], color=colours[name], marker="o", label=name)
    if top:
        ax.plot([0, top * 1.1], [0, top * 1.1], color="black", lw=0.8, label="measured = simulated")
        edge = top * 1.1
        ax.fill_between([0, edge], [0, edge * 0.85], [0, edge * 1.15], color="0.9", zorder=0,
                        label="within 15%")  # fmt: skip
    ax.set_xlabel("fluid simulator: mean iteration time (ms)")
    ax.set_ylabel("emulation: mean iteration time (ms)")
    ax.set_title("Per job: measured vs simulated")
    ax.grid(alpha=0.3)
    legend = ax.legend(fontsize=8, loc="lower right")
    if len(job_names) <= len(JOB_MARKERS):  # more jobs than markers: colours only
        ax.add_artist(legend)
        ax.legend(handles=[Line2D([], [], ls="", marker=markers[j], color="0.35", label=j)
                           for j in job_names],
                  fontsize=8, loc="upper left", title="job", title_fontsize=8)  # fmt: skip
    save(fig, "measured_vs_simulated")
    return paths


def _legend_below(fig: Any, ax: Any, entries: int) -> None:
    """One legend under the axes, where no bar can hide behind it."""
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=max(1, min(entries, 4)), fontsize=9)
    fig._legend_below = True


@dataclass(frozen=True)
class LinkGrid:
    """A run's per-link series as (link, interval) grids: marks per interval, utilisation."""

    links: tuple[str, ...]
    times_s: tuple[float, ...]
    marks: np.ndarray
    util: np.ndarray


def link_grid(run: SchedulerRun) -> LinkGrid | None:
    """Marks and utilisation per logical link over time (links that carried traffic);
    utilisation is of the link's scaled rate from the topology (`run.link_gbps`)."""
    rows = run.telemetry.links
    links = sorted({r.link for r in rows if r.tx_packets})
    times = sorted({round(r.time_s, 3) for r in rows})
    if not links or not times:
        return None
    li = {lk: i for i, lk in enumerate(links)}
    ti = {t: i for i, t in enumerate(times)}
    marks = np.zeros((len(links), len(times)))
    gbps = np.zeros((len(links), len(times)))
    for r in rows:
        if r.link in li:
            marks[li[r.link], ti[round(r.time_s, 3)]] = r.ecn_marked_packets
            gbps[li[r.link], ti[round(r.time_s, 3)]] = r.gbps
    capacity = run.link_gbps
    util = np.array([gbps[i] / capacity.get(lk, gbps[i].max() or 1.0) for lk, i in li.items()])
    return LinkGrid(tuple(links), tuple(times), marks, util)


def _link_heatmaps(
    plt: Any, run: SchedulerRun, grid: LinkGrid, marks_range: tuple[float, float]
) -> Any:
    """The grid as two heatmaps; marks on `marks_range`, the same for every scheduler."""
    links, times = grid.links, grid.times_s
    height = max(3.0, 0.22 * len(links) + 1.5)
    fig, axes = plt.subplots(1, 2, figsize=(11, height), sharey=True)
    extent = (times[0], times[-1], len(links) - 0.5, -0.5)
    vmin, vmax = marks_range
    im = axes[0].imshow(grid.marks, aspect="auto", cmap="Reds", extent=extent, vmin=vmin,
                        vmax=vmax, interpolation="nearest")  # fmt: skip
    fig.colorbar(im, ax=axes[0], label="ECN-marked packets per interval")
    axes[0].set_title(f"{run.scheduler}: ECN marks per link")
    im = axes[1].imshow(grid.util, aspect="auto", cmap="Blues", extent=extent, vmin=0, vmax=1,
                        interpolation="nearest")  # fmt: skip
    fig.colorbar(im, ax=axes[1], label="utilisation (of the scaled link rate)")
    axes[1].set_title(f"{run.scheduler}: utilisation per link")
    shared = set(run.shared_links)
    axes[0].set_yticks(range(len(links)), [f"{lk} *" if lk in shared else lk for lk in links],
                       fontsize=7)  # fmt: skip
    for ax in axes:
        ax.set_xlabel("time (s)")
    return fig


def slug(name: str) -> str:
    """A name as a file name's part: `th+cassini` -> `th_cassini`."""
    return "".join(c if c.isalnum() else "_" for c in name)


def title_of(settings: Mapping[str, Any]) -> str:
    """Every figure's title: the trace, topology, S and seed it shows."""
    bits = [str(settings.get(k)) for k in ("trace", "topology") if settings.get(k)]
    if "scale" in settings:
        bits.append(f"S={settings['scale']}")
    if "seed" in settings:
        bits.append(f"seed {settings['seed']}")
    return ", ".join(bits)
