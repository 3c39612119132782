"""Which figures does the report draw from the runs' 10 ms telemetry, and how are they saved?

For every link two or more jobs share, each job's utilisation over a window
of a few iterations (stacked, one colour per job, the agents' iteration
starts marked) above the link's queue depth on the same time axis; the
marks the switch counted on each job's traffic per iteration, as a time
series per scheduler and as a CDF per model. The numbers come from
`telemetry_series` (pure); this module finds a run's `telemetry.csv` and
`queues.csv`, draws, and saves each figure as PNG and PDF. A run without
telemetry (a run folder from before 10 ms sampling, a target that does not
sample) gets a one-line note instead of these figures; the report does not
print, so a terminal's progress bar is left alone.
"""

from __future__ import annotations

import glob
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .report_figures import save_figure, slug, title_of
from .results import SchedulerRun
from .telemetry_series import (
    OTHER_JOB,
    QUEUES_FILE,
    TELEMETRY_FILE,
    JobStarts,
    Queues,
    Telemetry,
    TelemetryFileError,
    Utilisation,
    cdf_points,
    choose_window,
    downsample,
    iteration_marks,
    job_starts,
    link_utilisation,
    queue_depth,
    read_queues,
    read_telemetry,
    same_clock,
    sample_interval,
    shared_range,
)

WINDOW_ITERATIONS = 4  # iterations of the slowest job on a link in its utilisation window
MAX_WINDOW_SAMPLES = 3000  # (our choice) a window never holds more samples than this
MAX_SERIES_POINTS = 2000  # (our choice) points per line in a time series, after thinning
# Figure names: these two, and per shared link `util:<scheduler>:<link>` (its files
# util_<scheduler>_<link>.png/.pdf with the names' other characters as '_').
UTIL = "util"
ECN_SERIES = "ecn_iteration_series"
ECN_CDF = "ecn_iteration_cdf"
TITLES = {
    ECN_SERIES: "ECN marks per iteration over time (switch, per job)",
    ECN_CDF: "ECN marks per iteration, CDF per model (switch)",
}


@dataclass(frozen=True)
class RunTelemetry:
    """One scheduler's samples and queue depths (queues None: no queues.csv)."""

    telemetry: Telemetry
    queues: Queues | None
    interval_s: float


@dataclass
class Drawn:
    """What was drawn, by name (PNG; `vector_<name>` the PDF), and a note per figure left out."""

    paths: dict[str, Path] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def plot_items(paths: Mapping[str, Path]) -> list[tuple[str, Path]]:
    """(title, PNG) of every figure of this module in `paths`, in the report's order."""
    items = [(t, paths[k]) for k, t in TITLES.items() if k in paths]
    for key, path in paths.items():
        kind, _, rest = key.partition(":")
        if kind == UTIL:
            scheduler, _, link = rest.partition(":")
            items.append((f"Per-job utilisation and queue depth on {link}: {scheduler}", path))
    return items


def telemetry_files(out: Path, scheduler: str, name: str) -> list[Path]:
    """The scheduler's `name` files: in its run folder (DIR/<runs>/<scheduler>/), one per
    segment when its trace ran in segments."""
    here = glob.escape(scheduler)
    return sorted({*out.glob(f"*/{here}/{name}"), *out.glob(f"*/{here}/segment-*/{name}")})


def load_run(out: Path, scheduler: str) -> tuple[RunTelemetry | None, list[str]]:
    """The scheduler's telemetry, or None and a note saying why it is not there."""
    files = telemetry_files(out, scheduler, TELEMETRY_FILE)
    if not files:
        return None, [
            f"{scheduler}: no {TELEMETRY_FILE} in its run folder (a run without 10 ms "
            "sampling): per-job link utilisation and per-iteration switch marks not drawn."
        ]
    notes = []
    try:
        telemetry = read_telemetry(files)
    except (TelemetryFileError, ValueError, IndexError) as err:
        return None, [f"{scheduler}: {TELEMETRY_FILE} unreadable ({err}): figures not drawn."]
    queues = None
    queue_files = telemetry_files(out, scheduler, QUEUES_FILE)
    if queue_files:
        try:
            queues = read_queues(queue_files)
        except (TelemetryFileError, ValueError, IndexError) as err:
            notes.append(f"{scheduler}: {QUEUES_FILE} unreadable ({err}): no queue depth drawn.")
    else:
        notes.append(f"{scheduler}: no {QUEUES_FILE} in its run folder: no queue depth drawn.")
    return RunTelemetry(telemetry, queues, sample_interval(telemetry.time_s)), notes


