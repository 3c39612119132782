"""How do report.md and report.html read: the status, the tables, the plots, the settings?

Both render the same tables (`_tables`) from the summary, so they agree;
the HTML embeds the plots, so it is one file a browser opens anywhere.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .report_telemetry_figures import plot_items as telemetry_plot_items


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
            _fmt(_pct(s.get("overlap_shared_links")), 0),  # emulation.emulate.results.link_overlap
            {True: "yes", False: "NOT TRUSTWORTHY", None: "unknown"}[s["trustworthy"]],
        ]
        for name, s in sch.items()
    ]
    jobs = [
        [
            name,
            job,
            j["model"],
            _fmt(j["workers"]),
            *_grid_cells(s.get("schedule") or {}, job),
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
            _fmt(_pct(_share(s["fidelity"], "host_late_iterations", "host_iterations"))),
            _fmt(s["fidelity"].get("host_late_p99_ms"), 2),
            _fmt(_pct(_share(s["fidelity"], "slow_up_phases", "up_phases"))),
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
             "on shared links", "CE received (hosts)", "overlap on shared links %",
             "trustworthy"],
            main,
        ),
        ("Cassini speed-up (mean iteration time, base / variant)", ["variant", "base", "speed-up"],
         ups),
        (
            "Per job",
            ["scheduler", "job", "model", "workers", "shift ms", "grid ms", "mean ms", "p99 ms",
             "simulated mean ms", "CE received", "adjustments"],
            jobs,
        ),
        (
            "Fidelity (did the emulator keep up?)",
            ["scheduler", "p99 frame lateness ms", "late frames", "late loop wake-ups",
             "machine CPU %", "steal %", "switch CPU % of a core", "replicas woke late %",
             "p99 replica wake-up lateness ms", "slow unmarked Up phases %", "limits exceeded",
             "not measured"],
            fidelity,
        ),
    ]  # fmt: skip


def _grid_cells(schedule: Mapping[str, Any], job: str) -> list[str]:
    """A job's shift and the grid period its agent kept, from the schedule that ran:
    "free" where no agent paced it (every job of a scheduler without Cassini)."""
    shifts, periods = schedule.get("shifts_ms") or {}, schedule.get("periods_ms") or {}
    return [_fmt(shifts.get(job)), _fmt(periods[job]) if job in periods else "free"]


def _pct(value: Any) -> float | None:
    return None if value is None else 100.0 * float(value)


def _share(figures: Mapping[str, Any], part: str, whole: str) -> float | None:
    """figures[part] / figures[whole]; None when either is missing or the whole is 0.

    >>> _share({"a": 1, "b": 4}, "a", "b"), _share({"a": 1, "b": 0}, "a", "b")
    (0.25, None)
    """
    top, bottom = figures.get(part), figures.get(whole)
    return top / bottom if top is not None and bottom else None


def _settings_lines(summary: Mapping[str, Any]) -> list[str]:
    return [f"{k}: {json.dumps(v)}" for k, v in summary["settings"].items()]


def _status(summary: Mapping[str, Any]) -> str:
    bits = []
    failed = summary["settings"].get("failed")
    if failed:
        bits.append(f"FAILED: {failed}; what completed is below.")
    elif summary["partial"]:
        bits.append("PARTIAL: the run was interrupted or failed; what completed is below.")
    if summary["trustworthy"] is None:
        bits.append(
            "TRUSTWORTHINESS UNKNOWN: frame and packet-loop lateness were not measured on "
            "this target, and CPU samples alone cannot say the switch kept up."
        )
    elif not summary["trustworthy"]:
        bits.append(untrustworthy_status(summary["schedulers"]))
    if summary["settings"].get("target") == "bmv2":
        bits.append(BMV2_MARKS_NOTE)
    return " ".join(bits)


# bmv2 paces a queue in packets (emulation/README.md, "Queue rates on bmv2").
BMV2_MARKS_NOTE = (
    "ON BMV2, MARKS ARE NOT THE SOFTWARE SWITCH'S: bmv2 drains a queue in packets per "
    "second whatever their size, so a ring's ACKs cost its ports as much as data and a "
    "job alone is marked; compare marks and iteration times under contention on the "
    "software switch (emulation/README.md, 'Queue rates on bmv2')."
)


def untrustworthy_status(schedulers: Mapping[str, Mapping[str, Any]]) -> str:
    """The banner of a run that is not trustworthy: which witness passed its limit in
    which scheduler's run, and, when the switch's own witnesses (frame and packet-loop
    lateness) were measured and within their limits everywhere, that the switch kept up.

    >>> ok = {"trustworthy": True, "fidelity": {"failed_witnesses": [], "unmeasured": []}}
    >>> cpu = {"trustworthy": False, "fidelity": {"failed_witnesses": ["machine CPU"],
    ...                                           "unmeasured": []}}
    >>> status = untrustworthy_status({"themis": cpu, "th+cassini": ok})
    >>> status.split(";")[0]
    'NOT TRUSTWORTHY: limits exceeded by machine CPU in themis'
    >>> status.endswith("the switch kept up, the machine did not. See Fidelity.")
    True
    """
    from .fidelity import MAIN_WITNESSES

    by_witness: dict[str, list[str]] = {}
    for name, s in schedulers.items():
        if s["trustworthy"] is False:
            failed = s["fidelity"].get("failed_witnesses") or ["a fidelity limit"]
            for witness in failed:
                by_witness.setdefault(witness, []).append(name)
    named = "; ".join(f"{w} in {', '.join(runs)}" for w, runs in by_witness.items())
    text = f"NOT TRUSTWORTHY: limits exceeded by {named}"
    switch_failed = any(w in by_witness for w in MAIN_WITNESSES)
    switch_measured = all(
        not any(w in s["fidelity"].get("unmeasured", []) for w in MAIN_WITNESSES)
        for s in schedulers.values()
    )
    if not switch_failed and switch_measured and "a fidelity limit" not in by_witness:
        text += (
            "; frame and packet-loop lateness were within their limits in every run: "
            "the switch kept up, the machine did not"
        )
    return text + ". See Fidelity."


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
    return items + telemetry_plot_items(paths)


def markdown(summary: Mapping[str, Any], paths: Mapping[str, Path]) -> str:
    """report.md: the status, the tables, the plots (by file name), the settings."""
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
    notes = [f"- {note}" for note in summary.get("figure_notes", [])]
    lines += [*notes, ""] if notes else []
    lines += ["## Settings", "", "```", *_settings_lines(summary), "```", ""]
    return "\n".join(lines)


def html_page(summary: Mapping[str, Any], paths: Mapping[str, Path]) -> str:
    """report.html: what report.md says, with the plots embedded."""
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
    parts += [f"<p>{esc(note)}</p>" for note in summary.get("figure_notes", [])]
    parts.append("<h2>Settings</h2><pre>" + esc("\n".join(_settings_lines(summary))) + "</pre>")
    parts.append("</body></html>\n")
    return "".join(parts)


def trust_cell(s: Mapping[str, Any]) -> str:
    """The trustworthy column: yes, NO with the limits passed, or unknown with what was
    not measured."""
    if s["trustworthy"] is None:
        return "unknown: not measured: " + ", ".join(s["fidelity"]["unmeasured"])
    return "yes" if s["trustworthy"] else "NO: " + "; ".join(s["fidelity"]["reasons"])


def console_table(summary: Mapping[str, Any]) -> list[str]:
    """The lines `cassini emulate` prints: a row per scheduler, the speed-ups, PARTIAL."""
    lines = [
        f"{'scheduler':12s} {'mean ms':>8s} {'p99 ms':>8s} {'sim ms':>8s} {'ECN marks':>10s} "
        f"{'shared':>8s} {'host CE':>8s}  trustworthy"
    ]
    for name, s in summary["schedulers"].items():
        host = "-" if s["host_ce_marks"] is None else str(s["host_ce_marks"])
        mean = s["mean_iteration_ms"] or 0.0
        p99 = s["p99_iteration_ms"] or 0.0
        lines.append(
            f"{name:12s} {mean:8.1f} {p99:8.1f} {s['sim_mean_iteration_ms']:8.1f} "
            f"{s['ecn_marks']:10d} {s['ecn_marks_shared_links']:8d} {host:>8s}  "
            f"{trust_cell(s)}"
        )
    for variant, up in summary["speedups"].items():
        if up["mean"]:
            lines.append(f"{variant} vs {up['base']}: mean iteration time {up['mean']:.2f}x")
    if summary["partial"]:
        lines.append("PARTIAL: not every scheduler's run completed (see summary.json)")
    return lines
