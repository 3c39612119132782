"""How long may a gNMI Subscribe hold its slot and its thread, and who gets the kept one?

Each Subscribe holds a thread of the service while it is open, so what a
client can make it hold is bounded here (every figure is `ServiceLimits`'):

- `SubscribeSlots`: `max_subscriptions` for anyone, and `harness_subscriptions`
  more kept for the harness's own client. (our choice) The harness is the
  client that sends the switch's harness key as the `HARNESS_KEY_METADATA`
  metadata: a secret the switch reads from a file only its user can read
  (`harness_key.py`), so another local user cannot take the kept slot, and
  eight idle POLL subscriptions no longer refuse the harness's telemetry.
- `PollRequests`: a POLL subscription that sends no Poll for `poll_idle_s`
  is ended (DEADLINE_EXCEEDED): it held its slot for good before.
- `SendWatch`: a STREAM whose last response has waited `stream_stall_s` to
  be sent (gRPC flow control: the client does not read, its window is full)
  is cancelled; while it waits, no sample is built.
- `BuildBudget`: a STREAM of interface paths spends at most `STREAM_BUILD_SHARE`
  of a core building its samples (its thread's CPU time); one whose samples
  cost more is sampled less often (eight STREAMs of 901 paths held a full core).
"""

from __future__ import annotations

import hmac
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from .log_limit import LogLimiter
from .raw_requests import MalformedRequest

log = logging.getLogger(__name__)

# The metadata key under which the harness's client sends the switch's harness key.
HARNESS_KEY_METADATA = "cassini-harness-key"
# (our choice) The share of a core one STREAM subscription may spend building samples.
STREAM_BUILD_SHARE = 0.05


class SubscribeSlots:
    """`shared` slots for anyone and `kept` more for a client holding `key`.

    >>> slots = SubscribeSlots(1, 1, "k")
    >>> slots.take(None), slots.take(None), slots.take("k"), slots.take("k")
    ('shared', None, 'kept', None)
    """

    def __init__(self, shared: int, kept: int, key: str | None) -> None:
        self.key = key
        self._free = {"shared": shared, "kept": kept if key else 0}
        self._lock = threading.Lock()

    def is_harness(self, presented: str | None) -> bool:
        return bool(self.key) and presented is not None and hmac.compare_digest(
            presented.encode(), (self.key or "").encode()
        )

    def take(self, presented: str | None) -> str | None:
        """The kind of slot taken ('kept' first for the harness), None when none is free."""
        kinds = ("kept", "shared") if self.is_harness(presented) else ("shared",)
        with self._lock:
            for kind in kinds:
                if self._free[kind] > 0:
                    self._free[kind] -= 1
                    return kind
        return None

    def give(self, kind: str) -> None:
        with self._lock:
            self._free[kind] += 1


def presented_key(context: Any) -> str | None:
    """The harness key a client sent, if any."""
    for key, value in context.invocation_metadata() or ():
        if key == HARNESS_KEY_METADATA:
            return str(value)
    return None


class PollRequests:
    """A POLL subscription's requests, read by a thread of their own, so that the
    handler can wait for the next one no longer than `idle_s`."""

    _END = object()

    def __init__(self, requests: Iterator[Any], idle_s: float) -> None:
        self.idle_s = idle_s
        self._box: queue.Queue[Any] = queue.Queue()
        threading.Thread(
            target=self._read, args=(requests,), name="gnmi-poll-requests", daemon=True
        ).start()

    def _read(self, requests: Iterator[Any]) -> None:
        try:
            for request in requests:
                self._box.put(request)
        except (grpc.RpcError, MalformedRequest) as err:
            self._box.put(err if isinstance(err, MalformedRequest) else self._END)
        finally:
            self._box.put(self._END)

    def __iter__(self) -> Iterator[Any]:
        """The requests until the client closes its side; TimeoutError after `idle_s`
        without one, MalformedRequest for bytes that are none."""
        while True:
            try:
                item = self._box.get(timeout=self.idle_s)
            except queue.Empty:
                raise TimeoutError(
                    f"no Poll for {self.idle_s:g} s: an idle POLL subscription holds a slot "
                    "others need; subscribe again to poll"
                ) from None
            if item is self._END:
                return
            if isinstance(item, MalformedRequest):
                raise item
            yield item


class SendWatch:
    """Cancels a stream whose response has waited `stall_s` to be sent (see the module)."""

    def __init__(
        self, context: Any, stall_s: float, log_limit: LogLimiter, clock: Callable[[], float]
    ) -> None:
        self.context = context
        self.stall_s = stall_s
        self.log_limit = log_limit
        self.clock = clock
        self.waiting_since: float | None = None
        self.stalled = False
        self._done = threading.Event()

    def responses(self, items: Iterator[Any]) -> Iterator[Any]:
        """`items`, each timed from when it is handed to gRPC to when gRPC asks for more."""
        watchdog = threading.Thread(target=self._watch, name="gnmi-send-watch", daemon=True)
        watchdog.start()
        try:
            for item in items:
                self.waiting_since = self.clock()
                yield item
                self.waiting_since = None
        finally:
            self._done.set()

    def _watch(self) -> None:
        while not self._done.wait(min(self.stall_s / 4, 1.0)):
            since = self.waiting_since
            if since is not None and self.clock() - since > self.stall_s:
                self.stalled = True
                self.log_limit.log(
                    log,
                    logging.INFO,
                    "gNMI subscriber %s does not read its stream (a response waited %g s "
                    "to be sent): cancelled",
                    self.context.peer(),
                    self.stall_s,
                )
                self.context.cancel()
                return


class BuildBudget:
    """How long a STREAM waits after building a round of samples: at least what the round
    cost in CPU times (1 / share - 1), so building takes at most `share` of a core.

    >>> spent = iter([0.0, 0.02]).__next__
    >>> budget = BuildBudget(0.05, spent)
    >>> budget.start(); round(budget.rest_s(), 3)
    0.38
    """

    def __init__(
        self, share: float = STREAM_BUILD_SHARE, cpu: Callable[[], float] = time.thread_time
    ) -> None:
        self.share = share
        self.cpu = cpu
        self._began = 0.0

    def start(self) -> None:
        self._began = self.cpu()

    def rest_s(self) -> float:
        """The seconds to wait after the round begun at `start`."""
        return max(0.0, self.cpu() - self._began) * (1 / self.share - 1)


def client_gone(request_iterator: Iterator[Any], context: Any) -> threading.Event:
    """An event set once the client cancels or closes its side of a STREAM (a thread
    drains its requests: nothing else is asked of a STREAM subscription)."""
    ended = threading.Event()
    context.add_callback(ended.set)

    def drain() -> None:
        try:
            for _ in request_iterator:
                pass
        except (grpc.RpcError, MalformedRequest):
            pass  # cancelled (the callback above fires too), or bytes that are no request
        finally:
            ended.set()

    threading.Thread(target=drain, name="gnmi-stream-requests", daemon=True).start()
    return ended
