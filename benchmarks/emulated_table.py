"""Emulated runs over seeds or repeats: iteration times, ECN marks, JCT and makespan with intervals.

Each DIR is one `cassini emulate --out DIR` (one seed or one run); the table
reads its summary.json and iterations.csv and prints, per row, the mean over
the DIRs with a 95% Student-t half-width and the number of runs behind it,
then each row's ratios against `themis` and `th+cassini`, paired by DIR.

    .venv/bin/python benchmarks/emulated_table.py runs/seed1 runs/seed2 runs/seed3 --markdown

Rows: the scheduler, with the network policy when it is not `none`
(`themis+crux`, from the scheduler's `network_policy` in summary.json, else
the run's `--policy`), and the transport when it is not TCP (`themis (roce)`).
`--label-by policy` writes the policy always (`themis+none`), for tables that
set policies against each other.

Columns (each from one DIR's run of the row, then the mean over DIRs):
- mean and p99 iteration ms, ECN marks on every link and on the shared links,
  overlap on the shared links: summary.json's figures, as the report states them;
- JCT s: the mean over the row's jobs of (the job's last iteration end minus its
  arrival), from iterations.csv on the run's clock. (our choice) The run records
  no clock origin, so a job's arrival on that clock is the run's first iteration
  start plus its `arrival_s` past the earliest arrival of the trace
  (summary.json's settings.jobs, already compressed as the fabric ran it); a job
  the settings do not list, or one whose first start comes before that, arrives
  at its own first start. With every arrival at 0 (the fixed traces) a job's JCT
  is its last end minus the run's first start.
- makespan s: the last iteration end of any job minus the first start of any,
  the same records (every worker, every iteration, iteration 0 included);
- trusted: the runs the fidelity monitor trusted, of all the row's runs.

(our choice) Trust is judged per scheduler of a DIR (each is its own run on the
fabric): a run the monitor did not trust is counted, listed with its reasons
and left out of every figure and ratio (`--include-untrusted` keeps it), as
`cassini reproduce` does; a run it could not judge is kept.

Ratios: base / variant for times and marks (above 1: the variant is better),
per DIR holding both, of one transport, then mean ± half-width and n. (our choice) When no DIR
holds both (each policy run in its own DIR), the k-th run of the variant is
paired with the k-th of the base in command-line order, and the row says so.
A pair whose variant value is 0 (no marks) has no ratio and is left out; n says
how many pairs remain.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emulation.reproduce.stats import mean_half_width  # the project's one t-table
from scheduler.simulator.report import ORDER  # the paper's order of schedulers

BASES = ("themis", "th+cassini")
# key in a Run's figures, column title, digits
FIGURES = (
    ("mean_ms", "mean iter ms", 1),
    ("p99_ms", "p99 iter ms", 1),
    ("ecn", "ECN marks", 0),
    ("ecn_shared", "ECN shared", 0),
    ("overlap", "overlap shared", 3),
    ("jct_s", "JCT s", 2),
    ("makespan_s", "makespan s", 2),
)
RATIOS = ("mean_ms", "p99_ms", "ecn", "ecn_shared", "jct_s", "makespan_s")
NAME = "emulated_table"


class BadInput(Exception):
    """A DIR or one of its files that is not a `cassini emulate` output: one line."""


@dataclass(frozen=True)
class Run:
    """One scheduler's run in one DIR: its row, figures and the monitor's verdict."""

    folder: str
    index: int  # the DIR's place on the command line
    row: str
    scheduler: str
    policy: str
    transport: str
    trusted: bool | None
    reasons: tuple[str, ...]
    figures: Mapping[str, float | None] = field(default_factory=dict)


def row_label(scheduler: str, policy: str, transport: str | None, always_policy: bool) -> str:
    """The row a run belongs to.

    >>> row_label("themis", "crux", "tcp", False), row_label("themis", "none", "roce", False)
    ('themis+crux', 'themis (roce)')
    >>> row_label("th+cassini", "none", None, True)
    'th+cassini+none'
    """
    label = scheduler if policy == "none" and not always_policy else f"{scheduler}+{policy}"
    return label if transport in (None, "", "tcp") else f"{label} ({transport})"


def jct_and_makespan(
    records: Sequence[tuple[str, float, float]], arrivals_s: Mapping[str, float]
) -> tuple[float | None, float | None]:
    """Mean JCT and makespan in seconds from (job, start_ms, end_ms) records
    (the module docstring's definitions); None without records.

    >>> recs = [("a", 1000.0, 1200.0), ("a", 1200.0, 1500.0), ("b", 1600.0, 1900.0)]
    >>> jct_and_makespan(recs, {"a": 0.0, "b": 0.5})
    (0.45, 0.9)
    """
    if not records:
        return None, None
    first = min(r[1] for r in records)
    last = max(r[2] for r in records)
    spans: dict[str, tuple[float, float]] = {}
    for job, start, end in records:
        lo, hi = spans.get(job, (start, end))
        spans[job] = (min(lo, start), max(hi, end))
    known = [arrivals_s[j] for j in spans if j in arrivals_s]
    origin = min(known) if known else 0.0
    jcts = []
    for job, (start, end) in spans.items():
        arrival = first + 1000.0 * (arrivals_s[job] - origin) if job in arrivals_s else start
        jcts.append((end - min(arrival, start)) / 1000.0)
    return sum(jcts) / len(jcts), (last - first) / 1000.0


def read_summary(folder: Path) -> dict[str, Any]:
    path = folder / "summary.json"
    if not folder.is_dir():
        raise BadInput(f"{folder}: no such folder")
    if not path.is_file():
        raise BadInput(f"{path}: missing (is {folder} a cassini emulate --out folder?)")
    try:
        summary = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BadInput(f"{path}: not JSON ({e})") from None
    if not isinstance(summary, dict) or not isinstance(summary.get("schedulers"), dict):
        raise BadInput(f"{path}: no 'schedulers' object (not a cassini emulate summary)")
    return summary


def read_records(folder: Path) -> dict[str, list[tuple[str, float, float]]]:
    """iterations.csv's (job, start_ms, end_ms) per scheduler."""
    path = folder / "iterations.csv"
    if not path.is_file():
        raise BadInput(f"{path}: missing (is {folder} a cassini emulate --out folder?)")
    out: dict[str, list[tuple[str, float, float]]] = {}
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        wanted = {"scheduler", "job", "start_ms", "end_ms"}
        if not wanted <= set(reader.fieldnames or ()):
            raise BadInput(f"{path}: expected columns {', '.join(sorted(wanted))}")
        for row in reader:
            try:
                rec = (row["job"], float(row["start_ms"]), float(row["end_ms"]))
            except (TypeError, ValueError):
                raise BadInput(f"{path}: line {reader.line_num}: bad start_ms/end_ms") from None
            out.setdefault(row["scheduler"], []).append(rec)
    return out


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def load_runs(folder: Path, index: int, always_policy: bool) -> list[Run]:
    """Every scheduler's run in one DIR."""
    summary = read_summary(folder)
    records = read_records(folder)
    settings = summary.get("settings") or {}
    transport = settings.get("transport")
    arrivals = {
        str(j["name"]): float(j["arrival_s"])
        for j in settings.get("jobs") or []
        if isinstance(j, dict) and "name" in j and _number(j.get("arrival_s")) is not None
    }
    runs = []
    for name, s in summary["schedulers"].items():
        if not isinstance(s, dict):
            raise BadInput(f"{folder / 'summary.json'}: schedulers.{name} is not an object")
        policy = str(
            (s.get("network_policy") or {}).get("policy") or settings.get("policy") or "none"
        )
        fidelity = s.get("fidelity") or {}
        jct, makespan = jct_and_makespan(records.get(name, []), arrivals)
        figures = {
            "mean_ms": _number(s.get("mean_iteration_ms")),
            "p99_ms": _number(s.get("p99_iteration_ms")),
            "ecn": _number(s.get("ecn_marks")),
            "ecn_shared": _number(s.get("ecn_marks_shared_links")),
            "overlap": _number(s.get("overlap_shared_links")),
            "jct_s": jct,
            "makespan_s": makespan,
        }
        runs.append(
            Run(str(folder), index, row_label(name, policy, transport, always_policy), name,
                policy, str(transport or "tcp"), s.get("trustworthy"), tuple(fidelity.get("reasons") or ()), figures)
        )  # fmt: skip
    return runs


def row_order(rows: Sequence[str], runs: Sequence[Run]) -> list[str]:
    """The paper's scheduler order (scheduler.simulator.report.ORDER), then by name."""
    rank = {name: i for i, name in enumerate(ORDER)}
    sched = {r.row: r.scheduler for r in runs}
    return sorted(rows, key=lambda row: (rank.get(sched[row], len(rank)), row))


def cell(values: Sequence[float], digits: int) -> str:
    """The cell "mean ± half (n)"; "mean (1)" with one value; "-" with none."""
    if not values:
        return "-"
    mean, half = mean_half_width(values)
    if math.isnan(half):
        return f"{mean:.{digits}f} (1)"
    return f"{mean:.{digits}f} ± {half:.{digits}f} ({len(values)})"


def base_rows(rows: Sequence[str], runs: Sequence[Run]) -> list[str]:
    """The rows of themis and th+cassini without a network policy."""
    found = {r.row: BASES.index(r.scheduler) for r in runs
             if r.scheduler in BASES and r.policy == "none"}  # fmt: skip
    return sorted((row for row in rows if row in found), key=lambda row: found[row])


def pairs(variant: Sequence[Run], base: Sequence[Run]) -> tuple[list[tuple[Run, Run]], bool]:
    """(variant, base) pairs by DIR; by command-line order when no DIR holds both."""
    by_dir = {r.index: r for r in base}
    same = [(v, by_dir[v.index]) for v in variant if v.index in by_dir]
    if same:
        return same, False
    order = sorted(variant, key=lambda r: r.index), sorted(base, key=lambda r: r.index)
    return list(zip(*order, strict=False)), True


def ratios(matched: Sequence[tuple[Run, Run]], key: str) -> list[float]:
    """base / variant per pair; a pair missing either value, or with a zero variant, has none."""
    out = []
    for v, b in matched:
        num, den = b.figures.get(key), v.figures.get(key)
        if num is not None and den is not None and den != 0:
            out.append(num / den)
    return out


def render(head: Sequence[str], body: Sequence[Sequence[str]], markdown: bool) -> list[str]:
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return lines + ["| " + " | ".join(r) + " |" for r in body]
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=False)]
    fmt: Callable[[Sequence[str]], str] = lambda r: "  ".join(  # noqa: E731
        x.ljust(w) if i == 0 else x.rjust(w) for i, (x, w) in enumerate(zip(r, widths, strict=True))
    ).rstrip()
    return [fmt(head), *(fmt(r) for r in body)]


