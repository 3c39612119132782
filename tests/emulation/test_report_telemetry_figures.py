"""The report's figures from the runs' 10 ms telemetry: files written as PNG and PDF, small
on a long run, one colour scale across schedulers, and a one-line note (no failure) for a
run folder without telemetry.csv."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest

from emulation.emulate.report import write_report
from emulation.emulate.report_figures import figures
from emulation.emulate.report_telemetry_figures import (
    ECN_CDF,
    ECN_SERIES,
    MAX_SERIES_POINTS,
    draw_marks_series,
    load_run,
    marks_by_job,
    save_telemetry_figures,
)
from emulation.emulate.results import SchedulerRun
from emulation.emulate.telemetry_series import job_starts
from tests.emulation.test_emulate_report import _run
from tests.emulation.test_report_legibility import _summary, problems

LINK = "tor1->agg1"  # the shared link of `_run`'s two jobs
GBPS = 0.05  # its scaled rate (50 Gbit/s at S = 0.001)
MAX_FILE = 2_000_000  # bytes: "no figure is more than a few MB"
PNG, PDF = b"\x89PNG\r\n\x1a\n", b"%PDF"


def _with_rates(run: SchedulerRun) -> SchedulerRun:
    return replace(run, link_gbps={LINK: GBPS, "tor2->agg2": GBPS})


def write_synthetic(run: SchedulerRun, folder: Path, interval: float = 0.01) -> int:
    """telemetry.csv and queues.csv with the issue's columns, from the run's own iteration
    starts: each job sends at 60% of the link in the first half of each iteration, a mark
    per sample where both send; other traffic on a second link. Returns the sample count."""
    folder.mkdir(parents=True, exist_ok=True)
    starts = job_starts(run.records)
    first = min(float(s.starts_s[0]) for s in starts.values())
    last = max(float(s.ends_s[-1]) for s in starts.values())
    full = interval * GBPS * 1e9 / 8
    n = int(round((last - first) / interval))
    with (folder / "telemetry.csv").open("w", newline="") as tel, \
            (folder / "queues.csv").open("w", newline="") as que:  # fmt: skip
        tw, qw = csv.writer(tel), csv.writer(que)
        tw.writerow(["time_s", "link", "job", "bytes", "packets", "ce_marks"])
        qw.writerow(["time_s", "link", "max_depth_cells"])
        for k in range(1, n + 1):
            t = round(first + k * interval, 6)
            middle = t - interval / 2
            up = []
            for job, s in starts.items():
                i = int(np.searchsorted(s.starts_s, middle, side="right")) - 1
                if i >= 0 and middle < s.starts_s[i] + (s.ends_s[i] - s.starts_s[i]) / 2:
                    up.append(job)
            for job in up:
                tw.writerow([t, LINK, job, int(0.6 * full), int(0.6 * full) // 1500,
                             1 if len(up) > 1 else 0])  # fmt: skip
            tw.writerow([t, "tor2->agg2", "other", 1500, 1, 0])
            qw.writerow([t, LINK, 20 * len(up)])
    return n


def _runs() -> list[SchedulerRun]:
    return [
        _with_rates(_run("themis", [300.0] * 12, [10] * 12, {LINK: 50})),
        _with_rates(_run("th+cassini", [250.0] * 12, [1] * 12, {LINK: 5})),
    ]


@pytest.mark.filterwarnings("error")  # a warning would print over a terminal's progress bar
def test_figures_for_every_shared_link_as_png_and_pdf(tmp_path: Path) -> None:
    runs = _runs()
    for run in runs:
        write_synthetic(run, tmp_path / "runs" / run.scheduler)
    drawn = save_telemetry_figures(runs, _summary(runs), tmp_path)
    assert drawn.notes == []
    names = {"util:themis:tor1->agg1", "util:th+cassini:tor1->agg1", ECN_SERIES, ECN_CDF}
    assert set(drawn.paths) == names | {f"vector_{n}" for n in names}
    assert drawn.paths["util:th+cassini:tor1->agg1"].name == "util_th_cassini_tor1__agg1.png"
    for name in names:
        assert drawn.paths[name].read_bytes()[:8] == PNG, name
        assert drawn.paths[f"vector_{name}"].read_bytes()[:4] == PDF, name
        assert drawn.paths[f"vector_{name}"].suffix == ".pdf"
        assert 5_000 < drawn.paths[name].stat().st_size < MAX_FILE, name


def test_utilisation_figure_stacks_the_jobs_over_a_few_iterations_with_the_queue_below(
    tmp_path: Path,
) -> None:
    run = _runs()[0]
    write_synthetic(run, tmp_path / "runs" / run.scheduler)
    loaded, notes = load_run(tmp_path, run.scheduler)
    assert notes == [] and loaded is not None
    assert loaded.interval_s == 0.01
    from emulation.emulate.report_telemetry_figures import draw_link, job_colours, link_view

    view = link_view("themis", LINK, GBPS, loaded, job_starts(run.records))
    fig = draw_link(plt, view, job_colours([run]), (1.3, 50.0))
    util, queue = fig.axes
    assert util.get_shared_x_axes().joined(util, queue)
    lo, hi = util.get_xlim()
    # four 300 ms iterations (+10 ms between them) of the slowest job
    assert hi - lo == pytest.approx(4 * 0.31, abs=0.011)
    # one filled band per job, in the job's colour; the stack tops at 1.2 where both send
    bands = [c for c in util.collections if c.get_label() in ("a", "b")]
    assert [c.get_label() for c in bands] == ["a", "b"]
    assert float(bands[1].get_paths()[0].vertices[:, 1].max()) == pytest.approx(1.2, abs=0.01)
    # a dashed line per iteration start of each job inside the window
    dashed = [ln for ln in util.get_lines() if ln.get_linestyle() == "--"]
    assert 6 <= len(dashed) <= 10
    assert max(float(np.max(ln.get_ydata())) for ln in queue.get_lines()) == 40  # both queued
    assert (util.get_ylim(), queue.get_ylim()) == ((0.0, 1.3), (0.0, 50.0))
    assert problems(fig) == []
    plt.close(fig)


def test_every_schedulers_link_figure_has_the_same_axes_limits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = _runs()
    write_synthetic(runs[0], tmp_path / "runs" / "themis")
    folder = tmp_path / "runs" / "th+cassini"
    write_synthetic(runs[1], folder)
    # th+cassini's queue half as deep: same axis, so the figures compare by eye
    rows = (folder / "queues.csv").read_text().splitlines()
    (folder / "queues.csv").write_text("\n".join(
        [rows[0]] + [r.rsplit(",", 1)[0] + f",{int(r.rsplit(',', 1)[1]) // 2}" for r in rows[1:]]
    ) + "\n")  # fmt: skip
    from emulation.emulate import report_telemetry_figures as figs

    limits = []
    real_draw = figs.draw_link

    def spy(plt_: Any, view: Any, colours: Any, tops: tuple[float, float]) -> Any:
        limits.append((view.scheduler, tops))
        return real_draw(plt_, view, colours, tops)

    monkeypatch.setattr(figs, "draw_link", spy)
    save_telemetry_figures(runs, _summary(runs), tmp_path)
    # both stack to 1.2 of the link; themis queues 40 cells deep, th+cassini 20
    assert [s for s, _ in limits] == ["themis", "th+cassini"]
    assert [t for _, t in limits] == [pytest.approx((1.26, 42.0))] * 2


def test_the_heatmaps_of_two_schedulers_share_one_colour_scale() -> None:
    runs = _runs()  # themis marks 50 per interval on the link, th+cassini 5
    drawn = figures(runs, _summary(runs))
    limits = {name: drawn[name].axes[0].images[0].get_clim() for name in drawn
              if name.startswith("links_")}  # fmt: skip
    assert limits == {"links_th_cassini": (0.0, 50.0), "links_themis": (0.0, 50.0)}
    for fig in drawn.values():
        plt.close(fig)


def test_a_run_folder_without_telemetry_gets_a_note_not_a_failure(tmp_path: Path) -> None:
    runs = _runs()
    write_synthetic(runs[0], tmp_path / "runs" / "themis")
    (tmp_path / "runs" / "themis" / "queues.csv").unlink()  # e.g. a target without depths
    (tmp_path / "runs" / "th+cassini").mkdir(parents=True)  # bmv2 run / older run: none
    drawn = save_telemetry_figures(runs, _summary(runs), tmp_path)
    assert len(drawn.notes) == 2
    assert all("\n" not in note for note in drawn.notes)
    assert drawn.notes[0].startswith("themis: no queues.csv")
    assert drawn.notes[1].startswith("th+cassini: no telemetry.csv")
    assert "util:themis:tor1->agg1" in drawn.paths
    assert not any("th_cassini" in name for name in drawn.paths)
    nothing = save_telemetry_figures(runs, _summary(runs), tmp_path / "old")
    assert nothing.paths == {} and len(nothing.notes) == 2


def test_a_telemetry_file_without_the_columns_is_a_note(tmp_path: Path) -> None:
    runs = _runs()[:1]
    folder = tmp_path / "runs" / "themis"
    folder.mkdir(parents=True)
    (folder / "telemetry.csv").write_text("time_s,port,bytes\n1.0,3,1500\n")
    drawn = save_telemetry_figures(runs, _summary(runs), tmp_path)
    assert drawn.paths == {}
    assert drawn.notes == ["themis: telemetry.csv unreadable (telemetry.csv: no column link, "
                           "job, packets, ce_marks (has ['time_s', 'port', 'bytes'])): "
                           "figures not drawn."]  # fmt: skip


def test_segments_of_one_run_are_read_together(tmp_path: Path) -> None:
    run = _runs()[0]
    write_synthetic(run, tmp_path / "runs" / "themis" / "segment-0")
    write_synthetic(run, tmp_path / "runs" / "themis" / "segment-1")
    loaded, _ = load_run(tmp_path, "themis")
    assert loaded is not None
    one, _ = load_run(tmp_path / "x", "themis")
    assert one is None
    rows = (tmp_path / "runs" / "themis" / "segment-0" / "telemetry.csv").read_text()
    assert len(loaded.telemetry) == 2 * (len(rows.splitlines()) - 1)


@pytest.mark.filterwarnings("error")
def test_a_long_run_stays_under_the_size_bound(tmp_path: Path) -> None:
    # 4,000 iterations of 310 ms: 20 minutes, 124,000 samples per link
    long_run = _with_rates(_run("themis", [300.0] * 4000, [3] * 4000, {LINK: 50}))
    samples = write_synthetic(long_run, tmp_path / "runs" / "themis")
    assert samples > 120_000
    drawn = save_telemetry_figures([long_run], _summary([long_run]), tmp_path)
    assert drawn.notes == []
    sizes = {name: p.stat().st_size for name, p in drawn.paths.items()}
    assert len(sizes) == 6
    assert max(sizes.values()) < MAX_FILE, sizes
    loaded, _ = load_run(tmp_path, "themis")
    assert loaded is not None
    series = {"themis": marks_by_job(loaded, job_starts(long_run.records))}
    # both jobs send together: 15 samples of each iteration's first half carry a mark each
    assert series["themis"]["a"].marks[1:-1].tolist() == [15.0] * 3998
    fig = draw_marks_series(plt, series, {"a": "C0", "b": "C1"})
    assert all(len(line.get_xdata()) <= MAX_SERIES_POINTS for line in fig.axes[0].get_lines())
    plt.close(fig)


def test_the_report_lists_the_figures_and_notes(tmp_path: Path) -> None:
    runs = _runs()
    write_synthetic(runs[0], tmp_path / "runs" / "themis")
    report = write_report(runs, {"trace": "four-jobs", "scale": 0.001}, tmp_path)
    summary: dict[str, Any] = json.loads((tmp_path / "summary.json").read_text())
    assert len(summary["figure_notes"]) == 1
    assert summary["figure_notes"][0].startswith("th+cassini: no telemetry.csv")
    md = (tmp_path / "report.md").read_text()
    assert "![Per-job utilisation and queue depth on tor1->agg1: themis]" in md
    assert "(util_themis_tor1__agg1.png)" in md
    assert "(ecn_iteration_cdf.png)" in md
    assert "- th+cassini: no telemetry.csv" in md
    for name in ("iteration_cdf", "links_themis", "util:themis:tor1->agg1"):
        assert report.paths[f"vector_{name}"].read_bytes()[:4] == PDF
    page = (tmp_path / "report.html").read_text()
    assert page.count("src='data:image/png;base64,") == 8 + 3


def test_marks_figures_stay_legible_with_many_jobs_and_models() -> None:
    from emulation.emulate.report_telemetry_figures import JobMarks, draw_marks_cdf

    rng = np.random.default_rng(0)
    models = ["vgg19", "vgg16", "resnet50", "wideresnet101", "bert"]
    series = {
        s: {f"job-{k}": JobMarks(models[k % 5], np.arange(40) * 0.3, rng.poisson(5, 40) * 1.0)
            for k in range(7)}
        for s in ("themis", "th+cassini", "pollux")
    }  # fmt: skip
    colours = {f"job-{k}": f"C{k}" for k in range(7)}
    for fig in (
        draw_marks_series(plt, series, colours),
        draw_marks_cdf(plt, series, {"themis": "C0", "th+cassini": "C1", "pollux": "C2"}),
    ):
        assert problems(fig) == []
        plt.close(fig)


def test_samples_on_another_clock_than_the_iterations_are_a_note(tmp_path: Path) -> None:
    runs = _runs()[:1]
    folder = tmp_path / "runs" / "themis"
    write_synthetic(runs[0], folder)
    rows = (folder / "telemetry.csv").read_text().splitlines()
    shifted = [rows[0]] + [",".join([f"{float(r.split(',')[0]) + 3600:.6f}", *r.split(",")[1:]])
                           for r in rows[1:]]  # fmt: skip
    (folder / "telemetry.csv").write_text("\n".join(shifted) + "\n")
    drawn = save_telemetry_figures(runs, _summary(runs), tmp_path)
    assert drawn.paths == {}
    assert drawn.notes == ["themis: no iteration starts within telemetry.csv's samples (not on "
                           "the clock of iterations.csv): figures not drawn."]  # fmt: skip


def test_the_report_prints_nothing_over_a_progress_bar(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # `cassini emulate` writes the report while its terminal bar is live: a note or a
    # warning printed then would tear the bar, so notes go into the report only
    runs = _runs()
    write_synthetic(runs[0], tmp_path / "runs" / "themis")  # th+cassini: none, a note
    capfd.readouterr()
    report = write_report(runs, {"trace": "four-jobs", "scale": 0.001}, tmp_path)
    assert report.summary["figure_notes"]
    assert capfd.readouterr() == ("", "")
