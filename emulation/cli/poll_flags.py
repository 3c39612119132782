"""`--poll-interval`: how often `emulate` and `fabric run` poll the switch's counters.

Both commands take the same flag, checked the same way, with the poller's
default (`controlplane.counter_watch.DEFAULT_POLL_INTERVAL_S`), which is
looked up only when help is shown: the poller imports gRPC, and `cassini`
imports a command's heavy modules only when that command runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from topologies.errors import UserInputError

from .common import parse_duration

# (our choice) Bounds of a poll interval: faster than 10 Hz the polls cost the
# switch more than a quarter of a core (0.25 cores measured at 10 Hz on the
# default testbed, see DEFAULT_POLL_INTERVAL_S); slower than a minute leaves a
# run with too few points to plot.
MIN_POLL_INTERVAL_S = 0.1
MAX_POLL_INTERVAL_S = 60.0


def poll_interval(text: str) -> float:
    """Seconds between two polls: '0.5', '500ms' or '2s', in [0.1, 60].

    >>> poll_interval("250ms")
    0.25
    >>> poll_interval("0.01")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be between 0.1 and 60 seconds, got '0.01'
    """
    try:
        value = parse_duration(text, "--poll-interval")
    except UserInputError as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix("--poll-interval: ")) from None
    if not MIN_POLL_INTERVAL_S <= value <= MAX_POLL_INTERVAL_S:
        raise argparse.ArgumentTypeError(
            f"must be between {MIN_POLL_INTERVAL_S:g} and {MAX_POLL_INTERVAL_S:g} seconds, "
            f"got '{text[:64]}'"
        )
    return value


class Deferred:
    """Help text computed when help is shown (`%(name)s` in a flag's help)."""

    def __init__(self, text: Callable[[], str]) -> None:
        self._text = text

    def __str__(self) -> str:
        return self._text()


class StoreWithDeferredHelp(argparse.Action):
    """argparse's store, whose help may name `Deferred` values given as `deferred`."""

    def __init__(self, *args: Any, deferred: Mapping[str, Deferred], **kwargs: Any) -> None:
        for name, value in deferred.items():
            setattr(self, name, value)  # argparse formats help with vars(action)
        super().__init__(*args, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)


def _default_text() -> str:
    from controlplane.counter_watch import DEFAULT_POLL_INTERVAL_S

    return f"{DEFAULT_POLL_INTERVAL_S:g}"


def add_poll_interval_argument(parser: argparse.ArgumentParser) -> None:
    """`--poll-interval SECONDS` (None when not given: the poller's default)."""
    parser.add_argument(
        "--poll-interval",
        type=poll_interval,
        default=None,
        metavar="SECONDS",
        action=StoreWithDeferredHelp,
        deferred={"poller_default": Deferred(_default_text)},
        help="seconds between two polls of the switch's counters, P4 and gNMI interface "
        "counters (e.g. 0.5, 500ms; default %(poller_default)s)",
    )


def poll_interval_or_default(value: float | None) -> float:
    """The flag's value, or the poller's default when it was not given."""
    if value is not None:
        return value
    from controlplane.counter_watch import DEFAULT_POLL_INTERVAL_S

    return DEFAULT_POLL_INTERVAL_S
