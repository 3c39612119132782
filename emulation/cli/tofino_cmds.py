"""`cassini tofino artifacts`: what a Tofino needs beyond P4Runtime (Stratum, BfRt).

The handler calls `controlplane.tofino`.
"""

from __future__ import annotations

import argparse

from .common import (
    add_force_argument,
    add_settings_arguments,
    add_topology_argument,
    settings_from_args,
)


def register(sub: argparse._SubParsersAction) -> None:
    """Add `tofino` and its actions."""
    tofino = sub.add_parser("tofino", help="Tofino-only artifacts (Stratum, BfRt)")
    tofino_sub = tofino.add_subparsers(dest="tofino_command", required=True, metavar="ACTION")
    art = tofino_sub.add_parser(
        "artifacts", help="write the Stratum chassis config and the BfRt traffic-manager script"
    )
    add_topology_argument(art)
    art.add_argument("--out", "-o", required=True, help="output directory")
    add_force_argument(art)
    add_settings_arguments(art)
    art.set_defaults(handler=_artifacts)


def _artifacts(args: argparse.Namespace) -> int:
    from controlplane.tofino import write_artifacts
    from topologies.chip_mapping import map_to_chip
    from topologies.library import load_topology

    topo = load_topology(args.topology)
    chip = map_to_chip(topo)
    for path in write_artifacts(topo, chip, settings_from_args(args), args.out, force=args.force):
        print(f"wrote {path}")
    print("run the traffic-manager script on the switch with: bfshell -b cassini_tm.py")
    return 0
