"""How often may the switch's service write one kind of log line?

Clients decide how often the service logs (a connect, a refused Write, a
stream that ends): one flooding client wrote 62 MB of log in 90 s. A
`LogLimiter`, owned by the device, lets `LOG_LINES` lines of each kind (a
format string: the kinds are the code's own, so they are few) through per
`LOG_PERIOD_S`, counts the rest, and says how many it left out on the next
line of that kind it lets through, or at `flush()`.

>>> import logging
>>> clock = iter([0.0, 0.1, 0.2, 11.0]).__next__
>>> limiter = LogLimiter(lines=2, period_s=10.0, clock=clock)
>>> logger = logging.getLogger("doctest.log_limit")
>>> [limiter.log(logger, logging.WARNING, "client %s", name) for name in "abcd"]
[True, True, False, True]
>>> limiter.left_out
0
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

# (our choice) Lines of one kind per period, before the rest are only counted.
LOG_LINES = 20
LOG_PERIOD_S = 10.0


@dataclass
class _Window:
    """One kind of line: when its period began, lines let through, lines left out."""

    start: float
    passed: int = 0
    left_out: int = 0


class LogLimiter:
    """At most `lines` log lines per kind per `period_s`; the rest are counted."""

    def __init__(
        self,
        lines: int = LOG_LINES,
        period_s: float = LOG_PERIOD_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lines = lines
        self.period_s = period_s
        self.clock = clock
        self._lock = threading.Lock()
        self._windows: dict[tuple[str, str], _Window] = {}

    def log(self, logger: logging.Logger, level: int, message: str, *args: object) -> bool:
        """Log `message % args` unless its kind is over its share; True when logged."""
        if not logger.isEnabledFor(level):
            return False
        key = (logger.name, message)
        with self._lock:
            now = self.clock()
            window = self._windows.get(key)
            if window is None or now - window.start >= self.period_s:
                before = window.left_out if window is not None else 0
                window = self._windows[key] = _Window(now)
            else:
                before = 0
            if window.passed >= self.lines:
                window.left_out += 1
                return False
            window.passed += 1
        if before:
            message += " (and %d more like it left out of the log before this one)"
            args = (*args, before)
        logger.log(level, message, *args)
        return True

    @property
    def left_out(self) -> int:
        """Lines counted but not logged, in the current periods."""
        with self._lock:
            return sum(w.left_out for w in self._windows.values())

    def flush(self, logger: logging.Logger) -> None:
        """Log how many lines of each kind were left out and not yet reported."""
        with self._lock:
            pending = [(key, w.left_out) for key, w in self._windows.items() if w.left_out]
            for key, _ in pending:
                self._windows[key].left_out = 0
        for (name, message), count in pending:
            logger.info("%d log lines of %s like %r were left out", count, name, message)
