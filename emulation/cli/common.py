"""Arguments several subcommands share, defined once so their help cannot drift.

The address and TLS flags live in `address_flags` and `tls_flags`; they are
importable from here too, so a command module imports its shared flags from one place.
"""

from __future__ import annotations

import argparse
import re
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from emulation.scaling import DEFAULT_SCALE, check_scale
from emulation.signals import SignalExit, signals_raise
from topologies.errors import UserInputError
from topologies.library import builtin_names

from .address_flags import MAX_PORT, connect_address, listen_address, parse_address
from .tls_flags import (
    add_tls_client_arguments,
    add_tls_server_arguments,
    client_tls_from_args,
    server_tls_from_args,
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


# ---------------------------------------------------------------- numeric flags
# argparse `type=` helpers: a bad value is one line naming the flag
# ("argument --processes: must be >= 1, got 0") and exit 2.


def _number(text: str, cast: type[int] | type[float]) -> float:
    try:
        value = cast(text)
    except ValueError:
        kind = "an integer" if cast is int else "a number"
        raise argparse.ArgumentTypeError(f"must be {kind}, got '{text}'") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number, got '{text}'")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1 (counts of processes, candidates, jobs, workers)."""
    value = int(_number(text, int))
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def positive_int_up_to(limit: int) -> Callable[[str], int]:
    """An integer in 1..limit: a count whose typo (`--jobs 99999999999`) would exhaust
    memory or run for ever is refused before anything runs.

    >>> positive_int_up_to(10)("7")
    7
    """

    def parse(text: str) -> int:
        value = positive_int(text)
        if value > limit:
            raise argparse.ArgumentTypeError(f"must be at most {limit:,}, got {value:,}")
        return value

    return parse


# (our choice) Bounds of the counts flags take, far above any real run.
MAX_JOBS = 100_000
MAX_CANDIDATES = 1_000
MAX_PROCESSES = 1_024
MAX_ITERATIONS = 10_000_000
MAX_WORKERS = 100_000


def nonnegative_int(text: str) -> int:
    """An integer >= 0 (seeds)."""
    value = int(_number(text, int))
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def scale_factor(text: str) -> float:
    """The emulation factor S, in (0, 1] (`emulation.scaling.check_scale`)."""
    value = float(_number(text, float))
    try:
        check_scale(value)
    except UserInputError:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}") from None
    return value


def port_number(text: str) -> int:
    """A TCP/UDP port, 1-65535 (Thrift, gRPC)."""
    value = int(_number(text, int))
    if not 1 <= value <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"must be a port in 1-{MAX_PORT}, got {value}")
    return value


AUTO_SCALE = "auto"


def scale_or_auto(text: str) -> float | str:
    """`scale_factor`, or 'auto': the largest S this machine sustains (`emulation.capacity`)."""
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


def positive_float(text: str) -> float:
    """A number > 0 (rates, capacities, loads, precisions)."""
    value = _number(text, float)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def nonnegative_float(text: str) -> float:
    """A number >= 0 (jitter sigmas)."""
    value = _number(text, float)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


# ---------------------------------------------------------------- output and interruption


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
    (`emulation.signals.signals_raise` makes them exceptions, so cleanup runs)."""
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


# --- durations and election ids, as the device commands take them ---------------------------


# (our choice) A week: longer than any run, short enough that every timer and
# deadline the duration feeds stays representable.
MAX_DURATION_S = 7 * 24 * 3600.0


def parse_duration(text: str, flag: str) -> float:
    """Seconds of '1s', '500ms', '2m' or a bare number of seconds, in (0, a week].

    >>> parse_duration("500ms", "--interval")
    0.5
    >>> parse_duration("99999999999999999s", "--interval")
    Traceback (most recent call last):
    ...
    topologies.errors.UserInputError: --interval: must be at most a week (604800 s), got '99999999999999999s'
    """
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|m)?\s*", text[:64])
    if not m or len(text) > 64:
        raise UserInputError(f"{flag}: '{text[:64]}' is not a duration (e.g. 1s, 500ms, 2m)")
    value = float(m.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}[m.group(2)]
    if value <= 0:
        raise UserInputError(f"{flag}: must be > 0, got '{text}'")
    if value > MAX_DURATION_S:
        raise UserInputError(
            f"{flag}: must be at most a week ({MAX_DURATION_S:.0f} s), got '{text}'"
        )
    return value


def device_id(text: str) -> int:
    """A P4Runtime device id: an integer in 0..2**64-1 (the spec's uint64)."""
    value = int(_number(text, int))
    if not 0 <= value < 2**64:
        raise argparse.ArgumentTypeError(f"must be in 0..{2**64 - 1}, got {value}")
    return value


def timeout_seconds(text: str) -> float:
    """Seconds to wait for a device: > 0 and at most an hour."""
    value = float(_number(text, float))
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"must be in (0, 3600] seconds, got {text}")
    return value


def parse_election_id(text: str) -> tuple[int, int]:
    """'5' -> (0, 5); '1,5' -> (1, 5)."""
    parts = text.split(",")
    try:
        values = [int(p) for p in parts[:3]]
    except ValueError:
        raise UserInputError(f"--election-id: '{text[:64]}' is not LOW or HIGH,LOW") from None
    if len(values) == 1:
        values = [0, values[0]]
    if len(values) != 2 or min(values) < 0 or values == [0, 0]:
        raise UserInputError(f"--election-id: '{text[:64]}' must be LOW or HIGH,LOW, not 0")
    if max(values) >= 2**64:  # each half is a uint64 of the spec's Uint128
        raise UserInputError(f"--election-id: '{text[:64]}': HIGH and LOW must each be below 2**64")
    return values[0], values[1]


__all__ = [
    "DEFAULT_TOPOLOGY",
    "MAX_PORT",
    "Interrupted",
    "add_force_argument",
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
