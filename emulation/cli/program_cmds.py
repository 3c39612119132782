"""`cassini program`, `cassini ecn watch`, `cassini tofino artifacts`, `cassini bmv2 queues`.

Each handler parses flags and calls controlplane functions; a device that
cannot be reached is reported as one line naming the address.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import TYPE_CHECKING, Any

from topologies.errors import UserInputError

from .common import (
    add_tls_client_arguments,
    add_topology_argument,
    client_tls_from_args,
    connect_address,
)

if TYPE_CHECKING:
    from controlplane.entries import TableEntry
    from controlplane.p4info import P4InfoIndex

EXAMPLES_SHOWN = 3


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
    prog.add_argument("--device-id", type=int, default=1, help="P4Runtime device id (default 1)")
    prog.add_argument("--election-id", default="1", help="election id: LOW or HIGH,LOW (default 1)")
    prog.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the device")
    _add_settings_flags(prog)
    prog.add_argument(
        "--bmv2",
        action="store_true",
        help="the device is bmv2: convert WRED thresholds from cells to packets",
    )
    prog.add_argument("--p4info", default=None, help="P4Info file (default: the package's own)")
    prog.add_argument(
        "--device-config", default=None, help="target binary config to push (bmv2 JSON, Tofino bin)"
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
    prog.add_argument("--json", action="store_true", help="machine-readable output")
    add_tls_client_arguments(prog)
    prog.set_defaults(handler=_program)

    ecn = sub.add_parser("ecn", help="ECN telemetry from a device's counters")
    ecn_sub = ecn.add_subparsers(dest="ecn_command", required=True, metavar="ACTION")
    watch = ecn_sub.add_parser("watch", help="poll per-port ECN marks, drops and traffic")
    watch.add_argument(
        "--grpc",
        default="127.0.0.1:9559",
        type=connect_address,
        help="P4Runtime address HOST:PORT ([IPv6]:PORT)",
    )
    watch.add_argument("--device-id", type=int, default=1)
    watch.add_argument(
        "--election-id",
        default=None,
        help="arbitrate with this election id (default: read-only, no arbitration)",
    )
    watch.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the device")
    watch.add_argument(
        "--interval", default="1s", help="poll interval, e.g. 1s, 500ms (default 1s)"
    )
    watch.add_argument("--duration", default=None, help="stop after this long, e.g. 30s")
    add_topology_argument(watch, default=None, purpose="name links")
    watch.add_argument("--out", default=None, help="record to FILE.csv or FILE.json")
    watch.add_argument("--json", action="store_true", help="one JSON object per interval")
    watch.add_argument(
        "--gnmi",
        default=None,
        type=connect_address,
        metavar="HOST:PORT",
        help="gNMI address of the interface counters (default: the --grpc address, "
        "as Stratum and the software switch serve both on one port)",
    )
    watch.add_argument(
        "--no-gnmi",
        action="store_true",
        help="the target serves no gNMI (bmv2): record the P4 counters only",
    )
    add_tls_client_arguments(watch)
    watch.set_defaults(handler=_ecn_watch)

    tofino = sub.add_parser("tofino", help="Tofino-only artifacts (Stratum, BfRt)")
    tofino_sub = tofino.add_subparsers(dest="tofino_command", required=True, metavar="ACTION")
    art = tofino_sub.add_parser(
        "artifacts", help="write the Stratum chassis config and the BfRt traffic-manager script"
    )
    add_topology_argument(art)
    art.add_argument("--out", "-o", required=True, help="output directory")
    _add_settings_flags(art)
    art.set_defaults(handler=_tofino_artifacts)

    bmv2 = sub.add_parser("bmv2", help="bmv2-only settings (simple_switch_CLI)")
    bmv2_sub = bmv2.add_subparsers(dest="bmv2_command", required=True, metavar="ACTION")
    queues = bmv2_sub.add_parser("queues", help="set queue depth and rate of every used port")
    add_topology_argument(queues)
    queues.add_argument("--thrift-port", type=int, default=9090)
    queues.add_argument("--rate-scale", type=float, default=1.0, help="emulation scale factor S")
    queues.add_argument("--print", action="store_true", help="print the commands, send nothing")
    _add_settings_flags(queues)
    queues.set_defaults(handler=_bmv2_queues)


def _add_settings_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--settings", default=None, help="thresholds file (.yaml/.json)")
    parser.add_argument(
        "--wred-min", type=int, default=None, help="WRED min threshold, cells (1000)"
    )
    parser.add_argument(
        "--wred-max", type=int, default=None, help="WRED max threshold, cells (2000)"
    )
    parser.add_argument(
        "--wred-prob", type=int, default=None, help="marking probability at max, percent"
    )


def parse_duration(text: str, flag: str) -> float:
    """Seconds of '1s', '500ms', '2m' or a bare number of seconds."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|m)?\s*", text)
    if not m:
        raise UserInputError(f"{flag}: '{text}' is not a duration (e.g. 1s, 500ms, 2m)")
    value = float(m.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}[m.group(2)]
    if value <= 0:
        raise UserInputError(f"{flag}: must be > 0, got '{text}'")
    return value


