"""`cassini program`: install a topology's forwarding and WRED entries on a P4Runtime device.

The handler parses flags, connects, and calls `controlplane.program.program_topology`;
a device that cannot be reached is reported as one line naming the address.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from topologies.errors import UserInputError

from .common import (
    add_settings_arguments,
    add_tls_client_arguments,
    add_topology_argument,
    client_tls_from_args,
    connect_address,
    device_id,
    parse_election_id,
    settings_from_args,
    timeout_seconds,
)

if TYPE_CHECKING:
    from controlplane.entries import TableEntry

EXAMPLES_SHOWN = 3  # entries shown per kind of change; the rest are counted


def register(sub: argparse._SubParsersAction) -> None:
    """Add this area's subcommands."""
    prog = sub.add_parser(
        "program",
        help="install forwarding and WRED entries on a P4Runtime device",
        description="Push the Cassini pipeline if needed, then reconcile the device's "
        "entries with the topology (idempotent).",
    )
    add_topology_argument(prog)
    prog.add_argument(
        "--grpc",
        default="127.0.0.1:9559",
        type=connect_address,
        help="P4Runtime address HOST:PORT ([IPv6]:PORT)",
    )
    prog.add_argument("--device-id", type=device_id, default=1, help="P4Runtime device id (default 1)")
    prog.add_argument("--election-id", default="1", help="election id: LOW or HIGH,LOW (default 1)")
    prog.add_argument("--timeout", type=timeout_seconds, default=5.0, help="seconds to wait for the device")
    add_settings_arguments(prog)
    prog.add_argument(
        "--bmv2",
        action="store_true",
        help="the device is bmv2: convert WRED thresholds from cells to packets and push "
        "the compiled JSON (--device-config, default: where `make p4` writes it)",
    )
    prog.add_argument("--p4info", default=None, help="P4Info file (default: the package's own)")
    prog.add_argument(
        "--device-config",
        default=None,
        help="target binary config to push (bmv2 JSON, Tofino bin); a changed one is pushed again",
    )
    prog.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan, write nothing (reads without arbitration: the controller "
        "stays primary)",
    )
    prog.add_argument(
        "--force-thresholds",
        action="store_true",
        help="overwrite WRED thresholds the device already holds (refused otherwise, "
        "e.g. a fabric's scaled ones)",
    )
    prog.add_argument(
        "--clean",
        action="store_true",
        help="full reset: also delete the run-time entries (job classes, queue classes) "
        "a run installs; without it those tables are left alone",
    )
    prog.add_argument("--json", action="store_true", help="machine-readable output")
    add_tls_client_arguments(prog)
    prog.set_defaults(handler=_program)


