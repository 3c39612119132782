"""A stop signal while a channel's owner closes it leaves the channel closed, whole.

gRPC's close waits for its threads to finish the channel's calls; a Ctrl-C
during that wait left the close half done, and the garbage collector's
close at interpreter exit then waited for ever (`cassini fabric run` never
exited). A Ctrl-C before the close (while the owner waited for its stream
reader) skipped the close and left the channel to that same collector.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest

from controlplane.gnmi import GnmiReader
from controlplane.job_samples import TelemetryStream
from controlplane.session import P4RuntimeSession

ADDRESS = "127.0.0.1:1"  # never dialled: the channels are only closed


class _Stop(BaseException):
    """What the signal raises here, as `emulation.housekeeping.signals.SignalExit` does in a run."""


class _StopOnce:
    """A SIGINT handler that raises `_Stop` the first time only (the later ones of
    `_signal_until_stopped` find the test past the point they were for)."""

    def __init__(self) -> None:
        self.raised = threading.Event()

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if not self.raised.is_set():
            self.raised.set()
            raise _Stop


@pytest.fixture
def stopped() -> Iterator[_StopOnce]:
    handler = _StopOnce()
    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield handler
    finally:
        signal.signal(signal.SIGINT, previous)


def _signal_until_stopped(handler: _StopOnce) -> None:
    """SIGINT to this process until the handler raised: one that comes just before the
    main thread blocks wakes it only when the wait ends, and is sent again."""
    while not handler.raised.is_set():
        os.kill(os.getpid(), signal.SIGINT)
        handler.raised.wait(0.2)


class _SlowChannel:
    """Closes as gRPC's channel does: it waits (here until `may_finish`) for the
    channel's calls to end, in the thread that closes it."""

    def __init__(self) -> None:
        self.began = threading.Event()
        self.may_finish = threading.Event()
        self.finished = threading.Event()
        self.closes = 0

    def close(self) -> None:
        self.closes += 1
        self.began.set()
        self.may_finish.wait()
        self.finished.set()


class _SignalledJoin:
    """A reader thread whose join is where the signal lands."""

    def __init__(self, handler: _StopOnce) -> None:
        self.handler = handler

    def join(self, timeout: float | None = None) -> None:
        _signal_until_stopped(self.handler)

    def is_alive(self) -> bool:
        return True


def _session(channel: Any) -> P4RuntimeSession:
    session = P4RuntimeSession(ADDRESS, 1, None)
    session._channel = channel
    return session


def _reader(channel: Any) -> GnmiReader:
    reader = GnmiReader(ADDRESS)
    reader._channel.close()  # the real one: no calls, closed at once
    reader._channel = channel
    return reader


def _stream(channel: Any) -> TelemetryStream:
    stream = TelemetryStream(ADDRESS, {})
    stream._channel.close()
    stream._channel = channel
    return stream


CLOSERS: dict[str, Callable[[Any], Callable[[], None]]] = {
    "P4RuntimeSession.close": lambda ch: _session(ch).close,
    "GnmiReader.close": lambda ch: _reader(ch).close,
    "TelemetryStream.stop": lambda ch: _stream(ch).stop,
}


@pytest.mark.parametrize("owner", CLOSERS)
def test_a_signal_while_the_channel_closes_does_not_leave_it_half_closed(
    owner: str, stopped: _StopOnce
) -> None:
    channel = _SlowChannel()
    close = CLOSERS[owner](channel)

    def signal_once_closing() -> None:
        if channel.began.wait(30):
            _signal_until_stopped(stopped)

    sender = threading.Thread(target=signal_once_closing)
    sender.start()
    try:
        with pytest.raises(_Stop):  # the signal reaches the caller at once ...
            close()
    finally:
        channel.may_finish.set()  # ... gRPC's threads finish the calls ...
        sender.join()
    assert channel.finished.wait(30)  # ... and the close that began completes
    assert channel.closes == 1


class _Channel:
    def __init__(self) -> None:
        self.closes = 0

    def close(self) -> None:
        self.closes += 1


def test_a_signal_while_the_session_waits_for_its_reader_still_closes_the_channel(
    stopped: _StopOnce,
) -> None:
    channel = _Channel()
    session = _session(channel)
    session._reader = _SignalledJoin(stopped)  # type: ignore[assignment]
    with pytest.raises(_Stop):
        session.close()
    assert channel.closes == 1


def test_a_signal_while_the_stream_waits_for_its_reader_still_closes_the_channel(
    stopped: _StopOnce,
) -> None:
    channel = _Channel()
    stream = _stream(channel)
    stream._thread = _SignalledJoin(stopped)  # type: ignore[assignment]
    with pytest.raises(_Stop):
        stream.stop()
    assert channel.closes == 1
