"""A stop signal that lands in a finalizer is not lost.

Ctrl-C about 0.2 s after `fabric X up` raised its SignalExit inside a gRPC
channel's `__del__` run by the garbage collector; Python drops exceptions
there ("Exception ignored in"), so the run went on as if nothing was asked.
"""

from __future__ import annotations

import gc
import os
import signal
import time

import pytest

from emulation.housekeeping.signals import SignalExit, signals_raise


class _SignalledWhileFinalized:
    """Its finalizer is where the signal lands, as in a gRPC channel's `__del__`."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # the handler runs here, between these bytecodes
            pass


def test_a_signal_dropped_in_a_finalizer_is_raised_after_it(
    capfd: pytest.CaptureFixture[str],
) -> None:
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(SignalExit) as stopped, signals_raise():
        cycle = _SignalledWhileFinalized()
        cycle.self = cycle  # type: ignore[attr-defined]  # freed by the collector only
        del cycle
        gc.collect()
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:  # the run's loop: it must be stopped
            time.sleep(0.01)
    assert stopped.value.signum == signal.SIGINT
    assert signal.getsignal(signal.SIGINT) is before  # restored
