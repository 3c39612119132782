"""Flag values argparse reads: a bad value is one line naming the flag, then exit 2.

Counts, ports, numbers, durations, device and election ids, each bounded
("argument --processes: must be >= 1, got 0"): a typo that would exhaust
memory or run for ever is refused before anything runs. `common` re-exports
them, so a command module imports its shared flags from one place.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable

from topologies.errors import UserInputError

from .address_flags import MAX_PORT


def parse_number(text: str, cast: type[int] | type[float]) -> float:
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
    value = int(parse_number(text, int))
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
    value = int(parse_number(text, int))
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def port_number(text: str) -> int:
    """A TCP/UDP port, 1-65535 (Thrift, gRPC)."""
    value = int(parse_number(text, int))
    if not 1 <= value <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"must be a port in 1-{MAX_PORT}, got {value}")
    return value


def positive_float(text: str) -> float:
    """A number > 0 (rates, capacities, loads, precisions)."""
    value = parse_number(text, float)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def nonnegative_float(text: str) -> float:
    """A number >= 0 (jitter sigmas)."""
    value = parse_number(text, float)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


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
    value = int(parse_number(text, int))
    if not 0 <= value < 2**64:
        raise argparse.ArgumentTypeError(f"must be in 0..{2**64 - 1}, got {value}")
    return value


def timeout_seconds(text: str) -> float:
    """Seconds to wait for a device: > 0 and at most an hour."""
    value = float(parse_number(text, float))
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
