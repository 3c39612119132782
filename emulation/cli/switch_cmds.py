"""`cassini switch serve` (the software P4Runtime target) and `cassini clean`.

`switch serve` takes simple_switch_grpc's flags (`--device-id`, `-i
PORT@IFACE`, `--grpc-server-addr`) so scripts written for bmv2 carry over.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from topologies.errors import UserInputError

from .common import (
    add_tls_server_arguments,
    device_id,
    listen_address,
    nonnegative_int,
    server_tls_from_args,
)


def register(sub: argparse._SubParsersAction) -> None:
    """Add this area's subcommands."""
    switch = sub.add_parser("switch", help="run the software P4Runtime switch")
    switch_sub = switch.add_subparsers(dest="switch_command", required=True, metavar="COMMAND")
    serve = switch_sub.add_parser(
        "serve",
        help="forward frames between interfaces under P4Runtime control",
        description="Software P4Runtime target: flags follow simple_switch_grpc, "
        "`[options] [JSON] [-- target options]`; bmv2 options that do not apply here "
        "(--thrift-port, --no-p4, --log-console, the JSON, --cpu-port) are accepted and "
        "named in one log line.",
    )
    serve.add_argument("--device-id", type=device_id, default=1, help="P4Runtime device id (default 1)")
    serve.add_argument(
        "-i",
        "--interface",
        action="append",
        default=[],
        metavar="PORT@IFACE",
        help="attach a switch port to an interface, e.g. -i 1@veth1 (repeatable)",
    )
    serve.add_argument(
        "--grpc-server-addr",
        default=None,
        type=listen_address,
        help="address the P4Runtime gRPC service listens on, HOST:PORT or [IPv6]:PORT "
        f"(default {DEFAULT_GRPC_ADDRESS}; port 0 = any; also a target option after --)",
    )
    serve.add_argument(
        "--tm-config",
        metavar="FILE",
        help="traffic-manager settings (YAML or JSON; format and defaults in the shipped "
        "emulation/softswitch/data/tm-example.yaml; default: those defaults)",
    )
    serve.add_argument(
        "--topology",
        "-t",
        metavar="TOPOLOGY",
        help="name the ports for controllers (gNMI) after this topology's chip map, e.g. "
        "tor1-eth1 (a built-in name, a generator or a file; default: port<N>)",
    )
    serve.add_argument("--seed", type=int, default=0, help="seed of the WRED marking RNG")
    serve.add_argument(
        "--loop-cpu",
        type=nonnegative_int,
        metavar="CPU",
        help="pin the packet loop to this CPU (the fabric does, with two or more; default: not)",
    )
    serve.add_argument(
        "--log-level",
        "-L",
        default="info",
        choices=sorted(LOG_LEVELS),
        help="log verbosity (default info; bmv2's trace, warn and off too)",
    )
    bmv2 = serve.add_argument_group("simple_switch_grpc compatibility (accepted, not used)")
    bmv2.add_argument("--thrift-port", type=int, help="no Thrift server here: ignored")
    bmv2.add_argument(
        "--no-p4", action="store_true", help="always so: the pipeline comes over P4Runtime"
    )
    bmv2.add_argument("--log-console", action="store_true", help="logs always go to stderr")
    bmv2.add_argument(
        "json_config",
        nargs="?",
        metavar="JSON",
        help="bmv2 JSON: ignored, P4Runtime pushes the pipeline",
    )
    bmv2.add_argument(
        "target_options",
        nargs="*",
        metavar="-- TARGET_OPTIONS",
        help="after --: --grpc-server-addr HOST:PORT, --cpu-port N (no CPU port here: ignored)",
    )
    add_tls_server_arguments(serve)
    serve.set_defaults(handler=_serve)

    clean = sub.add_parser(
        "clean",
        help="remove what runs whose owner process is gone left behind",
        description="Every run records what it creates (namespaces, interfaces, processes, "
        "temporary folders) and its owner process in a run file under /run/cassini "
        "(root; else $TMPDIR/cassini-UID, or $CASSINI_RUN_DIR). Without --all only runs "
        "whose owner is gone are removed: concurrent runs are left alone.",
    )
    clean.add_argument(
        "--prefix",
        action="append",
        metavar="PREFIX",
        help="only runs under this name prefix, e.g. cas3fa1 (repeatable; must start with "
        "cas or cst; default: all of the project's runs)",
    )
    clean.add_argument(
        "--all",
        action="store_true",
        help="also runs whose owner is alive, and items under the prefixes no run recorded",
    )
    clean.add_argument(
        "--dry-run", action="store_true", help="list runs, owners and items; remove nothing"
    )
    clean.set_defaults(handler=_clean)


