"""How do Ctrl-C, SIGTERM and SIGHUP reach cleanup, and what ended a child process?

SIGTERM's and SIGHUP's defaults end a process without running `finally`
blocks or `with` exits, so a run that must remove what it built turns the
stop signals (SIGINT, SIGTERM, and SIGHUP: a closed terminal or a dropped
SSH session) into `SignalExit` (`signals_raise`), or holds them while it
records or removes something (`signals_deferred`). Inside such a run an
interactive prompt gives Ctrl-C back to Python (`sigint_interrupts`): it
interrupts the command at hand, as in Mininet's CLI, and the prompt decides
when it ends the session. Handlers can only be set in the main thread:
elsewhere these blocks change nothing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# The stop signals whose default kills without cleanup (SIGINT raises KeyboardInterrupt).
KILLING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class SignalExit(SystemExit):
    """A stop signal, raised so cleanup runs; exits 128 + signal number like a shell."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name


def raise_signal_exit(signum: int, frame: FrameType | None) -> None:
    """A signal handler: the signal becomes a `SignalExit` in the main thread."""
    raise SignalExit(signum)


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """Within the block, the stop signals raise `SignalExit` (main thread only).

    A signal that lands while the garbage collector runs a finalizer (a gRPC
    channel's `__del__`, a weakref callback) raises there, and Python drops the
    exception: Ctrl-C was lost and the run went on. Such a dropped `SignalExit`
    is sent again shortly (`REDELIVER_S`), to land in the code the collector
    interrupted.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, raise_signal_exit) for s in STOP_SIGNALS}
    hook = sys.unraisablehook
    sys.unraisablehook = _redelivering(hook)
    try:
        yield
    finally:
        sys.unraisablehook = hook
        for signum, handler in previous.items():
            signal.signal(signum, handler)


# How long after a dropped stop signal it is sent again (our choice: past a typical
# collection, short next to a person's patience).
REDELIVER_S = 0.05


def _redelivering(
    hook: Callable[[Any], object],
) -> Callable[[Any], object]:
    """`hook`, except that a `SignalExit` dropped in a finalizer is sent again."""

    def unraisable(info: Any) -> object:
        if isinstance(info.exc_value, SignalExit):
            signum = info.exc_value.signum
            timer = threading.Timer(REDELIVER_S, os.kill, (os.getpid(), signum))
            timer.daemon = True
            timer.start()
            return None
        return hook(info)

    return unraisable


@contextlib.contextmanager
def signals_deferred(redeliver: bool = True) -> Iterator[None]:
    """The stop signals wait until the block is done, then take effect as usual
    (redeliver=False: dropped, as during cleanup, which is what they ask for)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        pending.append(signum)

    previous = {s: signal.signal(s, hold) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if pending and redeliver:
            signal.raise_signal(pending[0])


@contextlib.contextmanager
def sigint_interrupts() -> Iterator[None]:
    """Within the block SIGINT raises KeyboardInterrupt (Python's default), whatever
    handler was set outside; SIGTERM and SIGHUP keep theirs (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def exit_cause(returncode: int | None) -> str:
    """Why a process ended, as a phrase; a negative code is a signal (subprocess's way).

    >>> exit_cause(-9), exit_cause(3), exit_cause(None)
    ('was killed by SIGKILL (signal 9)', 'exited with code 3', 'is still running')
    """
    if returncode is None:
        return "is still running"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "an unknown signal"
        return f"was killed by {name} (signal {-returncode})"
    return f"exited with code {returncode}"
