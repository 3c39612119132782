"""Which files does a `cassini emulate` run leave, for a reader and for a paper?

DIR/summary.json      per scheduler: iteration times, switch and host ECN marks,
                      the simulator's prediction, the fidelity verdict, per job;
                      the settings and the Cassini speed-ups
DIR/iterations.csv    every worker's iteration record, with its scheduler
DIR/ecn.csv           the switch's per-port counter series (as `ecn watch`), per scheduler
DIR/ecn-links.csv     the per-logical-link series, per scheduler
DIR/*.png, *.pdf      iteration-time CDF, mean/p99 per model, Cassini speed-up, ECN marks per
                      iteration per model, marks on shared links, per-link marks and
                      utilisation over time, measured vs simulated per job; from the runs'
                      10 ms telemetry: per-job utilisation and queue depth on each shared
                      link, switch marks per iteration over time and as a CDF per model
DIR/report.md         the settings, the tables and the plots
DIR/report.html       the same, self-contained (images embedded), for a browser

Everything is computed from `results.SchedulerRun` through `results.summarise`,
so the tables, the JSON and the plots agree. This module writes the summary
and calls the writers of the rest: `report_csv`, `report_figures`, `report_text`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controlplane.telemetry import LinkDelta, PortDelta
from scheduler.baselines.registry import CASSINI_BASE
from scheduler.simulator.report import ORDER, _finite

from .fidelity import overall
from .plan import GIVEN
from .report_csv import write_iterations, write_series
from .report_figures import save_figures
from .report_telemetry_figures import save_telemetry_figures
from .report_text import html_page, markdown
from .results import SchedulerRun, summarise


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

    With a given schedule (`--schedule`), every scheduler runs on its placement: the
    base runs it without shifts, the variant with Cassini's, `given` with the file's.
    (our choice) A variant whose base did not run is measured against `given`: the
    same placement, Cassini's shifts against the file's, which is the comparison a
    user who wrote the shifts asks for. With both, the base wins, as without a file.

    >>> s = {"themis": {"mean_iteration_ms": 300.0, "jobs": {"a": {"mean_iteration_ms": 300.0}}},
    ...      "th+cassini": {"mean_iteration_ms": 250.0, "jobs": {"a": {"mean_iteration_ms": 240.0}}}}
    >>> speedups(s)
    {'th+cassini': {'base': 'themis', 'mean': 1.2, 'jobs': {'a': 1.25}}}
    >>> speedups({"given": s["themis"], "th+cassini": s["th+cassini"]})["th+cassini"]["base"]
    'given'
    """
    out: dict[str, dict[str, Any]] = {}
    for variant, own_base in CASSINI_BASE.items():
        base = own_base if own_base in schedulers else GIVEN
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
            "trustworthy": overall([s["trustworthy"] for s in schedulers.values()]),
            "settings": dict(settings),
        }
    )
    paths: dict[str, Path] = {"summary": out / "summary.json"}
    drawn = save_telemetry_figures(runs, summary, out)  # first: its notes go in the summary
    summary["figure_notes"] = drawn.notes
    paths["summary"].write_text(json.dumps(summary, indent=1) + "\n")
    paths["iterations"] = write_iterations(runs, out / "iterations.csv")
    paths["ecn"] = write_series(runs, out / "ecn.csv", PortDelta, "ports")
    paths["ecn_links"] = write_series(runs, out / "ecn-links.csv", LinkDelta, "links")
    paths.update(save_figures(runs, summary, out))
    paths.update(drawn.paths)
    paths["report_md"] = out / "report.md"
    paths["report_md"].write_text(markdown(summary, paths))
    paths["report_html"] = out / "report.html"
    paths["report_html"].write_text(html_page(summary, paths))
    return Report(summary, paths)
