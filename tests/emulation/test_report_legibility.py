"""Can a reader read the report's figures? Checked on the drawn figures, with the renderer's
window extents: no two texts overlap, no text leaves the figure, no font under 7 pt, and no
legend hides more than a small part of the plotted bars and lines."""

from __future__ import annotations

from itertools import combinations
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pytest
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from emulation.emulate.report import speedups
from emulation.emulate.report_figures import figures
from emulation.emulate.results import SchedulerRun, summarise
from tests.emulation.test_emulate_report import _run

MIN_PT = 7.0
LEGEND_COVER = 0.05  # (our choice) of the plotted bars' area a legend may hide
OVERLAP_PX = 1.0  # extents touching by a pixel are not an overlap (antialiasing)


def _texts(fig: Any) -> list[Text]:
    """The texts drawn: a tick label only when its tick is in view (matplotlib keeps the
    others, unplaced)."""
    ticks, shown = set(), []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                ticks |= {id(tick.label1), id(tick.label2)}
                if low - 1e-9 <= tick.get_loc() <= high + 1e-9:
                    shown += [tick.label1, tick.label2]
    drawn = [t for t in fig.findobj(Text) if id(t) not in ticks] + shown
    return [t for t in drawn if t.get_visible() and t.get_text().strip()]


def _area(b: Bbox) -> float:
    return max(0.0, b.width) * max(0.0, b.height)


def _overlap(a: Bbox, b: Bbox) -> float:
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return w * h if w > OVERLAP_PX and h > OVERLAP_PX else 0.0


def problems(fig: Any) -> list[str]:
    """What a reader would find illegible in `fig`, as drawn."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    page = fig.bbox
    found = []
    texts = [(t, t.get_window_extent(renderer)) for t in _texts(fig)]
    for t, box in texts:
        if float(t.get_fontsize()) < MIN_PT:
            found.append(f"{t.get_text()!r}: {float(t.get_fontsize()):.1f} pt")
        if (
            box.x0 < page.x0 - 1
            or box.y0 < page.y0 - 1
            or box.x1 > page.x1 + 1
            or (box.y1 > page.y1 + 1)
        ):
            found.append(f"{t.get_text()!r}: outside the figure")
    for (a, ba), (b, bb) in combinations(texts, 2):
        if _overlap(ba, bb):
            found.append(f"{a.get_text()!r} overlaps {b.get_text()!r}")
    for legend in fig.findobj(Legend):
        lbox = legend.get_window_extent(renderer)
        for ax in fig.axes:
            bars = [p.get_window_extent(renderer) for p in ax.patches if isinstance(p, Rectangle)]
            covered = sum(_overlap(lbox, b) for b in bars)
            total = sum(_area(b) for b in bars)
            if total and covered / total > LEGEND_COVER:
                found.append(f"legend covers {covered / total:.0%} of the bars")
            for line in ax.get_lines():
                if not isinstance(line, Line2D) or str(line.get_label()).startswith("_"):
                    continue
                pts = ax.transData.transform(line.get_xydata())
                inside = sum(lbox.contains(x, y) for x, y in pts)
                if len(pts) > 2 and inside / len(pts) > LEGEND_COVER:
                    found.append(f"legend covers {inside / len(pts):.0%} of a line's points")
    return found


def _summary(runs: list[SchedulerRun]) -> dict[str, Any]:
    schedulers = {r.scheduler: summarise(r) for r in runs}
    settings = {"trace": "four-jobs", "topology": "cassini-testbed", "scale": 0.001, "seed": 0}
    return {"schedulers": schedulers, "speedups": speedups(schedulers), "settings": settings}


def _runs(links: dict[str, int]) -> list[SchedulerRun]:
    return [
        _run("themis", [300.0, 320.0, 310.0], [10, 20, 5], links),
        _run(
            "th+cassini", [250.0, 260.0, 255.0], [1, 0, 0], {k: v // 10 for k, v in links.items()}
        ),
    ]


@pytest.mark.parametrize(
    "links",
    [
        {"tor1->agg1": 50, "tor2->agg2": 3},
        # the testbed's worst case: every ToR-agg-core link in both directions, long names
        {
            f"pod{p}-tor{t}-uplink->pod{p}-aggregation{a}": 5 * t
            for p in range(2)
            for t in range(5)
            for a in range(4)
        },  # fmt: skip
    ],
    ids=["two-links", "forty-long-links"],
)
def test_every_report_figure_is_legible(links: dict[str, int]) -> None:
    runs = _runs(links)
    drawn = figures(runs, _summary(runs))
    assert {"iteration_cdf", "ecn_shared_links", "links_themis"} <= set(drawn)
    try:
        found = {name: problems(fig) for name, fig in drawn.items()}
    finally:
        for fig in drawn.values():
            plt.close(fig)
    assert {name: p for name, p in found.items() if p} == {}


def test_the_checker_finds_what_a_reader_would() -> None:
    """A deliberately broken figure: crowded long tick labels, a tiny font, a text off the
    page, a legend on the bars."""
    fig, ax = plt.subplots(figsize=(4, 3))
    names = [f"a-long-link-name-{i}->another-switch" for i in range(12)]
    ax.bar(range(12), [5] * 12, width=1.0, label="marks")
    ax.set_xticks(range(12), names)
    ax.text(0.5, 0.5, "tiny", fontsize=4, transform=ax.transAxes)
    fig.text(1.2, 0.5, "off the page")
    ax.legend(loc="center", fontsize=16)
    try:
        found = "\n".join(problems(fig))
    finally:
        plt.close(fig)
    assert "overlaps" in found
    assert "'tiny': 4.0 pt" in found
    assert "'off the page': outside the figure" in found
    assert "legend covers" in found


def test_measured_against_simulated_says_which_point_is_which_job() -> None:
    """Colour is the scheduler, the marker the job, and a legend names every job: with
    colours alone a reader cannot tell one job's point from another's."""
    runs = _runs({"tor1->agg1": 50})
    summary = _summary(runs)
    jobs = sorted({j for s in summary["schedulers"].values() for j in s["jobs"]})
    drawn = figures(runs, summary)
    try:
        fig = drawn["measured_vs_simulated"]
        legends = fig.axes[0].findobj(Legend)
        texts = {t.get_text() for legend in legends for t in legend.get_texts()}
        markers = {
            str(h.get_marker()) for legend in legends for h in legend.legend_handles
            if isinstance(h, Line2D)
        }  # fmt: skip
    finally:
        for f in drawn.values():
            plt.close(f)
    assert set(jobs) <= texts and set(summary["schedulers"]) <= texts
    assert len(markers) >= len(jobs)
