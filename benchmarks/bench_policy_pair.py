"""Network policies on the interleavable pair: Cassini, Crux, EchelonFlow and MLTCP against Themis.

Run as root: `.venv/bin/python benchmarks/bench_policy_pair.py --runs 5 --out DIR`.

The pair is the shift cases' (`bench_shift_cases.shift_cases --model
wideresnet101`): two WideResNet101 jobs whose rings share exactly tor1->agg1.
Ways, all on one fabric brought up once (issue 30):

- `themis`: case (a), both paced on one grid with shift 0, TCP;
- `cassini`: case (b), Cassini's shift, TCP;
- `crux`, `echelon`: case (a)'s schedule with the policy's queue classes in the
  switch (`RunSettings.policy`, `emulation.jobs.policy_entries`), TCP, as
  `cassini emulate --policy crux|echelon` installs them;
- `mltcp`: `bench_mltcp_pair`'s `mltcp` way: RoCE, `--policy mltcp`, agents
  not pacing.

Runs are interleaved (run 1 of every way, then run 2, ...) so that a drift in
the machine's load hits every way alike. Per way, over the runs the fidelity
monitor trusts (`emulation.emulate.fidelity.verdict`, with the switch's
lateness read around each run as `cassini emulate` does): the mean of each
run's mean and p99 iteration time (both jobs' workers, iteration 0 left out as
`bench_shift_cases`), CE marks on the shared link (the switch's counter over
the whole run, per job-iteration, iteration 0 included) and the overlap on it
(`overlap_shared_links` of emulate's summary.json, `results.link_overlap_of`),
each with a 95% Student-t interval (`emulation.reproduce.stats`). Untrusted
runs, and runs that ended in an error, are listed with their reasons and
left out (`--include-untrusted` keeps them, said in the table); each run's
folder (`--out DIR/WAY-RUN`) holds `write_run`'s files and the verdict. For `mltcp`,
the iterations after which the jobs fell into turns (`mltcp_turns.turns_after`).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from bench_mltcp_pair import pair_ways, run_way  # beside this file
from bench_shift_cases import TOPOLOGY, WARMUP, figures, shift_cases
from mltcp_turns import TURNS_LIMIT, block_fractions, turns_after

from emulation.emulate.fidelity import Verdict, switch_lateness, verdict
from emulation.emulate.results import SAMPLE_INTERVAL_S, fidelity_figures, link_overlap_of
from emulation.emulate.runner import link_rates, read_lateness
from emulation.emulate.telemetry_series import job_starts
from emulation.fabric.emulated import EmulatedFabric
from emulation.fabric.options import FabricOptions
from emulation.fabric.scaling import DEFAULT_SCALE
from emulation.jobs.prediction import simulated_means
from emulation.jobs.run_result import RunResult
from emulation.jobs.run_settings import RunSettings
from emulation.reproduce.stats import Interval, interval
from topologies.errors import UserInputError
from topologies.library import load_topology
from topologies.model import Topology

WAYS = ("themis", "cassini", "crux", "echelon", "mltcp")
TURNS_BLOCK = 5  # iterations of the first job per overlap block, as mltcp_turns' default
TURNS_WAYS = ("mltcp",)  # ways whose turns are printed
VERDICT_FILE = "verdict.json"  # the monitor's verdict, in each run's folder


@dataclass(frozen=True)
class RunRow:
    """One run of one way, as measured."""

    way: str
    run: int
    mean_ms: float
    p99_ms: float
    marks_per_iteration: float  # shared-link marks per job-iteration
    overlap: float | None  # None: the link was never busy or no telemetry
    trusted: bool | None  # the monitor's verdict (None: unknown)
    reasons: tuple[str, ...] = ()
    turns_after: int | None = None  # iterations; None: never fell into turns
    error: str | None = None
    folder: str = ""


@dataclass(frozen=True)
class WayFigures:
    """One way's row of the table: figures over the runs kept."""

    way: str
    runs: int  # runs made
    trusted: int  # of them, trusted and without an error
    kept: int  # of them, in the figures
    mean_ms: Interval | None  # None: no run kept
    p99_ms: Interval | None
    marks_per_iteration: Interval | None
    overlap: Interval | None  # over the kept runs whose overlap was measured
    left_out: tuple[tuple[int, str], ...]  # (run, why)
    turns_after: tuple[int | None, ...]  # per kept run


