"""Which files does a `cassini emulate` run leave, for a reader and for a paper?

DIR/summary.json      per scheduler: iteration times, switch and host ECN marks,
                      the simulator's prediction, the fidelity verdict, per job;
                      the settings and the Cassini speed-ups
DIR/iterations.csv    every worker's iteration record, with its scheduler
DIR/ecn.csv           the switch's per-port counter series (as `ecn watch`), per scheduler
DIR/ecn-links.csv     the per-logical-link series, per scheduler
DIR/*.png             iteration-time CDF, mean/p99 per model, Cassini speed-up, ECN marks per
                      iteration per model, marks on shared links, per-link marks and
                      utilisation over time, measured vs simulated per job
DIR/report.md         the settings, the tables and the plots
DIR/report.html       the same, self-contained (images embedded), for a browser

Everything is computed from `results.SchedulerRun` through `results.summarise`,
so the tables, the JSON and the plots agree.
"""

from __future__ import annotations

import base64
import csv
import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from controlplane.telemetry import LinkDelta, PortDelta
from emulation.jobs.records import COLUMNS
from scheduler.baselines.registry import CASSINI_BASE
from scheduler.report import ORDER, _finite

from .results import SchedulerRun, job_iterations, summarise

PLOT_DPI = 110
# One marker per job in the measured-vs-simulated figure (more jobs than these: colours only).
JOB_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


@dataclass(frozen=True)
class Report:
    """What was written: summary (the parsed JSON) and every path by name."""

    summary: dict[str, Any]
    paths: dict[str, Path]


def ordered(runs: Sequence[SchedulerRun]) -> list[SchedulerRun]:
    """The paper's order (Ideal, Th+Cassini, Themis, ...), unknown names last."""
    rank = {name: i for i, name in enumerate(ORDER)}
    return sorted(runs, key=lambda r: (rank.get(r.scheduler, len(rank)), r.scheduler))


def speedups(schedulers: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each Cassini variant's mean iteration time speed-up over its base, overall and per job.

    >>> s = {"themis": {"mean_iteration_ms": 300.0, "jobs": {"a": {"mean_iteration_ms": 300.0}}},
    ...      "th+cassini": {"mean_iteration_ms": 250.0, "jobs": {"a": {"mean_iteration_ms": 240.0}}}}
    >>> speedups(s)
    {'th+cassini': {'over': 'themis', 'mean': 1.2, 'jobs': {'a': 1.25}}}
    """
    out: dict[str, dict[str, Any]] = {}
    for variant, base in CASSINI_BASE.items():
        if variant not in schedulers or base not in schedulers:
            continue
        v, b = schedulers[variant], schedulers[base]

        def ratio(num: float | None, den: float | None) -> float | None:
            return round(num / den, 4) if num and den else None

        jobs = {
            job: ratio(b["jobs"][job]["mean_iteration_ms"], v["jobs"][job]["mean_iteration_ms"])
            for job in v["jobs"]
            if job in b["jobs"]
        }
        out[variant] = {
            "base": base,
            "mean": ratio(b["mean_iteration_ms"], v["mean_iteration_ms"]),
            "jobs": jobs,
        }
    return out


def write_report(
    runs: Sequence[SchedulerRun], settings: Mapping[str, Any], out_dir: str | Path
) -> Report:
    """Write every file of the module docstring into `out_dir`; returns the summary and paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs = ordered(runs)
    schedulers = {r.scheduler: summarise(r) for r in runs}
    partial = any(r.partial for r in runs) or settings.get("all_schedulers_ran") is False
    summary = _finite(
        {
            "schedulers": schedulers,
            "speedups": speedups(schedulers),
            "partial": partial,
            "trustworthy": all(s["trustworthy"] for s in schedulers.values()) if runs else False,
            "settings": dict(settings),
        }
    )
    paths: dict[str, Path] = {"summary": out / "summary.json"}
    paths["summary"].write_text(json.dumps(summary, indent=1) + "\n")
    paths["iterations"] = _write_iterations(runs, out / "iterations.csv")
    paths["ecn"] = _write_series(runs, out / "ecn.csv", PortDelta, "ports")
    paths["ecn_links"] = _write_series(runs, out / "ecn-links.csv", LinkDelta, "links")
    paths.update(_plots(runs, summary, out))
    paths["report_md"] = out / "report.md"
    paths["report_md"].write_text(_markdown(summary, paths))
    paths["report_html"] = out / "report.html"
    paths["report_html"].write_text(_html(summary, paths))
    return Report(summary, paths)


def _write_iterations(runs: Sequence[SchedulerRun], path: Path) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["scheduler", *COLUMNS])
        for run in runs:
            for rec in run.records:
                values = asdict(rec)
                w.writerow(
                    [run.scheduler, *("" if values[c] is None else values[c] for c in COLUMNS)]
                )
    return path


