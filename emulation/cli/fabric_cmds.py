"""`cassini fabric up`: the whole testbed on this machine, programmed and ready to poke at.

One namespace per server (ping/iperf from `ip netns exec NS ...`), one
switch holding every logical switch (the software switch, or bmv2 with
`--target bmv2`), entries installed by the control plane; on request a pcap
per switch port (`--pcap`) and the switch's log (`--log-dir`). Runs until Ctrl-C or SIGTERM (then it tears down, says so and
exits 130 or 143, as during bring-up); `--check` pings every server pair
once and exits instead; `--cli` opens Mininet's CLI (`emulation.fabric.mininet_cli`:
Ctrl-C there interrupts the command at hand, and only Ctrl-C twice at the
prompt, `exit` or SIGTERM tear down). Either way a switch process that dies is reported (which pid,
which signal or exit code, its last log lines) and the command exits with
status 1 after tearing the fabric down, rather than staying "up" with
nothing forwarding.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from typing import TYPE_CHECKING

from topologies.errors import UserInputError

from . import fabric_run_cmds
from .common import (
    Interrupted,
    add_force_argument,
    add_scale_argument,
    add_settings_arguments,
    add_topology_argument,
    device_id,
    listen_address,
    settings_from_args,
)

if TYPE_CHECKING:
    from emulation.fabric.emulated import EmulatedFabric


def register(sub: argparse._SubParsersAction) -> None:
    """Add this area's subcommands."""
    fabric = sub.add_parser("fabric", help="emulate the whole fabric in network namespaces")
    fabric_sub = fabric.add_subparsers(dest="fabric_command", required=True, metavar="ACTION")
    up = fabric_sub.add_parser(
        "up",
        help="namespaces per server + one programmed software switch, until Ctrl-C",
        description="Bring the topology up: a namespace per server, the logical switches in "
        "one P4Runtime switch (the software switch, loopback cables inside it; or bmv2, "
        "cables as veth pairs), forwarding and WRED entries installed over P4Runtime. "
        "Rates and thresholds are scaled by --scale.",
    )
    add_topology_argument(up)
    add_scale_argument(up)
    up.add_argument("--device-id", type=device_id, default=1, help="P4Runtime device id (default 1)")
    up.add_argument(
        "--grpc-server-addr",
        default="127.0.0.1:0",
        type=listen_address,
        help="address of the switch's P4Runtime service (default 127.0.0.1:0: a free port, "
        "named in the banner, so two fabrics on one machine do not collide; e.g. "
        "127.0.0.1:9559 for a fixed one)",
    )
    up.add_argument(
        "--prefix",
        default=None,
        help="name prefix of namespaces and interfaces (default: cas + 4 random hex digits)",
    )
    up.add_argument("--target", default="softswitch", help="the chip: softswitch or bmv2")
    up.add_argument("--device-config", help="bmv2's compiled JSON (default: `make p4`'s)")
    up.add_argument("--pcap", default=None, metavar="DIR", help="a pcap per switch port in DIR")
    up.add_argument(
        "--log-dir", default=None, metavar="DIR", help="the switch's log in DIR (may be --pcap's)"
    )
    add_force_argument(up)
    up.add_argument("--no-pfc", action="store_true", help="turn PFC off in the switch")
    up.add_argument("--seed", type=int, default=0, help="seed of the WRED marking RNG")
    add_settings_arguments(up)
    up.add_argument(
        "--check", action="store_true", help="ping every server pair once, print a summary, exit"
    )
    up.add_argument(
        "--cli",
        action="store_true",
        help="open Mininet's CLI on the running fabric (`s01 ping -c1 s24`, `iperf s01 s24`, "
        "`dpctl dump-flows`); Ctrl-C interrupts a command, twice at the prompt or `exit` tears "
        "down",
    )
    up.add_argument("--json", action="store_true", help="machine-readable output")
    up.set_defaults(handler=_up)
    fabric_run_cmds.register(fabric_sub)  # `fabric run`


