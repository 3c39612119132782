"""`cassini sweep`: many simulations over a grid, on a local or remote Dask cluster."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .address_flags import listen_address
from .common import positive_int, positive_int_up_to


def register(sub: argparse._SubParsersAction) -> None:
    """Add `sweep`."""
    p = sub.add_parser(
        "sweep",
        help="simulate a grid of traces, loads, seeds, topologies and schedulers (resumable)",
        description="Run every cell of a sweep file (YAML) once; cells already in --out are skipped.",
    )
    p.add_argument("--config", "-c", required=True, help="sweep file (YAML, see the README)")
    p.add_argument("--out", "-o", required=True, help="results folder (reused to resume)")
    p.add_argument(
        "--engine",
        default="local",
        help="local (a Dask LocalCluster of processes, default) | dask (needs --address) | "
        "inline (this process, for debugging)",
    )
    p.add_argument(
        "--address",
        help="a running Dask scheduler, e.g. tls://10.0.0.5:8786 (TLS from Dask's "
        "distributed.comm.tls settings; see the README)",
    )
    p.add_argument(
        "--workers",
        type=positive_int_up_to(1024),
        help="worker processes of the local cluster (default: one per core)",
    )
    p.add_argument(
        "--max-cells",
        type=positive_int,
        default=None,
        help="refuse a grid of more cells than this (default 10000)",
    )
    p.add_argument(
        "--dashboard",
        type=listen_address,
        default=None,
        metavar="HOST:PORT",
        help="where the local cluster's Dask dashboard listens (default 127.0.0.1:8787, "
        "loopback only; 0.0.0.0:8787 to reach it from other machines)",
    )
    p.add_argument("--json", action="store_true", help="print a machine-readable summary")
    p.set_defaults(handler=_sweep)


def _sweep(args: argparse.Namespace) -> int:
    from scheduler.sweep import load_sweep_config, make_engine, run_sweep
    from scheduler.sweep.engine import plain_address_warning
    from scheduler.sweep.progress import QuietProgress, RichProgress
    from topologies.outputs import check_output

    if args.address is not None and (warning := plain_address_warning(args.address, os.geteuid())):
        print(warning, file=sys.stderr)
    # The output rule, with resuming: a sweep's own folder (cells/) is reused.
    try:
        resuming = Path(args.out, "cells").is_dir()
    except OSError:  # a name too long: check_output says so in one line
        resuming = False
    check_output(args.out, "folder", force=resuming or None)
    config = (
        load_sweep_config(args.config)
        if args.max_cells is None
        else load_sweep_config(args.config, args.max_cells)
    )
    if args.dashboard is None:
        engine = make_engine(args.engine, args.address, args.workers)
    else:
        engine = make_engine(args.engine, args.address, args.workers, args.dashboard)
    events = RichProgress() if sys.stderr.isatty() and not args.json else QuietProgress()
    try:
        result = run_sweep(config, args.out, engine, events)
    finally:
        engine.close()
    for line in result.rejected:
        print(f"cassini: {line}", file=sys.stderr)
    outputs = {k: str(v) for k, v in result.paths.items() if v.exists()}
    info = {
        "cells": result.total,
        "skipped": result.skipped,
        "ran": result.ran,
        "failed": len(result.failures),
        "outputs": outputs,
    }
    if args.json:
        print(json.dumps(info))
    else:
        print(
            f"{result.total} cells: {result.skipped} already done, {result.ran} ran, "
            f"{len(result.failures)} failed"
        )
        for name, path in outputs.items():
            print(f"{name}: {path}")
    return 1 if result.failures else 0
