"""Arguments several subcommands share, defined once so their help cannot drift.

The address, TLS and value flags live in `address_flags`, `tls_flags` and
`value_flags`; they are importable from here too, so a command module imports its shared flags from one place.
"""

from __future__ import annotations

import argparse
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from emulation.fabric.scaling import DEFAULT_SCALE, check_scale
from emulation.housekeeping.signals import SignalExit, signals_raise
from topologies.errors import UserInputError
from topologies.library import builtin_names

from .address_flags import MAX_PORT, connect_address, listen_address, parse_address
from .tls_flags import (
    add_tls_client_arguments,
    add_tls_server_arguments,
    client_tls_from_args,
    server_tls_from_args,
)
from .value_flags import (
    MAX_CANDIDATES,
    MAX_DURATION_S,
    MAX_ITERATIONS,
    MAX_JOBS,
    MAX_PROCESSES,
    MAX_WORKERS,
    device_id,
    nonnegative_float,
    nonnegative_int,
    parse_duration,
    parse_election_id,
    parse_number,
    port_number,
    positive_float,
    positive_int,
    positive_int_up_to,
    timeout_seconds,
)

if TYPE_CHECKING:
    from controlplane.settings import ControlPlaneSettings

DEFAULT_TOPOLOGY = "cassini-testbed"


def topology_help() -> str:
    return (
        f"built-in name ({', '.join(builtin_names())}), generator "
        "(leaf-spine:LEAVES:SPINES:SERVERS_PER_LEAF, fat-tree:K) or a .json/.yaml file"
    )


def add_topology_argument(
    parser: argparse.ArgumentParser, default: str | None = DEFAULT_TOPOLOGY, purpose: str = ""
) -> None:
    """`--topology/-t`, as every command that reads a cluster takes it."""
    text = topology_help() if not purpose else f"{purpose}: {topology_help()}"
    if default is not None:
        text += f" (default {default})"
    parser.add_argument("--topology", "-t", default=default, help=text)


# ---------------------------------------------------------------- the scale flag


def scale_factor(text: str) -> float:
    """The emulation factor S, in (0, 1] (`emulation.fabric.scaling.check_scale`)."""
    value = float(parse_number(text, float))
    try:
        check_scale(value)
    except UserInputError:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}") from None
    return value


AUTO_SCALE = "auto"


def scale_or_auto(text: str) -> float | str:
    """`scale_factor`, or 'auto': the largest S this machine sustains (`emulation.capacity.model`)."""
    return AUTO_SCALE if text.strip().lower() == AUTO_SCALE else scale_factor(text)


def add_scale_argument(parser: argparse.ArgumentParser, auto: bool = False) -> None:
    """`--scale`, with the one default every command that scales a fabric uses; with
    `auto`, also 'auto' and `--recalibrate` (commands that run jobs, whose load is known)."""
    text = (
        f"emulation factor S in (0, 1]: port rate = link Gbps x S, thresholds scaled "
        f"to match (default {DEFAULT_SCALE}: 50 Gbps -> {50e3 * DEFAULT_SCALE:g} Mbit/s)"
    )
    if not auto:
        parser.add_argument("--scale", type=scale_factor, default=DEFAULT_SCALE, help=text)
        return
    parser.add_argument(
        "--scale",
        type=scale_or_auto,
        default=DEFAULT_SCALE,
        help=text + "; 'auto': the largest S this machine's calibration predicts the jobs "
        "run trustworthily at (`cassini capacity`)",
    )
    parser.add_argument(
        "--recalibrate",
        action="store_true",
        help="with --scale auto: measure this machine's emulation cost again (a few seconds)",
    )


# ---------------------------------------------------------------- output and interruption


def add_models_argument(parser: argparse.ArgumentParser) -> None:
    """`--models FILE` and `--jobs-model`, as every command that reads the models takes them
    (one help text)."""
    parser.add_argument("--models", metavar="FILE", help="YAML adding or replacing models")
    add_jobs_model_argument(parser)


def add_jobs_model_argument(parser: argparse.ArgumentParser) -> None:
    """`--jobs-model`: how data-parallel profiles are derived (`JOBS_MODELS`)."""
    from scheduler.workloads.profiles import JOBS_MODELS

    parser.add_argument(
        "--jobs-model",
        choices=JOBS_MODELS,
        default=JOBS_MODELS[0],
        help="how a data-parallel iteration runs: ddp (buckets all-reduced during backprop, "
        "as the testbed's PyTorch DDP; default) or sequential-fp32 (compute, then one "
        "AllReduce: the earlier model)",
    )


def add_force_argument(parser: argparse.ArgumentParser) -> None:
    """`--force`, as every command that writes files takes it (see `topologies.outputs`)."""
    parser.add_argument(
        "--force", action="store_true", help="replace an existing output (refused otherwise)"
    )


class Interrupted(Exception):
    """A run stopped by a stop signal; `main` prints it and exits 128 + the signal."""

    def __init__(self, signum: int, message: str) -> None:
        super().__init__(message)
        self.signum = signum


@contextmanager
def interruptible(message: str) -> Iterator[None]:
    """Turn Ctrl-C, SIGTERM and SIGHUP inside the block into `Interrupted(message)`
    (`emulation.housekeeping.signals.signals_raise` makes them exceptions, so cleanup runs)."""
    try:
        with signals_raise():
            yield
    except KeyboardInterrupt:
        raise Interrupted(signal.SIGINT, message) from None
    except SignalExit as stop:
        raise Interrupted(stop.signum, message) from None


# --- thresholds: the settings file and the WRED flags that override it ---------------------


def add_settings_arguments(parser: argparse.ArgumentParser) -> None:
    """`--settings` and the WRED flags, as every command that programs or emulates takes them."""
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


def settings_from_args(args: argparse.Namespace) -> ControlPlaneSettings:
    """The thresholds of add_settings_arguments' flags: the file, then the flags over it."""
    from controlplane.settings import load_settings

    return load_settings(args.settings).with_wred(args.wred_min, args.wred_max, args.wred_prob)


__all__ = [
    "DEFAULT_TOPOLOGY",
    "MAX_CANDIDATES",
    "MAX_DURATION_S",
    "MAX_ITERATIONS",
    "MAX_JOBS",
    "MAX_PROCESSES",
    "MAX_WORKERS",
    "device_id",
    "parse_number",
    "port_number",
    "positive_int_up_to",
    "timeout_seconds",
    "MAX_PORT",
    "Interrupted",
    "add_force_argument",
    "add_models_argument",
    "add_settings_arguments",
    "add_tls_client_arguments",
    "add_tls_server_arguments",
    "add_topology_argument",
    "client_tls_from_args",
    "connect_address",
    "interruptible",
    "listen_address",
    "nonnegative_float",
    "nonnegative_int",
    "parse_address",
    "parse_duration",
    "parse_election_id",
    "positive_float",
    "positive_int",
    "server_tls_from_args",
    "settings_from_args",
    "topology_help",
]