def table(runs: Sequence[Run], include_untrusted: bool, markdown: bool) -> list[str]:
    """Every line the script prints."""
    kept = [r for r in runs if include_untrusted or r.trusted is not False]
    rows = row_order(list(dict.fromkeys(r.row for r in runs)), runs)
    shown = [
        f
        for f in FIGURES
        if f[0] != "overlap" or any(r.figures["overlap"] is not None for r in runs)
    ]
    head = ["row", *(label for _, label, _ in shown), "trusted"]
    body = []
    for row in rows:
        mine = [r for r in kept if r.row == row]
        cells = [cell([v for r in mine if (v := r.figures[k]) is not None], d) for k, _, d in shown]
        total = [r for r in runs if r.row == row]
        body.append([row, *cells, f"{sum(r.trusted is True for r in total)}/{len(total)}"])
    lines = [f"runs: {len(runs)} from {len({r.folder for r in runs})} folders; "
             "mean ± 95% t half-width (n)", "", *render(head, body, markdown)]  # fmt: skip
    bases = base_rows(rows, kept)
    if bases:
        head = ["row vs base", *(lab for k, lab, _ in FIGURES if k in RATIOS)]
        body = []
        for base in bases:
            transport = next(r.transport for r in kept if r.row == base)
            same = {r.row for r in kept if r.transport == transport}
            for row in [r for r in rows if r != base and r in same]:
                matched, by_order = pairs(
                    [r for r in kept if r.row == row], [r for r in kept if r.row == base]
                )
                if not matched:
                    continue
                name = f"{row} vs {base}" + (" (paired by order)" if by_order else "")
                body.append([name, *(cell(ratios(matched, k), 3) for k in RATIOS)])
        lines += ["", "base / variant per DIR (above 1: the variant is better)", ""]
        lines += render(head, body, markdown) if body else ["no run of another row to pair with"]
    left = [r for r in runs if r.trusted is False]
    if left:
        what = "kept in the figures" if include_untrusted else "left out of the figures"
        lines += ["", f"not trusted by the fidelity monitor ({len(left)}, {what}):"]
        lines += [
            f"- {r.folder} {r.row}: {'; '.join(r.reasons) or 'no reason given'}" for r in left
        ]
    unjudged = [r for r in runs if r.trusted is None]
    if unjudged:
        lines += ["", f"not judged by the monitor ({len(unjudged)}, kept):"]
        lines += [f"- {r.folder} {r.row}" for r in unjudged]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    ap.add_argument("folders", nargs="+", type=Path, help="cassini emulate --out folders")
    ap.add_argument("--label-by", choices=("scheduler", "policy"), default="scheduler",
                    help="policy: name the network policy in every row, none included")  # fmt: skip
    ap.add_argument("--markdown", action="store_true", help="markdown tables")
    ap.add_argument("--include-untrusted", action="store_true",
                    help="keep runs the fidelity monitor did not trust in the figures")  # fmt: skip
    args = ap.parse_args(argv)
    try:
        runs = [r for i, f in enumerate(args.folders)
                for r in load_runs(f, i, args.label_by == "policy")]  # fmt: skip
    except (BadInput, OSError) as e:
        print(f"{NAME}: {e}", file=sys.stderr)
        return 1
    if not runs:
        print(f"{NAME}: no scheduler ran in {', '.join(map(str, args.folders))}", file=sys.stderr)
        return 1
    print("\n".join(table(runs, args.include_untrusted, args.markdown)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