def select_ways(text: str) -> tuple[str, ...]:
    """The ways named in a comma list, in `WAYS`' order; an unknown name is refused.

    >>> select_ways("mltcp,themis")
    ('themis', 'mltcp')
    """
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in WAYS]
    if unknown or not names:
        raise ValueError(f"--ways {text!r}: unknown {', '.join(unknown) or 'empty list'}; "
                         f"choose from {','.join(WAYS)}")  # fmt: skip
    return tuple(w for w in WAYS if w in names)


def why_left_out(row: RunRow) -> str | None:
    """Why a run is not trusted (an error, the monitor's reasons), or None when it is."""
    if row.error:
        return f"error: {row.error}"
    if row.trusted is None:
        return "verdict unknown: " + ("; ".join(row.reasons) or "main witnesses not measured")
    if not row.trusted:
        return "untrusted: " + "; ".join(row.reasons)
    return None


def _interval(values: Sequence[float | None]) -> Interval | None:
    kept = [v for v in values if v is not None]
    return interval(kept) if kept else None


def aggregate(rows: Sequence[RunRow], ways: Sequence[str], untrusted: bool = False
              ) -> list[WayFigures]:  # fmt: skip
    """Per way (in `ways`' order), the figures over its runs the monitor trusted
    (`untrusted`: over every run without an error)."""
    out = []
    for way in ways:
        mine = sorted((r for r in rows if r.way == way), key=lambda r: r.run)
        why = {r.run: why_left_out(r) for r in mine}
        kept = [r for r in mine if why[r.run] is None
                or (untrusted and not r.error)]  # fmt: skip
        out.append(WayFigures(
            way=way,
            runs=len(mine),
            trusted=sum(1 for r in mine if why[r.run] is None),
            kept=len(kept),
            mean_ms=_interval([r.mean_ms for r in kept]),
            p99_ms=_interval([r.p99_ms for r in kept]),
            marks_per_iteration=_interval([r.marks_per_iteration for r in kept]),
            overlap=_interval([r.overlap for r in kept]),
            left_out=tuple((r.run, w) for r in mine if (w := why[r.run]) is not None),
            turns_after=tuple(r.turns_after for r in kept),
        ))  # fmt: skip
    return out


def _cell(value: Interval | None, digits: int = 1, scale: float = 1.0) -> str:
    """'mean ± half-width (n)'; '-' when no run was kept."""
    if value is None:
        return "-"
    mean = f"{value.mean * scale:.{digits}f}"
    if value.low is None or value.high is None:
        return f"{mean} (n={value.n})"
    return f"{mean} ± {(value.high - value.low) / 2 * scale:.{digits}f} (n={value.n})"


def table(rows: Sequence[WayFigures], untrusted: bool = False) -> str:
    """The markdown table, one row per way."""
    kept = "runs kept (untrusted included)" if untrusted else "trusted runs"
    head = (f"| way | {kept} | mean ms | p99 ms | shared-link marks / iteration | "
            "overlap % |")  # fmt: skip
    lines = [head, "|" + "---|" * 6]
    for w in rows:
        lines.append(
            f"| {w.way} | {w.kept} / {w.runs} | {_cell(w.mean_ms)} | {_cell(w.p99_ms)} | "
            f"{_cell(w.marks_per_iteration)} | {_cell(w.overlap, 0, 100.0)} |"
        )
    return "\n".join(lines)


def notes(rows: Sequence[WayFigures], untrusted: bool = False) -> list[str]:
    """The runs not trusted (left out, or kept with `untrusted`), and the turns of the
    ways in `TURNS_WAYS`."""
    out = []
    for w in rows:
        for run, why in w.left_out:
            kept = untrusted and not why.startswith("error")
            out.append(f"  {w.way} run {run} {'kept though' if kept else 'left out'}: {why}")
    for w in rows:
        if w.way in TURNS_WAYS:
            turns = ", ".join("never" if t is None else f"after {t}" for t in w.turns_after)
            out.append(f"  {w.way}: in turns (overlap <= {TURNS_LIMIT:.0%} in every "
                       f"{TURNS_BLOCK}-iteration block from then on), per run: "
                       f"{turns or 'no run kept'}")  # fmt: skip
    return out


def way_plan(
    way: str, topo: Topology, model: str, stretch: float = 1.0
) -> tuple[dict[str, Any], str, str]:
    """(schedule, transport, policy) of one way; `stretch` scales the paced ways' period
    and shift (`bench_shift_cases --period-stretch`)."""
    if way == "mltcp":
        schedule = {name: s for name, s, _ in pair_ways(topo, model)}["mltcp"]
        return schedule, "roce", "mltcp"
    cases = shift_cases(topo, model, stretch)
    case = "b" if way == "cassini" else "a"
    policy = way if way in ("crux", "echelon") else "none"
    return cases[case], "tcp", policy


