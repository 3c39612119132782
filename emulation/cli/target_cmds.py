"""`cassini tofino artifacts` and `cassini bmv2 queues`: what each target needs beyond P4Runtime.

The handlers call `controlplane.tofino` and `controlplane.bmv2`.
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
    """Add this area's subcommands."""
    tofino = sub.add_parser("tofino", help="Tofino-only artifacts (Stratum, BfRt)")
    tofino_sub = tofino.add_subparsers(dest="tofino_command", required=True, metavar="ACTION")
    art = tofino_sub.add_parser(
        "artifacts", help="write the Stratum chassis config and the BfRt traffic-manager script"
    )
    add_topology_argument(art)
    art.add_argument("--out", "-o", required=True, help="output directory")
    add_force_argument(art)
    add_settings_arguments(art)
    art.set_defaults(handler=_tofino_artifacts)

    bmv2 = sub.add_parser("bmv2", help="bmv2-only settings (simple_switch_CLI)")
    bmv2_sub = bmv2.add_subparsers(dest="bmv2_command", required=True, metavar="ACTION")
    queues = bmv2_sub.add_parser("queues", help="set queue depth and rate of every used port")
    add_topology_argument(queues)
    queues.add_argument("--thrift-port", type=int, default=9090)
    queues.add_argument("--rate-scale", type=float, default=1.0, help="emulation scale factor S")
    queues.add_argument("--print", action="store_true", help="print the commands, send nothing")
    add_settings_arguments(queues)
    queues.set_defaults(handler=_bmv2_queues)


def _tofino_artifacts(args: argparse.Namespace) -> int:
    from controlplane.tofino import write_artifacts
    from topologies.chip_mapping import map_to_chip
    from topologies.library import load_topology

    topo = load_topology(args.topology)
    chip = map_to_chip(topo)
    for path in write_artifacts(topo, chip, settings_from_args(args), args.out, force=args.force):
        print(f"wrote {path}")
    print("run the traffic-manager script on the switch with: bfshell -b cassini_tm.py")
    return 0


def _bmv2_queues(args: argparse.Namespace) -> int:
    from controlplane.bmv2 import queue_commands, run_cli
    from topologies.chip_mapping import map_to_chip
    from topologies.library import load_topology

    topo = load_topology(args.topology)
    commands = queue_commands(topo, map_to_chip(topo), settings_from_args(args), args.rate_scale)
    if args.print:
        print("\n".join(commands))
        return 0
    run_cli(commands, args.thrift_port)
    print(
        f"set queue depth and rate of {len(commands) // 2} ports on thrift port {args.thrift_port}"
    )
    return 0