def _write_series(runs: Sequence[SchedulerRun], path: Path, cls: type, attr: str) -> Path:
    names = [f.name for f in fields(cls)]
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["scheduler", *names])
        w.writeheader()
        for run in runs:
            for row in getattr(run.telemetry, attr):
                w.writerow({"scheduler": run.scheduler, **asdict(row)})
    return path


# --- plots ---------------------------------------------------------------------


def _plots(runs: Sequence[SchedulerRun], summary: Mapping[str, Any], out: Path) -> dict[str, Path]:
    """Save every figure of `figures` as DIR/<name>.png."""
    import matplotlib.pyplot as plt

    paths: dict[str, Path] = {}
    for name, fig in figures(runs, summary).items():
        paths[name] = out / f"{name}.png"
        fig.savefig(paths[name], dpi=PLOT_DPI)
        plt.close(fig)
    return paths


def figures(runs: Sequence[SchedulerRun], summary: Mapping[str, Any]) -> dict[str, Any]:
    """Every figure of the report by file name, laid out and not yet saved (the legibility
    test reads them as drawn)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    title = _title(summary["settings"])
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

    # per-link marks and utilisation over time
    for run in runs:
        drawn = _link_heatmaps(plt, run)
        if drawn is not None:
            save(drawn, f"links_{_slug(run.scheduler)}")

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


def _link_heatmaps(plt: Any, run: SchedulerRun) -> Any:
    """Marks and utilisation per logical link over time (links that carried traffic)."""
    rows = run.telemetry.links
    if not rows:
        return None
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
    height = max(3.0, 0.22 * len(links) + 1.5)
    fig, axes = plt.subplots(1, 2, figsize=(11, height), sharey=True)
    extent = (times[0], times[-1], len(links) - 0.5, -0.5)
    im = axes[0].imshow(marks, aspect="auto", cmap="Reds", extent=extent, interpolation="nearest")
    fig.colorbar(im, ax=axes[0], label="ECN-marked packets per interval")
    axes[0].set_title(f"{run.scheduler}: ECN marks per link")
    im = axes[1].imshow(util, aspect="auto", cmap="Blues", extent=extent, vmin=0, vmax=1,
                        interpolation="nearest")  # fmt: skip
    fig.colorbar(im, ax=axes[1], label="utilisation (of the scaled link rate)")
    axes[1].set_title(f"{run.scheduler}: utilisation per link")
    shared = set(run.shared_links)
    axes[0].set_yticks(range(len(links)), [f"{lk} *" if lk in shared else lk for lk in links],
                       fontsize=7)  # fmt: skip
    for ax in axes:
        ax.set_xlabel("time (s)")
    return fig


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)


def _title(settings: Mapping[str, Any]) -> str:
    bits = [str(settings.get(k)) for k in ("trace", "topology") if settings.get(k)]
    if "scale" in settings:
        bits.append(f"S={settings['scale']}")
    if "seed" in settings:
        bits.append(f"seed {settings['seed']}")
    return ", ".join(bits)


# --- text ----------------------------------------------------------------------


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _tables(summary: Mapping[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of every table; the markdown and the HTML both render these."""
    sch = summary["schedulers"]
    main = [
        [
            name,
            _fmt(s["mean_iteration_ms"]),
            _fmt(s["p99_iteration_ms"]),
            _fmt(s["sim_mean_iteration_ms"]),
            _fmt(s["ecn_marks"]),
            _fmt(s["ecn_marks_shared_links"]),
            _fmt(s["host_ce_marks"]),
            "yes" if s["trustworthy"] else "NOT TRUSTWORTHY",
        ]
        for name, s in sch.items()
    ]
    jobs = [
        [
            name,
            job,
            j["model"],
            _fmt(j["workers"]),
            _fmt(j["mean_iteration_ms"]),
            _fmt(j["p99_iteration_ms"]),
            _fmt(j["sim_mean_iteration_ms"]),
            _fmt(j["ce_marks"]),
            _fmt(j["adjustments"]),
        ]
        for name, s in sch.items()
        for job, j in s["jobs"].items()
    ]
    fidelity = [
        [
            name,
            _fmt(s["fidelity"].get("frame_late_p99_ms"), 3),
            _fmt(s["fidelity"].get("late_frames")),
            _fmt(s["fidelity"].get("late_wakeups")),
            _fmt(_pct(s["fidelity"].get("machine_cpu_mean"))),
            _fmt(_pct(s["fidelity"].get("machine_steal"))),
            _fmt(_pct(s["fidelity"].get("switch_cpu_mean"))),
            "; ".join(s["fidelity"].get("reasons", [])) or "-",
            ", ".join(s["fidelity"].get("unmeasured", [])) or "-",
        ]
        for name, s in sch.items()
    ]
    ups = [
        [variant, up["base"], _fmt(up["mean"], 3)] for variant, up in summary["speedups"].items()
    ]
    return [
        (
            "Per scheduler",
            ["scheduler", "mean ms", "p99 ms", "simulated mean ms", "ECN marks (switch)",
             "on shared links", "CE received (hosts)", "trustworthy"],
            main,
        ),
        ("Cassini speed-up (mean iteration time, base / variant)", ["variant", "base", "speed-up"],
         ups),
        (
            "Per job",
            ["scheduler", "job", "model", "workers", "mean ms", "p99 ms", "simulated mean ms",
             "CE received", "adjustments"],
            jobs,
        ),
        (
            "Fidelity (did the emulator keep up?)",
            ["scheduler", "p99 frame lateness ms", "late frames", "late loop wake-ups",
             "machine CPU %", "steal %", "switch CPU % of a core", "limits passed", "not measured"],
            fidelity,
        ),
    ]  # fmt: skip


