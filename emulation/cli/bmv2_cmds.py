"""`cassini bmv2 queues`: what bmv2 needs beyond P4Runtime (queues over simple_switch_CLI).

The handler calls `controlplane.bmv2`; the scale factor is the one `--scale`
every fabric command takes (same default, same range). With `--tm-config`,
the file's `classes` give queue classes their own depth on every port
(`controlplane.queue_classes.bmv2_class_queue_commands`), for a bmv2 started
with `--priority-queues 8`.
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
    queues.add_argument(
        "--tm-config",
        metavar="FILE",
        help="TM settings file whose `classes` set per-class queue depths "
        "(bmv2 run with --priority-queues 8)",
    )
    add_settings_arguments(queues)
    queues.set_defaults(handler=_queues)


def _queues(args: argparse.Namespace) -> int:
    from controlplane.bmv2 import queue_commands, run_cli
    from controlplane.queue_classes import bmv2_class_queue_commands
    from emulation.softswitch.tm_config import load_tm_config
    from topologies.chip_mapping import map_to_chip
    from topologies.library import load_topology

    topo = load_topology(args.topology)
    chip = map_to_chip(topo)
    settings = settings_from_args(args)
    commands = queue_commands(topo, chip, settings, args.scale)
    port_lines = len(commands)
    if args.tm_config:
        classes = load_tm_config(args.tm_config).classes
        depths = {c: s.queue_cells for c, s in classes.items() if s.queue_cells is not None}
        commands += bmv2_class_queue_commands(
            chip.ports(), depths, settings.cell_bytes, settings.bmv2_packet_bytes
        )
    if args.print:
        print("\n".join(commands))
        return 0
    run_cli(commands, args.thrift_port)
    print(
        f"set queue depth and rate of {port_lines // 2} ports on thrift port {args.thrift_port}"
        + (f", and {len(commands) - port_lines} class queue depths" if args.tm_config else "")
    )
    return 0