def job_colours(runs: Sequence[SchedulerRun]) -> dict[str, str]:
    """One colour per job, the same in every scheduler's figures; `other` grey."""
    names = sorted({r.job for run in runs for r in run.records})
    return {**{job: f"C{i % 10}" for i, job in enumerate(names)}, OTHER_JOB: "0.6"}


def save_telemetry_figures(
    runs: Sequence[SchedulerRun],
    summary: Mapping[str, Any],
    out: Path,
    loaded: Mapping[str, RunTelemetry | None] | None = None,
) -> Drawn:
    """Draw and save every figure of the module docstring into `out`; `loaded` (by
    scheduler) replaces reading the run folders under `out`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drawn = Drawn()
    data: dict[str, RunTelemetry] = {}
    for run in runs:
        if loaded is not None:
            got = loaded.get(run.scheduler)
            notes = [] if got else [f"{run.scheduler}: no telemetry: figures not drawn."]
        else:
            got, notes = load_run(out, run.scheduler)
        drawn.notes += notes
        if got is not None and not len(got.telemetry):
            drawn.notes.append(f"{run.scheduler}: {TELEMETRY_FILE} holds no sample.")
        elif got is not None and not same_clock(got.telemetry, job_starts(run.records)):
            drawn.notes.append(
                f"{run.scheduler}: no iteration starts within {TELEMETRY_FILE}'s samples "
                "(not on the clock of iterations.csv): figures not drawn."
            )
        elif got is not None:
            data[run.scheduler] = got
    if not data:
        return drawn
    title = title_of(summary.get("settings", {}))
    colours = job_colours(runs)
    starts = {run.scheduler: job_starts(run.records) for run in runs}

    def keep(fig: Any, name: str, key: str | None = None) -> None:
        fig.suptitle(title, fontsize=9)
        saved = save_figure(fig, out, name)
        drawn.paths.update({k.replace(name, key or name): p for k, p in saved.items()})
        plt.close(fig)

    views = []
    for run in runs:
        if run.scheduler not in data:
            continue
        for link, jobs in sorted(run.shared_links.items()):
            if len(jobs) < 2:
                continue
            capacity = run.link_gbps.get(link)
            if not capacity:
                drawn.notes.append(
                    f"{run.scheduler}: no rate for shared link {link} in the topology: "
                    "its utilisation not drawn."
                )
                continue
            mine = {j: starts[run.scheduler][j] for j in jobs if j in starts[run.scheduler]}
            views.append(link_view(run.scheduler, link, capacity, data[run.scheduler], mine))
    # one scale for every scheduler's figure, as for the heatmaps
    util_top = max([1.05, *(1.05 * float(v.util.share.sum(axis=0).max(initial=0)) for v in views)])
    queue_top = 1.05 * shared_range(v.depth for v in views if v.depth is not None)[1]
    for view in views:
        fig = draw_link(plt, view, colours, (util_top, queue_top))
        keep(fig, f"{UTIL}_{slug(view.scheduler)}_{slug(view.link)}",
             f"{UTIL}:{view.scheduler}:{view.link}")  # fmt: skip
    series = {s: marks_by_job(data[s], starts[s]) for s in starts if s in data}
    keep(draw_marks_series(plt, series, colours), ECN_SERIES)
    keep(draw_marks_cdf(plt, series, {r.scheduler: f"C{i}" for i, r in enumerate(runs)}), ECN_CDF)
    return drawn


@dataclass(frozen=True)
class JobMarks:
    """One job's marks per iteration and when each iteration started (s on the run's clock)."""

    model: str
    starts_s: np.ndarray
    marks: np.ndarray


def marks_by_job(run: RunTelemetry, starts: Mapping[str, JobStarts]) -> dict[str, JobMarks]:
    """Per job, the switch's marks per iteration (`telemetry_series.iteration_marks`)."""
    return {
        job: JobMarks(s.model, s.starts_s, iteration_marks(run.telemetry, s, run.interval_s))
        for job, s in starts.items()
    }