def parse_election_id(text: str) -> tuple[int, int]:
    """'5' -> (0, 5); '1,5' -> (1, 5)."""
    parts = text.split(",")
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise UserInputError(f"--election-id: '{text}' is not LOW or HIGH,LOW") from None
    if len(values) == 1:
        values = [0, values[0]]
    if len(values) != 2 or min(values) < 0 or values == [0, 0]:
        raise UserInputError(f"--election-id: '{text}' must be LOW or HIGH,LOW, not 0")
    return values[0], values[1]


def _settings(args: argparse.Namespace) -> Any:
    from controlplane.settings import load_settings

    return load_settings(args.settings).with_wred(args.wred_min, args.wred_max, args.wred_prob)


def describe_entry(entry: TableEntry, index: P4InfoIndex) -> str:
    """'logical_forward ingress_port=1 dst_mac=02:00:00:00:00:02 -> set_egress_port(port=25)'."""
    from controlplane.p4info import bytes_to_mac, encode_value

    table = index.table(entry.table)
    keys = []
    for field in table.match_fields:
        value = entry.match[field.name]
        shown = bytes_to_mac(encode_value(value, 48)) if field.bitwidth == 48 else str(value)
        keys.append(f"{field.name}={shown}")
    action = index.action(entry.action)
    params = ", ".join(f"{p.name}={entry.params[p.name]}" for p in action.params)
    return f"{table.alias} {' '.join(keys)} -> {action.alias}({params})"


