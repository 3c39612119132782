"""Which threads run the gRPC handlers of the switch, so that none keeps it alive?

`concurrent.futures.ThreadPoolExecutor` joins its threads when the
interpreter exits: a handler still building a large Read held a stopping
switch for 50 s. `DaemonPool` is the same kind of pool (threads started as
work arrives, up to `max_workers`, reused while idle) whose threads are
daemons: the process ends when its main thread does, and a handler that
cannot be interrupted ends with it.

>>> pool = DaemonPool(2, "doc")
>>> pool.submit(sum, (1, 2)).result()
3
>>> pool.shutdown()
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent import futures
from typing import Any

_Work = tuple[futures.Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class DaemonPool(futures.Executor):
    """A thread pool of at most `max_workers` daemon threads named `name`-N."""

    def __init__(self, max_workers: int, name: str) -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self.max_workers = max_workers
        self.name = name
        self._work: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._shut = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> futures.Future[Any]:
        future: futures.Future[Any] = futures.Future()
        with self._lock:
            if self._shut:
                raise RuntimeError("cannot submit work to a pool that is shut down")
            self._work.put((future, fn, args, kwargs))
            if not self._idle.acquire(blocking=False) and len(self._threads) < self.max_workers:
                thread = threading.Thread(
                    target=self._run, name=f"{self.name}-{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
        return future

    def _run(self) -> None:
        while (item := self._work.get()) is not None:
            future, fn, args, kwargs = item
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:  # the future carries it, as the stdlib pool does
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            del item, future, fn, args, kwargs  # nothing of the work outlives it
            self._idle.release()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No more work; idle threads end now, busy ones when their work is done."""
        with self._lock:
            if cancel_futures:
                while True:
                    try:
                        item = self._work.get_nowait()
                    except queue.Empty:
                        break
                    if item is not None:
                        item[0].cancel()
            if not self._shut:
                self._shut = True
                for _ in self._threads:
                    self._work.put(None)
            threads = list(self._threads)
        if wait:
            for thread in threads:
                thread.join()