def _up(args: argparse.Namespace) -> int:
    from emulation.fabric.emulated import EmulatedFabric
    from emulation.fabric.options import FabricOptions
    from emulation.housekeeping.prefixes import check_prefix
    from emulation.housekeeping.signals import SignalExit, signals_raise
    from topologies.library import load_topology

    topo = load_topology(args.topology)
    settings = settings_from_args(args)
    scale = args.scale
    if not topo.servers:
        raise UserInputError(f"topology '{topo.name}' has no servers to emulate")
    if args.prefix is not None:
        check_prefix(args.prefix)
    options = FabricOptions(
        scale=scale,
        prefix=args.prefix,
        settings=settings,
        pfc=not args.no_pfc,
        device_id=args.device_id,
        grpc_address=args.grpc_server_addr,
        seed=args.seed,
        target=args.target,
        device_config=args.device_config,
        pcap_dir=args.pcap,
        log_dir=args.log_dir,
        force=args.force,
    )
    fabric = EmulatedFabric(topo, options)
    status = 0
    phase = "during bring-up"
    try:
        # SIGINT and SIGTERM raise, so the with-block tears the fabric down either way.
        with signals_raise(), fabric:
            phase = "after bring-up"
            _print_fabric(fabric, args.json)
            if args.check:
                status = _check(fabric, args.json)
                failure = fabric.switch_failure()
            elif args.cli:
                fabric.cli()
                failure = fabric.switch_failure()
            else:
                print("up; Ctrl-C to tear down", flush=True)
                failure = fabric.wait_for_failure(threading.Event())
            if failure is not None:
                print(f"cassini: error: fabric {fabric.prefix}: {failure}", file=sys.stderr)
                status = 1
    except SignalExit as stopped:
        raise Interrupted(
            stopped.signum,
            f"{stopped.signal_name} {phase}; fabric {fabric.prefix} down: namespaces, "
            "interfaces and switch removed",
        ) from None
    if not args.json:
        print(f"fabric {fabric.prefix} down: namespaces, interfaces and switch removed", flush=True)
    for problem in fabric.capture_problems:
        print(f"cassini: error: --pcap {args.pcap}: {problem}", file=sys.stderr)
        status = 1
    for problem in fabric.output_problems:  # a log cut short by a full disk, ...
        print(f"cassini: error: {problem}", file=sys.stderr)
        status = 1
    return status


def _print_fabric(fabric: EmulatedFabric, as_json: bool) -> None:
    summary = fabric.describe()
    if as_json:
        print(json.dumps(summary.as_dict()), flush=True)
        return
    times = summary.bring_up_s
    print(
        f"fabric {summary.prefix}: {summary.topology} on {summary.target}, "
        f"P4Runtime {summary.grpc} "
        f"(device {summary.device_id}), {summary.entries} table entries, up in "
        f"{times.get('total_s', 0):.1f} s (hosts {times.get('hosts_s', 0):.1f} s, "
        f"switch {times.get('switch_s', 0):.1f} s, program {times.get('program_s', 0):.1f} s)"
    )
    for line in (*summary.profile, *summary.notes):
        print(f"  {line}")
    if summary.switch_pid is not None:
        print(f"  switch process: pid {summary.switch_pid}")
    if summary.log_dir is not None:
        print(f"  switch log: {summary.log_dir}")
    if summary.pcaps:
        print(f"  pcap: {len(summary.pcaps)} ports in {summary.pcap_dir}")
    print(f"  {'server':<8} {'namespace':<16} {'ip':<12} {'mac':<18} {'port':>4}  tor")
    for h in summary.hosts:
        print(f"  {h.server:<8} {h.namespace:<16} {h.ip:<12} {h.mac:<18} {h.port:>4}  {h.tor}")
    first, last = summary.hosts[0], summary.hosts[-1]
    print(f"  e.g. ip netns exec {first.namespace} ping {last.ip}", flush=True)


def _check(fabric: EmulatedFabric, as_json: bool) -> int:
    check = fabric.check_reachability()
    if as_json:
        print(json.dumps({"check": check.as_dict()}), flush=True)
        return 0 if check.ok else 1
    rtt = check.rtt_summary()
    reachable = len(check.rtts_ms)
    print(f"check: {reachable}/{check.pairs} server pairs answered one ping", end="")
    if check.rtts_ms:
        print(
            f"; RTT min {rtt['min']:.3f} / median {rtt['median']:.3f} / max {rtt['max']:.3f} ms",
            end="",
        )
    print()
    for a, b in check.lost[:20]:
        print(f"  no answer: {a}->{b}")
    return 0 if check.ok else 1