def _program(args: argparse.Namespace) -> int:
    from controlplane.bmv2 import bmv2_device_config, bmv2_wred
    from controlplane.p4info import load_p4info
    from controlplane.program import (
        ProgramResult,
        ThresholdChangeRefused,
        describe_threshold_changes,
        program_topology,
        topology_entries,
    )
    from controlplane.reconcile import plan
    from controlplane.session import ConnectionFailed, NotPrimaryError, P4RuntimeSession, WriteError
    from emulation.fabric.table_dump import describe_entry
    from topologies.chip_mapping import map_to_chip
    from topologies.library import load_topology

    topo = load_topology(args.topology)
    chip = map_to_chip(topo)
    settings = settings_from_args(args)
    wred = bmv2_wred(settings) if args.bmv2 else settings.wred
    index = load_p4info(args.p4info)
    # Compiled before connecting: a P4Info without the pipeline's names fails here.
    desired = topology_entries(topo, chip, wred, index)
    device_config = b""
    if args.bmv2:
        device_config = bmv2_device_config(args.device_config)
    elif args.device_config:
        try:
            with open(args.device_config, "rb") as fh:
                device_config = fh.read()
        except OSError as err:
            raise UserInputError(
                f"cannot read --device-config {args.device_config}: {err.strerror}"
            ) from None
    election = parse_election_id(args.election_id)
    # A dry run reads without arbitration: it must not take primary from the live controller.
    arbitrate = None if args.dry_run else election
    tls = client_tls_from_args(args)

    connected = False
    try:
        with P4RuntimeSession.connect(
            args.grpc, args.device_id, arbitrate, timeout=args.timeout, p4info=index, tls=tls
        ) as session:
            connected = True
            if not args.dry_run and not session.is_primary:
                print(
                    f"cassini: error: device {args.device_id} at {args.grpc} has a primary controller "
                    f"with election id {session.primary_election_id}; this one ({election}) is backup",
                    file=sys.stderr,
                )
                return 1
            result = program_topology(
                session,
                topo,
                chip,
                wred,
                index,
                device_config,
                dry_run=args.dry_run,
                change_thresholds=args.force_thresholds,
                clean=args.clean,
            )
    except ConnectionFailed as err:
        if not args.dry_run or connected:  # reached, then failed: that error, not a plan
            print(f"cassini: error: {err}", file=sys.stderr)
            return 1
        result = ProgramResult(False, plan(desired, []), len(desired), 0)
    except ThresholdChangeRefused as err:
        print(f"cassini: error: {err}; pass --force-thresholds to change them", file=sys.stderr)
        return 1
    except (WriteError, NotPrimaryError) as err:
        print(f"cassini: error: {err}", file=sys.stderr)
        return 1
    thresholds = describe_threshold_changes(result.threshold_changes)

    counts = result.plan.counts_by_table()
    examples, more = shown_examples(
        {"+": result.plan.inserts, "~": result.plan.modifies, "-": result.plan.deletes}
    )
    if args.json:
        print(
            json.dumps(
                {
                    "device": {
                        "address": args.grpc,
                        "device_id": args.device_id,
                        "reached": connected,
                    },
                    "topology": topo.name,
                    "dry_run": args.dry_run,
                    "pipeline_pushed": result.pipeline_pushed and not args.dry_run,
                    "desired": result.desired_count,
                    "installed_before": result.installed_before,
                    "changes": counts,
                    "threshold_changes": thresholds or None,
                    "wred": {
                        "min": wred.min_cells,
                        "max": wred.max_cells,
                        "max_prob_percent": wred.max_prob_percent,
                        "unit": "packets" if args.bmv2 else "cells",
                    },
                    "examples": [f"{sign} {describe_entry(e, index)}" for sign, e in examples],
                    "examples_not_shown": sum(more.values()),
                },
                indent=1,
            )
        )
        return 0
    where = f"device {args.device_id} at {args.grpc}"
    verb = "would change" if args.dry_run else "changed"
    if args.dry_run and not connected:
        print(f"{where}: not reachable; plan against an empty device (dry run)")
    elif result.pipeline_pushed:
        print(f"{where}: {'would push' if args.dry_run else 'pushed'} the Cassini pipeline")
    print(
        f"topology {topo.name}: {result.desired_count} entries desired, "
        f"{result.installed_before} installed before"
    )
    if result.plan.is_empty():
        print("nothing to change: the device already holds the desired entries")
        return 0
    if thresholds:
        said = "would change (needs --force-thresholds)" if args.dry_run else "changed"
        print(f"installed WRED thresholds {said}: {thresholds}")
    unit = "packets" if args.bmv2 else "cells"
    print(f"WRED min={wred.min_cells} max={wred.max_cells} {unit} prob={wred.max_prob_percent}%")
    for table, c in sorted(counts.items()):
        print(
            f"  {table}: {verb} +{c['insert']} inserted, ~{c['modify']} modified, -{c['delete']} deleted"
        )
    for sign, entry in examples:
        print(f"  {sign} {describe_entry(entry, index)}")
    for sign, count in more.items():
        if count:
            print(f"  {sign} ... and {count:,} more")
    return 0


def shown_examples(
    changes: dict[str, Sequence[TableEntry]], shown: int = EXAMPLES_SHOWN
) -> tuple[list[tuple[str, TableEntry]], dict[str, int]]:
    """The first `shown` entries of each kind of change ('+', '~', '-'), and how many of
    each kind are left unshown, so a plan never reads as smaller than it is.

    >>> examples, more = shown_examples({"+": ["a", "b", "c", "d"], "-": ["x"]}, 2)
    >>> examples, more
    ([('+', 'a'), ('+', 'b'), ('-', 'x')], {'+': 2, '-': 0})
    """
    examples = [(sign, e) for sign, entries in changes.items() for e in entries[:shown]]
    more = {sign: max(0, len(entries) - shown) for sign, entries in changes.items()}
    return examples, more