DEFAULT_GRPC_ADDRESS = "127.0.0.1:9559"
# bmv2's log levels and ours, as logging levels.
LOG_LEVELS = {
    "trace": logging.DEBUG,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "off": logging.CRITICAL,
}


def bmv2_compatible(args: argparse.Namespace) -> tuple[str, list[str]]:
    """The address to listen on, and what of simple_switch_grpc's syntax is ignored.

    Target options (after `--`) are read here: `--grpc-server-addr` counts,
    `--cpu-port` and any other are ignored (named in the returned list).
    """
    target = argparse.ArgumentParser(prog="switch serve --", add_help=False)
    target.add_argument("--grpc-server-addr", type=listen_address)
    target.add_argument("--cpu-port", type=int)
    target.add_argument("json_config", nargs="?")
    rest = [args.json_config] if args.json_config else []
    try:
        options, unknown = target.parse_known_args(rest + list(args.target_options))
    except SystemExit:
        raise UserInputError(
            f"target options {' '.join(args.target_options)!r}: see above"
        ) from None
    address = options.grpc_server_addr or args.grpc_server_addr or DEFAULT_GRPC_ADDRESS
    if options.grpc_server_addr and args.grpc_server_addr not in (None, options.grpc_server_addr):
        raise UserInputError(
            f"--grpc-server-addr {args.grpc_server_addr} and, after --, "
            f"{options.grpc_server_addr}: give one"
        )
    ignored = []
    if options.json_config:
        ignored.append(f"JSON {options.json_config} (the pipeline comes over P4Runtime)")
    if args.no_p4:
        ignored.append("--no-p4 (the switch always starts without a pipeline)")
    if args.thrift_port is not None:
        ignored.append(f"--thrift-port {args.thrift_port} (no Thrift server; see --tm-config)")
    if args.log_console:
        ignored.append("--log-console (logs go to stderr)")
    if options.cpu_port is not None:
        ignored.append(f"--cpu-port {options.cpu_port} (the Cassini pipeline has no CPU port)")
    if unknown:
        ignored.append(f"target options {' '.join(unknown)}")
    return address, ignored


def _serve(args: argparse.Namespace) -> int:
    from emulation.softswitch.attachments import parse_interfaces, port_names_of
    from emulation.softswitch.switch import serve_until_stopped
    from emulation.softswitch.tm_config import TmConfig, load_tm_config

    level = LOG_LEVELS[args.log_level]
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    address, ignored = bmv2_compatible(args)
    if ignored:
        logging.getLogger("emulation.switch").warning(
            "ignored (simple_switch_grpc options that do not apply): %s", "; ".join(ignored)
        )
    ports = parse_interfaces(args.interface)
    tm = load_tm_config(args.tm_config) if args.tm_config else TmConfig()
    if not ports and not tm.loopback_cables:
        raise UserInputError("no ports: attach at least one with -i PORT@IFACE")
    cabled = set(ports) | set(tm.cable_peers())
    names = port_names_of(args.topology, cabled) if args.topology else None
    code = serve_until_stopped(
        args.device_id,
        ports,
        address,
        tm,
        seed=args.seed,
        log_level=level,
        tls=server_tls_from_args(args),
        loop_cpu=args.loop_cpu,
        interface_names=names,
        on_ready=lambda bound: print(f"P4Runtime on {bound} (device {args.device_id})", flush=True),
    )
    # A gRPC worker may still be parsing a large request in pure Python; waiting
    # for it at interpreter exit took 16 s. Everything is closed: leave now.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _clean(args: argparse.Namespace) -> int:
    from emulation.housekeeping.clean import clean, survey
    from emulation.housekeeping.prefixes import PROJECT_PREFIXES, check_clean_prefix
    from emulation.softswitch.processes import is_switch_process

    prefixes = (
        tuple(check_clean_prefix(p) for p in args.prefix) if args.prefix else PROJECT_PREFIXES
    )
    if args.dry_run:
        found = survey(prefixes, is_switch_process)
        count = 0
        for state in found.runs:
            removable = args.all or not state.alive
            print(
                f"run {state.run.prefix}: owner {state.run.describe_owner()}; "
                f"{'would remove' if removable else 'left alone'}: "
                f"{', '.join(state.items) or 'nothing left'}"
            )
            count += len(state.items) if removable else 0
        for item in found.unrecorded:
            print(f"{'would remove' if args.all else 'left alone (no run file; --all)'} {item}")
            count += int(args.all)
        for item in found.stale_locks:
            print(f"would remove {item} (no process holds it)")
        count += len(found.stale_locks)
        print(f"{count} item(s) would be removed under prefixes {', '.join(prefixes)}")
        return 0
    removed = clean(prefixes, include_live=args.all, processes=is_switch_process)
    for item in removed:
        print(f"removed {item}")
    print(f"{len(removed)} item(s) removed under prefixes {', '.join(prefixes)}")
    return 0
