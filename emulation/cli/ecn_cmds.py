"""`cassini ecn watch`: per-port ECN marks, drops and traffic from a device's counters.

The handler parses flags and runs `controlplane.counter_watch.CounterWatch`; each
interval is printed as a line (or a JSON object) and recorded for `--out`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from topologies.errors import UserInputError
from topologies.outputs import check_output

from .common import (
    add_force_argument,
    add_tls_client_arguments,
    add_topology_argument,
    client_tls_from_args,
    connect_address,
    device_id,
    parse_duration,
    parse_election_id,
    timeout_seconds,
)


def register(sub: argparse._SubParsersAction) -> None:
    """Add this area's subcommands."""
    ecn = sub.add_parser("ecn", help="ECN telemetry from a device's counters")
    ecn_sub = ecn.add_subparsers(dest="ecn_command", required=True, metavar="ACTION")
    watch = ecn_sub.add_parser("watch", help="poll per-port ECN marks, drops and traffic")
    watch.add_argument(
        "--grpc",
        default="127.0.0.1:9559",
        type=connect_address,
        help="P4Runtime address HOST:PORT ([IPv6]:PORT)",
    )
    watch.add_argument("--device-id", type=device_id, default=1)
    watch.add_argument(
        "--election-id",
        default=None,
        help="arbitrate with this election id (default: read-only, no arbitration)",
    )
    watch.add_argument("--timeout", type=timeout_seconds, default=5.0, help="seconds to wait for the device")
    watch.add_argument(
        "--interval", default="1s", help="poll interval, e.g. 1s, 500ms (default 1s)"
    )
    watch.add_argument("--duration", default=None, help="stop after this long, e.g. 30s")
    add_topology_argument(watch, default=None, purpose="name links")
    watch.add_argument("--out", default=None, help="record to FILE.csv or FILE.json")
    add_force_argument(watch)
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


def _ecn_watch(args: argparse.Namespace) -> int:
    from controlplane.counter_watch import CounterSource, CounterWatch
    from controlplane.gnmi import GnmiError, GnmiUnsupported
    from controlplane.session import ConnectionFailed
    from controlplane.telemetry import Interval, TelemetryLog, TelemetryWriter

    interval = parse_duration(args.interval, "--interval")
    duration = parse_duration(args.duration, "--duration") if args.duration else None
    chip = None
    if args.topology:
        from topologies.chip_mapping import map_to_chip
        from topologies.library import load_topology

        chip = map_to_chip(load_topology(args.topology))
    if args.out and not args.out.endswith((".csv", ".json")):
        raise UserInputError(f"--out {args.out}: use a .csv or .json file name")
    if args.out:  # refused before watching, not after: the output rule of every writer
        for path in TelemetryLog.paths(args.out):
            check_output(path, "file", args.force)
    source = CounterSource(
        args.grpc,
        args.device_id,
        gnmi=None if args.no_gnmi else args.gnmi or args.grpc,
        election_id=parse_election_id(args.election_id) if args.election_id else None,
        timeout_s=args.timeout,
        tls=client_tls_from_args(args),
    )
    writer = None
    if args.out:  # written as it goes: a stopped or failed watch keeps what it recorded
        try:
            writer = TelemetryWriter(args.out)
        except OSError as err:
            raise UserInputError(f"--out {args.out}: cannot write: {err.strerror}") from None

    def on_interval(done: Interval) -> None:
        _print_interval(done, args.json)
        if writer is not None:
            writer.add(done)

    watcher = CounterWatch(source, interval, chip, on_interval)
    code = 0
    disk_failed = False
    try:
        watcher.run(duration)
    except ConnectionFailed as err:
        code = _fail(str(err))
    except GnmiUnsupported as err:
        code = _fail(f"{err}; pass --no-gnmi for targets without it")
    except GnmiError as err:
        code = _fail(str(err))
    except OSError as err:  # the recording's disk (full, gone): stop, keep what was written
        disk_failed = True
        intervals = writer.intervals if writer is not None else 0
        code = _fail(
            f"--out {args.out}: recording stopped after {intervals} intervals: "
            f"{err.strerror or err}"
        )
    finally:
        if writer is not None and not writer.intervals:
            writer.discard()  # nothing recorded: no file
        elif writer is not None:
            try:
                written = writer.close()
            except OSError as err:
                if not disk_failed:  # said once, in the line above
                    code = _fail(f"--out {args.out}: not written whole: {err.strerror or err}")
            else:
                for path in written:
                    print(f"wrote {path}", file=sys.stderr)
    return code


def _fail(message: str) -> int:
    print(f"cassini: error: {message}", file=sys.stderr)
    return 1


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