@dataclass(frozen=True)
class LinkView:
    """What the figure of one shared link shows: the window (s on the run's clock), each
    job's utilisation, the queue depth (None: no queues.csv), the jobs' iteration starts."""

    scheduler: str
    link: str
    capacity_gbps: float
    interval_s: float
    origin_s: float  # the run's first sample: the figure's zero
    window: tuple[float, float]
    util: Utilisation
    queue_times_s: np.ndarray | None
    depth: np.ndarray | None
    starts: Mapping[str, np.ndarray]


def link_view(
    scheduler: str,
    link: str,
    capacity_gbps: float,
    run: RunTelemetry,
    starts: Mapping[str, JobStarts],
) -> LinkView:
    """The window of a few iterations of the link's jobs, and what falls in it."""
    tel = run.telemetry
    first, last = float(tel.time_s.min()), float(tel.time_s.max())
    lo, hi = choose_window(starts, first - run.interval_s, last, WINDOW_ITERATIONS)
    hi = min(hi, lo + MAX_WINDOW_SAMPLES * run.interval_s)
    util = link_utilisation(tel, link, capacity_gbps, (lo, hi), run.interval_s)
    qt, depth = (None, None)
    if run.queues is not None:
        qt, depth = queue_depth(run.queues, link, (lo, hi), run.interval_s)
    inside = {j: s.starts_s[(s.starts_s >= lo) & (s.starts_s <= hi)] for j, s in starts.items()}
    return LinkView(scheduler, link, capacity_gbps, run.interval_s, first, (lo, hi), util, qt,
                    depth, inside)  # fmt: skip


def draw_link(
    plt: Any, view: LinkView, colours: Mapping[str, str], tops: tuple[float, float]
) -> Any:
    """Stacked per-job utilisation of the link over the view's window, its queue depth
    below; `tops`: the utilisation and queue axes' upper limits (one for all schedulers)."""
    with_queue = view.depth is not None
    fig, axes = plt.subplots(
        2 if with_queue else 1, 1, figsize=(8.0, 5.2 if with_queue else 3.8), sharex=True,
        squeeze=False, gridspec_kw={"height_ratios": [3, 1.2] if with_queue else [1]},
    )  # fmt: skip
    ax = axes[0][0]
    first, (lo, hi), util = view.origin_s, view.window, view.util
    x = util.times_s - first  # the figures' clock: seconds since the run's first sample
    base = np.zeros(x.size)
    for j, job in enumerate(util.jobs):
        top = base + util.share[j]
        ax.fill_between(x, base, top, step="pre", color=colours.get(job, "0.3"), alpha=0.75,
                        lw=0, label=job)  # fmt: skip
        base = top
    marked = False
    for job, times in sorted(view.starts.items()):
        for t in times - first:
            ax.axvline(t, color=colours.get(job, "0.3"), ls="--", lw=1.0,
                       label=None if marked else "iteration start (dashed, job's colour)")  # fmt: skip
            marked = True
    ax.set_ylim(0, tops[0])
    ax.set_xlim(lo - first, hi - first)
    ax.set_ylabel("utilisation of the link")
    ax.set_title(f"{view.scheduler}: {view.link} ({view.capacity_gbps * 1e3:.3g} Mbit/s), "
                 f"{view.interval_s * 1e3:.3g} ms samples", fontsize=10)  # fmt: skip
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if view.depth is not None and view.queue_times_s is not None:
        qx, qy = downsample(view.queue_times_s - first, view.depth.astype(float),
                            MAX_SERIES_POINTS)  # fmt: skip
        qax = axes[1][0]
        qax.step(qx, qy, where="pre", color="0.2", lw=1.0)
        qax.set_ylabel("max queue\n(cells)")
        qax.grid(alpha=0.3)
        qax.set_ylim(0, tops[1])
    axes[-1][0].set_xlabel("time since the run's first sample (s)")
    _legend_band(fig, handles, labels)
    return fig