def _pct(value: Any) -> float | None:
    return None if value is None else 100.0 * float(value)


def _settings_lines(summary: Mapping[str, Any]) -> list[str]:
    return [f"{k}: {json.dumps(v)}" for k, v in summary["settings"].items()]


def _status(summary: Mapping[str, Any]) -> str:
    bits = []
    if summary["partial"]:
        bits.append("PARTIAL: the run was interrupted or failed; what completed is below.")
    if not summary["trustworthy"]:
        bits.append("NOT TRUSTWORTHY: the emulator fell behind in at least one run (see Fidelity).")
    return " ".join(bits)


_PLOT_TITLES = {
    "iteration_cdf": "Iteration time CDF",
    "iteration_by_model": "Mean and p99 iteration time per model",
    "speedup": "Cassini speed-up",
    "ecn_per_iteration": "ECN marks per iteration per model",
    "ecn_shared_links": "ECN marks on links shared by jobs",
    "measured_vs_simulated": "Measured vs simulated (fluid model)",
}


def _plot_items(paths: Mapping[str, Path]) -> list[tuple[str, Path]]:
    items = [(t, paths[k]) for k, t in _PLOT_TITLES.items() if k in paths]
    items += [
        (f"Per-link ECN marks and utilisation: {k[len('links_') :]}", p)
        for k, p in paths.items()
        if k.startswith("links_")
    ]
    return items


def _markdown(summary: Mapping[str, Any], paths: Mapping[str, Path]) -> str:
    lines = ["# Cassini emulation report", ""]
    status = _status(summary)
    if status:
        lines += [f"**{status}**", ""]
    for title, header, rows in _tables(summary):
        lines += [f"## {title}", "", "| " + " | ".join(header) + " |"]
        lines.append("|" + "---|" * len(header))
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        lines.append("")
    for title, path in _plot_items(paths):
        lines += [f"## {title}", "", f"![{title}]({path.name})", ""]
    lines += ["## Settings", "", "```", *_settings_lines(summary), "```", ""]
    return "\n".join(lines)


def _html(summary: Mapping[str, Any], paths: Mapping[str, Path]) -> str:
    esc = html.escape
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>Cassini emulation report</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;"
        "padding:3px 8px;text-align:right}th{background:#eee}td:first-child{text-align:left}"
        "img{max-width:100%}.warn{color:#a00;font-weight:bold}pre{background:#f6f6f6;"
        "padding:1em;overflow-x:auto}</style></head><body>",
        "<h1>Cassini emulation report</h1>",
    ]
    status = _status(summary)
    if status:
        parts.append(f"<p class='warn'>{esc(status)}</p>")
    for title, header, rows in _tables(summary):
        parts.append(f"<h2>{esc(title)}</h2><table><tr>")
        parts += [f"<th>{esc(h)}</th>" for h in header]
        parts.append("</tr>")
        for row in rows:
            parts.append("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>")
        parts.append("</table>")
    for title, path in _plot_items(paths):
        data = base64.b64encode(path.read_bytes()).decode()
        parts.append(
            f"<h2>{esc(title)}</h2><img alt='{esc(title)}' src='data:image/png;base64,{data}'>"
        )
    parts.append("<h2>Settings</h2><pre>" + esc("\n".join(_settings_lines(summary))) + "</pre>")
    parts.append("</body></html>\n")
    return "".join(parts)
