"""The `cassini` command: subcommands parse arguments and call library functions.

Each area owns one module here with a `register(subparsers)` function; heavy
imports (grpc, scapy, matplotlib) happen inside the handlers so `cassini topo
show` stays fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from topologies.errors import UserInputError

from . import (
    bmv2_cmds,
    capacity_cmds,
    ecn_cmds,
    emulate_cmds,
    fabric_cmds,
    model_cmds,
    profile_cmds,
    program_cmds,
    reproduce_cmds,
    schedule_cmds,
    simulate_cmds,
    sweep_cmds,
    switch_cmds,
    tofino_cmds,
    topo_cmds,
)
from .common import Interrupted


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cassini",
        description="Network-aware scheduling of ML training jobs on programmable switches.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (
        topo_cmds,
        model_cmds,
        schedule_cmds,
        simulate_cmds,
        sweep_cmds,
        program_cmds,
        ecn_cmds,
        tofino_cmds,
        bmv2_cmds,
        switch_cmds,
        fabric_cmds,
        emulate_cmds,
        capacity_cmds,
        profile_cmds,
        reproduce_cmds,
    ):
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result = args.handler(args)
    except UserInputError as err:
        print(f"cassini: error: {err}", file=sys.stderr)
        return 2
    except Interrupted as err:
        print(f"cassini: interrupted: {err}", file=sys.stderr)
        return 128 + err.signum
    except KeyboardInterrupt:
        print("cassini: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`cassini ... | head`): stop quietly, as Unix
        # tools do, and keep Python from complaining when it flushes stdout.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