def draw_marks_series(plt: Any, series: Mapping[str, Mapping[str, JobMarks]],
                      colours: Mapping[str, str]) -> Any:  # fmt: skip
    """Marks per iteration over time: a row per scheduler on one y scale, a line per job."""
    fig, axes = plt.subplots(len(series), 1, figsize=(8.0, 1.2 + 2.2 * len(series)),
                             sharey=True, squeeze=False)  # fmt: skip
    labelled: set[str] = set()
    for ax, (scheduler, jobs) in zip(axes[:, 0], series.items(), strict=True):
        origin = min((float(m.starts_s[0]) for m in jobs.values() if m.starts_s.size), default=0)
        for job, m in jobs.items():
            x, y = downsample(m.starts_s - origin, m.marks, MAX_SERIES_POINTS)
            ax.plot(x, y, color=colours.get(job, "0.3"), lw=1.0, marker=".", ms=3,
                    label=None if job in labelled else f"{job} ({m.model})")  # fmt: skip
            labelled.add(job)
        ax.set_title(scheduler, fontsize=9)
        ax.set_ylabel("CE marks per\niteration")
        ax.grid(alpha=0.3)
    axes[-1][0].set_xlabel("iteration start, since the scheduler's first (s)")
    handles = [h for ax in axes[:, 0] for h in ax.get_legend_handles_labels()[0]]
    labels = [lb for ax in axes[:, 0] for lb in ax.get_legend_handles_labels()[1]]
    axes[0][0].set_ylim(bottom=0)
    _legend_band(fig, handles, labels)
    return fig


def draw_marks_cdf(
    plt: Any, series: Mapping[str, Mapping[str, JobMarks]], colours: Mapping[str, str]
) -> Any:
    """CDF of marks per iteration: a panel per model, a line per scheduler in its colour of
    the other figures (all its jobs of that model pooled)."""
    models = sorted({m.model for jobs in series.values() for m in jobs.values()})
    cols = min(3, max(1, len(models)))
    rows = -(-max(1, len(models)) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols + 0.6, 2.8 * rows + 0.9),
                             squeeze=False)  # fmt: skip
    for i, model in enumerate(models):
        ax = axes[i // cols][i % cols]
        for scheduler, jobs in series.items():
            pooled = [m.marks for m in jobs.values() if m.model == model]
            if not pooled:
                continue
            x, y = cdf_points(np.concatenate(pooled))
            x, y = downsample(x, y, MAX_SERIES_POINTS)
            ax.step(x, y, where="post", color=colours[scheduler],
                    label=scheduler if i == 0 else None)  # fmt: skip
        ax.set_title(model, fontsize=9)
        ax.set_xlim(left=0)
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("CE marks per iteration")
        ax.set_ylabel("fraction of iterations")
        ax.grid(alpha=0.3)
    for j in range(len(models), rows * cols):
        axes[j // cols][j % cols].set_visible(False)
    handles, labels = axes[0][0].get_legend_handles_labels()
    _legend_band(fig, handles, labels)
    return fig


def _legend_band(fig: Any, handles: list[Any], labels: list[str]) -> None:
    """One legend in a band under the axes (four entries a row), where it hides no data."""
    ncol = min(4, max(1, len(labels)))
    rows = -(-max(1, len(labels)) // ncol)
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=8)
    band = (0.15 + 0.2 * rows) / fig.get_figheight()  # inches of legend over the height
    fig.tight_layout(rect=(0, band, 1, 1 - 0.3 / fig.get_figheight()))


