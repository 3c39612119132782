"""What does a reproduction leave for readers? reproduction.json, .md and .html from one data set.

Per claim a row: paper | simulator | emulation | verdict, each figure with
its 95% interval and number of runs; then the figures shown without a
verdict, the choices made where the paper is silent, and what no column
measures. The Markdown and the HTML are both built from `reproduction.json`'s
dictionary, so they cannot disagree with it.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .verdicts import NOT_RUN, fmt

FILES = ("reproduction.json", "reproduction.md", "reproduction.html")


def cell_text(fig: Mapping[str, Any] | None, unit: str = "") -> str:
    """'1.05x [1.01, 1.09] n=10', or '-' when the column has no such figure.

    >>> cell_text({"mean": 1.05, "low": 1.01, "high": 1.09, "n": 10}, "x")
    '1.05x [1.01, 1.09] n=10'
    """
    if not fig:
        return "-"
    text = fmt(fig["mean"], unit)
    if fig.get("low") is not None:
        text += f" [{fmt(fig['low'])}, {fmt(fig['high'])}]"
    return f"{text} n={fig['n']}"


def _unit(check: Mapping[str, Any]) -> str:
    u = check.get("unit", "")
    return "x" if u == "x" else (f" {u}" if u else "")


def _verdict_text(sim: Mapping[str, Any], emu: Mapping[str, Any]) -> str:
    parts = []
    for name, col in (("simulator", sim), ("emulation", emu)):
        if col["verdict"] != NOT_RUN:
            parts.append(f"{name}: {col['verdict']} ({col['reason']})")
    return "; ".join(parts) or NOT_RUN


def rows(scenario: Mapping[str, Any]) -> list[list[str]]:
    """The table of one scenario: a row per check, then a row per figure."""
    out = []
    sim, emu = scenario["simulator"], scenario["emulation"]
    for c in scenario["checks"]:
        unit = _unit(c)
        bound = {"near": "", "at_least": ">= ", "at_most": "<= "}[c["kind"]]
        tol = f" (±{c['tolerance']:.0%})" if c["tolerance"] else ""
        checks = (sim["checks"][c["metric"]], emu["checks"][c["metric"]])
        out.append([
            c["label"], f"{bound}{fmt(c['paper'], unit)}{tol}",
            cell_text(sim["figures"].get(c["metric"]), unit),
            cell_text(emu["figures"].get(c["metric"]), unit),
            _verdict_text(checks[0], checks[1]),
        ])  # fmt: skip
    for f in scenario["figures"]:
        if f["metric"] not in sim["figures"] and f["metric"] not in emu["figures"]:
            continue
        out.append([
            f["label"], "-", cell_text(sim["figures"].get(f["metric"])),
            cell_text(emu["figures"].get(f["metric"])), "(figure, no claim)",
        ])  # fmt: skip
    return out


HEADER = ["claim", "paper", "simulator", "emulation", "verdict"]


def _column_line(col: Mapping[str, Any]) -> str:
    where = f"{col['column']}: {col['verdict']}, {col['used']} of {col['planned']} "
    where += "cells (seeds x loads)" if col["column"] == "simulator" else "runs"
    if col["left_out"]:
        where += f", {col['left_out']} flagged by the fidelity monitor and left out"
    if col["unknown"]:
        where += f", {col['unknown']} the monitor could not judge"
    if col["failed"]:
        where += f", {col['failed']} failed"
    if col.get("transport"):
        where += f", transport {col['transport']}"
    if col.get("note"):
        where += f" ({col['note']})"
    return where


def markdown(doc: Mapping[str, Any]) -> str:
    s = doc["settings"]
    lines = [
        "# Reproduction of the Cassini paper's claims",
        "",
        f"Harness {s['harness']}, {'quick' if s['quick'] else 'full'} size, engine {s['engine']}. "
        "Figures: mean [95% t-interval] n=runs; ratios are base over Cassini (> 1: Cassini "
        "better). Verdict rules: emulation/reproduce/README.md.",
        "",
        "| scenario | simulator | emulation |",
        "|---|---|---|",
    ]
    for sc in doc["scenarios"]:
        lines.append(
            f"| {sc['name']} | {sc['simulator']['verdict']} | {sc['emulation']['verdict']} |"
        )
    for sc in doc["scenarios"]:
        lines += ["", f"## {sc['name']} ({sc['source']})", "", sc["claim"], ""]
        lines.append("| " + " | ".join(HEADER) + " |")
        lines.append("|" + "---|" * len(HEADER))
        for r in rows(sc):
            lines.append("| " + " | ".join(x.replace("|", "/") for x in r) + " |")
        lines += ["", f"- {_column_line(sc['simulator'])}", f"- {_column_line(sc['emulation'])}"]
        lines += [f"- {c}" for c in sc["choices"]]
        lines += [f"- not measured: {u}" for u in sc["unmeasured"]]
        for flag in sc["emulation"]["flags"]:
            lines.append(f"- left out: {flag}")
    if doc["failures"]:
        lines += ["", "## Failed cells (run again by the next invocation)", ""]
        lines += [f"- {f['cell']}: {f['error']}" for f in doc["failures"]]
    return "\n".join(lines) + "\n"


def html_page(doc: Mapping[str, Any]) -> str:
    e = html.escape
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        "<title>Reproduction of the Cassini paper's claims</title>",
        "<style>body{font-family:sans-serif;max-width:70em;margin:auto}"
        "table{border-collapse:collapse}td,th{border:1px solid #bbb;padding:3px 6px;"
        "vertical-align:top}</style></head><body>",
        "<h1>Reproduction of the Cassini paper's claims</h1>",
        f"<p>Harness {e(doc['settings']['harness'])}, "
        f"{'quick' if doc['settings']['quick'] else 'full'} size. Figures: mean [95% "
        "t-interval] n=runs; ratios are base over Cassini.</p>",
    ]
    for sc in doc["scenarios"]:
        parts.append(f"<h2>{e(sc['name'])} ({e(sc['source'])})</h2><p>{e(sc['claim'])}</p>")
        parts.append("<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in HEADER) + "</tr>")
        for r in rows(sc):
            parts.append("<tr>" + "".join(f"<td>{e(x)}</td>" for x in r) + "</tr>")
        parts.append("</table><ul>")
        items = [_column_line(sc["simulator"]), _column_line(sc["emulation"]), *sc["choices"]]
        items += [f"not measured: {u}" for u in sc["unmeasured"]]
        items += [f"left out: {f}" for f in sc["emulation"]["flags"]]
        parts += [f"<li>{e(i)}</li>" for i in items]
        parts.append("</ul>")
    if doc["failures"]:
        parts.append("<h2>Failed cells</h2><ul>")
        parts += [f"<li>{e(str(f['cell']))}: {e(f['error'])}</li>" for f in doc["failures"]]
        parts.append("</ul>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write(doc: Mapping[str, Any], out_dir: Path) -> dict[str, Path]:
    """The three files, written from `doc`."""
    from topologies.outputs import write_file

    texts = {
        "reproduction.json": json.dumps(doc, indent=1, sort_keys=True, default=str) + "\n",
        "reproduction.md": markdown(doc),
        "reproduction.html": html_page(doc),
    }
    return {name: write_file(out_dir / name, texts[name]) for name in FILES}


def listing(scenarios: Sequence[Any]) -> str:
    """`cassini reproduce --list`: name, source and claim of every scenario."""
    lines = []
    for s in scenarios:
        emu = "simulator + emulation" if s.full.emulation is not None else "simulator"
        lines.append(f"{s.name:15s} {s.source} [{emu}]")
        lines.append(f"{'':15s} {s.claim}")
    return "\n".join(lines)
