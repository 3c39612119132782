"""`cassini reproduce`: the paper's claims, each a scenario, in the simulator and the emulation.

Parses flags and calls `emulation.reproduce.run.reproduce`; prints each
scenario's verdicts and where the tables are.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .common import positive_int_up_to

if TYPE_CHECKING:
    from emulation.reproduce.grid import CellTask

MAX_SEEDS = 1000


def register(sub: argparse._SubParsersAction) -> None:
    """Add `reproduce`."""
    p = sub.add_parser(
        "reproduce",
        help="run the paper's claims as scenarios: paper | simulator | emulation | verdict",
        description="Each scenario states a claim of the Cassini paper, runs it over seeds in "
        "the fluid simulator and over runs on the emulated fabric, and writes "
        "reproduction.md/.html/.json with 95% intervals and verdicts. Cells already in --out "
        "are skipped.",
    )
    p.add_argument("names", nargs="*", metavar="NAME", help="scenarios, or 'all' (see --list)")
    p.add_argument("--list", action="store_true", help="list the scenarios and their claims")
    p.add_argument("--quick", action="store_true", help="a reduced version of each (minutes)")
    p.add_argument("--out", "-o", help="results folder (reused to resume)")
    p.add_argument(
        "--seeds", type=positive_int_up_to(MAX_SEEDS), help="simulator seeds per scenario"
    )
    p.add_argument("--runs", type=positive_int_up_to(MAX_SEEDS), help="emulation runs per scenario")
    p.add_argument(
        "--columns",
        default="simulator,emulation",
        help="simulator,emulation (default both; emulation needs root)",
    )
    p.add_argument(
        "--engine",
        default="local",
        help="local (a Dask LocalCluster, default) | dask (needs --address) | inline",
    )
    p.add_argument(
        "--address",
        help="a running Dask scheduler (tls://HOST:8786, TLS from Dask's distributed.comm.tls "
        "settings); emulation cells go to workers started with --resources fabric=1",
    )
    p.add_argument(
        "--workers", type=positive_int_up_to(1024), help="local cluster worker processes"
    )
    p.add_argument(
        "--retries",
        type=int,
        choices=range(0, 6),
        default=1,
        metavar="N",
        help="further attempts of a failed cell (0-5, default 1)",
    )
    p.add_argument("--json", action="store_true", help="print a machine-readable summary")
    p.set_defaults(handler=_reproduce)


def _reproduce(args: argparse.Namespace) -> int:
    from emulation.reproduce.run import ReproduceOptions, check_columns, reproduce
    from emulation.reproduce.scenarios import SCENARIOS, select
    from emulation.reproduce.tables import listing
    from scheduler.sweep import make_engine
    from scheduler.sweep.engine import plain_address_warning
    from topologies.errors import UserInputError
    from topologies.outputs import check_output

    if args.list:
        print(listing(SCENARIOS))
        return 0
    if args.address is not None and (warning := plain_address_warning(args.address, os.geteuid())):
        print(warning, file=sys.stderr)
    scenarios = select(args.names)
    if not args.out:
        raise UserInputError("--out: give a results folder")
    columns = check_columns(args.columns)
    emulating = "emulation" in columns and any(
        s.size(args.quick).emulation is not None for s in scenarios
    )
    if emulating and args.address is None and os.geteuid() != 0:
        raise UserInputError(
            "--columns: emulation cells need root on this machine; run as root, give "
            "--address of a cluster with fabric workers, or --columns simulator"
        )
    try:
        resuming = Path(args.out, "cells").is_dir()
    except OSError:
        resuming = False
    check_output(args.out, "folder", force=resuming or None)
    options = ReproduceOptions(
        quick=args.quick,
        seeds=args.seeds,
        runs=args.runs,
        columns=columns,
        retries=args.retries,
        emulation_here=args.address is None,
    )
    engine = make_engine(args.engine, args.address, args.workers)

    def shown(task: CellTask, error: BaseException | None) -> None:
        if args.json:
            return
        what = f"{task.scenario} {task.column} {task.index}"
        print(f"failed: {what}: {error}" if error else f"done: {what}", file=sys.stderr)

    try:
        result = reproduce([s.name for s in scenarios], options, args.out, engine, shown)
    finally:
        engine.close()
    for line in result.rejected:
        print(f"cassini: {line}", file=sys.stderr)
    if args.json:
        info = {
            "ran": result.ran,
            "skipped": result.skipped,
            "failed": len(result.failures),
            "verdicts": {
                r.scenario.name: {
                    "simulator": r.simulator.verdict,
                    "emulation": r.emulation.verdict,
                }
                for r in result.results
            },
            "outputs": {k: str(v) for k, v in result.paths.items()},
        }
        print(json.dumps(info))
    else:
        print(f"{'scenario':15s} {'simulator':16s} emulation")
        for r in result.results:
            print(f"{r.scenario.name:15s} {r.simulator.verdict:16s} {r.emulation.verdict}")
        print(
            f"cells: {result.ran} ran, {result.skipped} already done, {len(result.failures)} failed"
        )
        for path in result.paths.values():
            print(path)
    return 1 if result.failures else 0
