"""`cassini bmv2 queues`: what bmv2 needs beyond P4Runtime (queues over simple_switch_CLI).

The handler calls `controlplane.bmv2`; the scale factor is the one `--scale`
every fabric command takes (same default, same range).
"""

from __future__ import annotations

import argparse

from .common import (
    add_scale_argument,
    add_settings_arguments,
    add_topology_argument,
    port_number,
    settings_from_args,
)


def register(sub: argparse._SubParsersAction) -> None:
    """Add `bmv2` and its actions."""
    bmv2 = sub.add_parser("bmv2", help="bmv2-only settings (simple_switch_CLI)")
    bmv2_sub = bmv2.add_subparsers(dest="bmv2_command", required=True, metavar="ACTION")
    queues = bmv2_sub.add_parser("queues", help="set queue depth and rate of every used port")
    add_topology_argument(queues)
    queues.add_argument("--thrift-port", type=port_number, default=9090)
    add_scale_argument(queues)
    queues.add_argument("--print", action="store_true", help="print the commands, send nothing")
    add_settings_arguments(queues)
    queues.set_defaults(handler=_queues)


def _queues(args: argparse.Namespace) -> int:
    from controlplane.bmv2 import queue_commands, run_cli
    from topologies.chip_mapping import map_to_chip
    from topologies.library import load_topology

    topo = load_topology(args.topology)
    commands = queue_commands(topo, map_to_chip(topo), settings_from_args(args), args.scale)
    if args.print:
        print("\n".join(commands))
        return 0
    run_cli(commands, args.thrift_port)
    print(
        f"set queue depth and rate of {len(commands) // 2} ports on thrift port {args.thrift_port}"
    )
    return 0
