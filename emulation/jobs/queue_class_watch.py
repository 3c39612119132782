"""How are a run's queue-class counts taken while its replicas run?

`QueueClassWatch` reads the switch's egress queues (port, queue class) every
`interval_s` in a thread of its own, from start to stop, and turns each pair of
readings into the rows of `queue_classes.csv` (`queue_class_rows`). (our choice)
It reads once a second at the most: the queue tree is eight queues per port, and
a class's share of a link over a second is what the policies' turns show at the
emulation's scale. A failed read is reported in `error`, never raised: the run
goes on, and the file holds the rows read until then.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence

from controlplane.gnmi import GnmiError, GnmiReader, QueueCount

from .queue_class_rows import QueueClassRow, Snapshot, queue_rows, snapshot

MIN_POLL_S = 1.0  # (our choice) see the module docstring


class QueueClassWatch:
    """Polls the switch's queues every `interval_s` (at least MIN_POLL_S) in a thread;
    `stop()` takes a last poll and returns the rows.

    `read` returns the queues (by default a `GnmiReader(address).read_queues`), `clock`
    the wall-clock time of a poll.
    """

    def __init__(
        self,
        links: Mapping[int, str],
        interval_s: float,
        read: Callable[[], Sequence[QueueCount]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.links = dict(links)
        self.interval_s = max(interval_s, MIN_POLL_S)
        self.read = read
        self.clock = clock
        self.rows: list[QueueClassRow] = []
        self.error: str | None = None
        self._last: Snapshot | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def over_gnmi(
        cls, address: str, links: Mapping[int, str], interval_s: float, timeout_s: float
    ) -> QueueClassWatch:
        """A watch reading `address`'s /qos queues, one channel per poll."""

        def read() -> Sequence[QueueCount]:
            with GnmiReader(address, timeout=timeout_s) as reader:
                return reader.read_queues()

        return cls(links, interval_s, read)

    def poll(self) -> None:
        """One reading: rows for what changed since the previous one (the first is the
        baseline)."""
        if self.error is not None:
            return
        try:
            now = snapshot(self.read())
        except GnmiError as err:
            self.error = f"queue classes: {err}"
            return
        if self._last is not None:
            self.rows.extend(queue_rows(self._last, now, self.clock(), self.links))
        self._last = now

    def start(self) -> QueueClassWatch:
        self.poll()
        self._thread = threading.Thread(target=self._run, name="queue-class-watch", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.poll()

    def stop(self) -> list[QueueClassRow]:
        """End the polling after one last poll; the rows of the whole run."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.poll()
        return list(self.rows)