def run_row(way: str, run: int, result: RunResult, judged: Verdict, topo: Topology,
            shared: str, gbps: float, folder: Path) -> RunRow:  # fmt: skip
    """One run's row from its result (the figures `bench_shift_cases.figures` gives)."""
    jobs = result.jobs
    simulated = simulated_means(topo, jobs, result.settings.iterations)
    case = figures(way, result, jobs, shared, simulated)
    interval_s = result.telemetry_info.get("interval_s") or SAMPLE_INTERVAL_S
    pair = {shared: tuple(j.name for j in jobs)}
    found = link_overlap_of(result.telemetry, pair, {shared: gbps}, interval_s)
    rows = [r for r in result.telemetry if r.link == shared]
    starts = job_starts(result.records)
    first = starts[min(starts)].starts_s if starts else np.array([])
    turns = turns_after(block_fractions(rows, shared, gbps, first, TURNS_BLOCK), TURNS_BLOCK)
    return RunRow(
        way=way, run=run, mean_ms=case.mean_ms, p99_ms=case.p99_ms,
        marks_per_iteration=case.shared_link_marks / (case.iterations + WARMUP),
        overlap=found["overlap_shared_links"], trusted=judged.trustworthy,
        reasons=judged.reasons, turns_after=turns, error=result.error, folder=str(folder),
    )  # fmt: skip


def measure(fabric: EmulatedFabric, ways: Sequence[str], runs: int, iterations: int,
            model: str, out: Path, stretch: float = 1.0) -> list[RunRow]:  # fmt: skip
    """Every way `runs` times on the running fabric, interleaved; folders under `out`."""
    topo = fabric.topo
    shared = str(shift_cases(topo, model)["shared_link"])
    gbps = link_rates(topo, fabric.profile.scale)[shared]
    rows = []
    for run in range(1, runs + 1):
        for way in ways:
            schedule, transport, policy = way_plan(way, topo, model, stretch)
            settings = RunSettings(iterations=iterations, transport=transport, policy=policy)
            folder = out / f"{way}-{run}"
            before = read_lateness(fabric)
            result = run_way(fabric, way, schedule, settings, folder)
            if result.interrupted:
                raise KeyboardInterrupt
            lateness = switch_lateness(before, read_lateness(fabric))
            judged = verdict(fidelity_figures(result.fidelity, lateness))
            (folder / VERDICT_FILE).write_text(json.dumps(judged.as_dict(), indent=1) + "\n")
            rows.append(run_row(way, run, result, judged, topo, shared, gbps, folder))
            print(f"{folder}: {result.error or 'ok'} ({result.duration_s:.1f} s)",
                  file=sys.stderr, flush=True)  # fmt: skip
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ways", default=",".join(WAYS), help=f"subset of {','.join(WAYS)}")
    parser.add_argument("--model", default="wideresnet101", help="both jobs' model")
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--runs", type=int, default=1, help="runs of each way")
    parser.add_argument(
        "--period-stretch", type=float, default=1.0,
        help="the paced ways' period and shift x this (bench_shift_cases' option)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, help="keep every run's folder here (WAY-RUN)")
    parser.add_argument("--include-untrusted", action="store_true",
                        help="figures over every run without an error, trusted or not")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="also print the per-run rows")
    args = parser.parse_args()
    try:
        ways = select_ways(args.ways)
    except ValueError as e:
        parser.error(str(e))
    if args.runs < 1 or args.iterations < 2:
        parser.error("--runs must be >= 1 and --iterations >= 2")
    topo = load_topology(TOPOLOGY)
    try:
        shift_cases(topo, args.model)
    except UserInputError as e:
        parser.error(f"--model {args.model!r}: {e}")
    with tempfile.TemporaryDirectory() as scratch:
        out = args.out or Path(scratch)
        with EmulatedFabric(topo, FabricOptions(scale=DEFAULT_SCALE)) as fabric:
            rows = measure(
                fabric, ways, args.runs, args.iterations, args.model, out, args.period_stretch
            )
    summary = aggregate(rows, ways, args.include_untrusted)
    print(table(summary, args.include_untrusted))
    for line in notes(summary, args.include_untrusted):
        print(line)
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