def _program(args: argparse.Namespace) -> int:
    from controlplane.bmv2 import bmv2_wred
    from controlplane.compile import desired_entries
    from controlplane.p4info import load_p4info
    from controlplane.program import (
        ProgramResult,
        ThresholdChangeRefused,
        describe_threshold_changes,
        program_device,
    )
    from controlplane.reconcile import plan
    from controlplane.session import ConnectionFailed, NotPrimaryError, P4RuntimeSession, WriteError
    from topologies.chip_mapping import map_to_chip
    from topologies.library import load_topology

    topo = load_topology(args.topology)
    chip = map_to_chip(topo)
    settings = _settings(args)
    wred = bmv2_wred(settings) if args.bmv2 else settings.wred
    index = load_p4info(args.p4info)
    desired = [e.canonical(index) for e in desired_entries(topo, chip, wred)]
    device_config = b""
    if args.device_config:
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
            result = program_device(
                session,
                desired,
                index,
                device_config,
                dry_run=args.dry_run,
                change_thresholds=args.force_thresholds,
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
    examples = [("+", e) for e in result.plan.inserts[:EXAMPLES_SHOWN]]
    examples += [("~", e) for e in result.plan.modifies[:EXAMPLES_SHOWN]]
    examples += [("-", e) for e in result.plan.deletes[:EXAMPLES_SHOWN]]
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
    return 0


def _ecn_watch(args: argparse.Namespace) -> int:
    import contextlib

    from controlplane.gnmi import GnmiError, GnmiReader, GnmiUnsupported
    from controlplane.session import ConnectionFailed, P4RuntimeSession
    from controlplane.telemetry import Interval, Snapshot, TelemetryLog, snapshot, watch

    interval = parse_duration(args.interval, "--interval")
    duration = parse_duration(args.duration, "--duration") if args.duration else None
    chip = None
    if args.topology:
        from topologies.chip_mapping import map_to_chip
        from topologies.library import load_topology

        chip = map_to_chip(load_topology(args.topology))
    if args.out and not args.out.endswith((".csv", ".json")):
        raise UserInputError(f"--out {args.out}: use a .csv or .json file name")
    gnmi_address = args.gnmi or args.grpc
    tls = client_tls_from_args(args)
    reader = None if args.no_gnmi else GnmiReader(gnmi_address, args.timeout, tls)
    log = TelemetryLog()

    def record(done: Interval) -> None:
        log.add(done.ports, done.links)
        _print_interval(done, args.json)

    try:
        with P4RuntimeSession.connect(
            args.grpc,
            args.device_id,
            parse_election_id(args.election_id) if args.election_id else None,
            timeout=args.timeout,
            tls=tls,
        ) as session:

            def take() -> Snapshot:
                return snapshot(session, interfaces=reader.read if reader else None)

            with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C ends the watch, keeps the log
                watch(take, interval, record, duration, chip=chip)
    except ConnectionFailed as err:
        print(f"cassini: error: {err}", file=sys.stderr)
        return 1
    except GnmiUnsupported as err:
        print(f"cassini: error: {err}; pass --no-gnmi for targets without it", file=sys.stderr)
        return 1
    except GnmiError as err:
        print(f"cassini: error: {err}", file=sys.stderr)
        return 1
    finally:
        if reader is not None:
            reader.close()
        if args.out and (log.ports or log.links):
            for path in log.write(args.out):
                print(f"wrote {path}", file=sys.stderr)
    return 0


def _print_interval(done: Any, as_json: bool) -> None:
    """One interval as a line (ports that marked or lost frames below it) or one JSON object."""
    rows, links = done.ports, done.links
    if as_json:
        print(
            json.dumps(
                {
                    "t_s": round(done.time_s, 3),
                    "utc": done.utc,
                    "ports": {
                        r.port: {
                            "tx": r.tx_packets,
                            "ecn": r.ecn_marked_packets,
                            "drop": r.lost_packets,
                        }
                        for r in rows
                    },
                    "links": {
                        ln.link: {"ecn": ln.ecn_marked_packets, "gbps": round(ln.gbps, 4)}
                        for ln in links
                    },
                }
            ),
            flush=True,
        )
        return
    marked = [r for r in rows if r.ecn_marked_packets or r.lost_packets]
    total_tx = sum(r.tx_packets for r in rows)
    total_ecn = sum(r.ecn_marked_packets for r in rows)
    total_lost = sum(r.lost_packets for r in rows)
    print(
        f"t={done.time_s:7.2f}s  tx={total_tx} pkts  ecn_marked={total_ecn}  dropped={total_lost}  "
        f"ports_marking_or_dropping={len(marked)}",
        flush=True,
    )
    name = {ln.port: ln.link for ln in links}
    for r in marked:
        label = name.get(r.port, r.interface)
        print(
            f"    port {r.port:3d} {label:24s} ecn={r.ecn_marked_packets} drop={r.lost_packets} "
            f"tx={r.tx_packets}",
            flush=True,
        )


def _tofino_artifacts(args: argparse.Namespace) -> int:
    from controlplane.tofino import write_artifacts
    from topologies.chip_mapping import map_to_chip
    from topologies.library import load_topology

    topo = load_topology(args.topology)
    chip = map_to_chip(topo)
    for path in write_artifacts(topo, chip, _settings(args), args.out):
        print(f"wrote {path}")
    print("run the traffic-manager script on the switch with: bfshell -b cassini_tm.py")
    return 0


def _bmv2_queues(args: argparse.Namespace) -> int:
    from controlplane.bmv2 import queue_commands, run_cli
    from topologies.chip_mapping import map_to_chip
    from topologies.library import load_topology

    topo = load_topology(args.topology)
    commands = queue_commands(topo, map_to_chip(topo), _settings(args), args.rate_scale)
    if args.print:
        print("\n".join(commands))
        return 0
    run_cli(commands, args.thrift_port)
    print(
        f"set queue depth and rate of {len(commands) // 2} ports on thrift port {args.thrift_port}"
    )
    return 0
