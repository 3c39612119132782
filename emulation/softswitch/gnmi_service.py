"""Which gNMI RPCs does the software target serve, and within which limits?

Switches serve gNMI next to P4Runtime on one gRPC server (Stratum does), so
`add_gnmi_service(server, source)` registers a gNMI servicer on the
P4Runtime server; `source()` returns the ports' `PortCounters`, whose tree
(and what a path selects of it) is `gnmi_tree`, and `queues()`, given, the
egress queues' `QueueCounters`, served under /qos (openconfig-qos) in Get and
Subscribe alike.

Capabilities, Get and Subscribe (ONCE, POLL, STREAM with SAMPLE, ON_CHANGE
or TARGET_DEFINED) are served; Set only of a port's config/enabled
(`gnmi_config`, where the switch gives `set_enabled`). An enum value gNMI does not define
is INVALID_ARGUMENT, one it defines that we do not serve UNIMPLEMENTED.
Our choices where gNMI leaves it to the target: a STREAM ends when the client
closes its side of the stream; STREAM samples no faster than `MIN_SAMPLE_NS`
(sample_interval 0 means that) and no slower than `MAX_SAMPLE_NS`,
TARGET_DEFINED samples every `DEFAULT_SAMPLE_NS`, ON_CHANGE checks every
`MIN_SAMPLE_NS` and sends the leaves that changed; heartbeat_interval is
ignored. Subscribe RPCs open at once, paths per request and bytes per
response are capped (`service_limits`): RESOURCE_EXHAUSTED past a cap.
A Subscribe of JSON (the default) answers typed scalars per leaf, as Stratum
does (`subscribe_encoding` says why); a Get answers in the encoding it asks.
Paths under /cassini/telemetry (the 10 ms per-job telemetry, `gnmi_telemetry`)
are served by STREAM alone, at sample intervals down to 10 ms, from the
packet loop's sample ring, in a subscription of their own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc

from controlplane.gnmi import CASSINI_MODULE

from .gnmi_config import serve_set
from .gnmi_get_encoding import PathCache, get_response_bytes, proto_notification_bytes
from .gnmi_subscriptions import (
    BuildBudget,
    PollRequests,
    SendWatch,
    SubscribeSlots,
    client_gone,
    presented_key,
)
from .gnmi_telemetry import (
    MAX_SAMPLE_NS,
    TelemetrySource,
    check_interval,
    check_packed,
    is_telemetry,
    stream_samples,
    telemetry_schema,
)
from .gnmi_tree import (
    FIDELITY_CONTAINER,
    OPENCONFIG_INTERFACES,
    OPENCONFIG_P4RT,
    QOS_CONTAINER,
    QOS_MODULE,
    Match,
    PathError,
    bare_name,
    check_origin,
    fidelity_tree,
    interfaces_tree,
    notification,
    qos_tree,
    select,
)
from .log_limit import LogLimiter
from .port_stats import PortCounters, QueueCounters
from .raw_requests import MalformedRequest, raw_service_handler
from .sample_ring import SampleReader
from .service_limits import ServiceLimits

GNMI_VERSION = "0.8.0"  # the gnmi.proto of the stubs we serve (pygnmi.spec.v080)
SUPPORTED_ENCODINGS = (gnmi_pb2.JSON, gnmi_pb2.JSON_IETF, gnmi_pb2.PROTO)
MIN_SAMPLE_NS = 100_000_000  # 100 ms: the fastest STREAM sampling (our choice)
DEFAULT_SAMPLE_NS = 1_000_000_000  # TARGET_DEFINED subscriptions sample every second


# Which encoding a Subscribe answers with (gNMI specification 0.10.0, openconfig/reference
# rpc/gnmi/gnmi-specification.md). JSON is the default: section 3.2 has a target send
# JSON when a request names no encoding, and JSON is the Encoding enum's zero, so
# naming none and naming JSON are one and the same message. Section 2.2.3 carries
# a leaf's value in TypedValue's scalar fields (string_val, uint_val, ...); the
# encodings of section 2.3 serialise structured data; a subscription reports per
# leaf (section 3.5.2.3). Our choice, as Stratum does: a Subscribe that asks for
# JSON (or for nothing) or PROTO gets one Update per leaf with its typed scalar,
# which is what finsy's Switch reads (its ON_CHANGE subscription to oper-status
# names no encoding); one that asks for JSON_IETF gets JSON_IETF. A Get answers
# in the encoding it names, JSON when it names none (section 3.3.1).
SCALAR_SUBSCRIBE_ENCODINGS = (gnmi_pb2.JSON, gnmi_pb2.PROTO)


def subscribe_encoding(requested: int) -> int:
    """How a subscription's updates are encoded: PROTO (typed scalars per leaf) for a
    request of JSON, the default, or PROTO; JSON_IETF as asked (see above).

    >>> [gnmi_pb2.Encoding.Name(subscribe_encoding(e)) for e in (0, 2, 4)]
    ['PROTO', 'PROTO', 'JSON_IETF']
    """
    requested = check_encoding(requested)
    return gnmi_pb2.PROTO if requested in SCALAR_SUBSCRIBE_ENCODINGS else requested


def check_encoding(encoding: int) -> int:
    """The encoding if we serve it; UNIMPLEMENTED (as gNMI asks) naming the ones we do,
    INVALID_ARGUMENT for a value gNMI does not define."""
    if encoding not in SUPPORTED_ENCODINGS:
        names = ", ".join(gnmi_pb2.Encoding.Name(e) for e in SUPPORTED_ENCODINGS)
        name = check_enum(gnmi_pb2.Encoding, encoding, "encoding")
        raise PathError(
            grpc.StatusCode.UNIMPLEMENTED, f"encoding {name} is not served; use one of {names}"
        )
    return encoding


def check_enum(enum: Any, value: int, what: str) -> str:
    """The name of `value` in a protobuf enum; INVALID_ARGUMENT if it has none.

    >>> check_enum(gnmi_pb2.SubscriptionList.Mode, 1, "mode")
    'ONCE'
    """
    if value not in enum.values():
        known = ", ".join(f"{n} ({v})" for n, v in enum.items())
        raise PathError(grpc.StatusCode.INVALID_ARGUMENT, f"{what} {value} is not one of {known}")
    return str(enum.Name(value))


def check_paths(count: int, limit: int, what: str) -> None:
    """RESOURCE_EXHAUSTED for more than `limit` paths in one request."""
    if count > limit:
        raise PathError(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"{count} paths in one {what}; this target takes at most {limit} (a path may stop "
            "at a container or use the key * to select many leaves)",
        )


def full_path(prefix: Any, path: Any) -> tuple[str, list[Any]]:
    """(origin, elems) of a prefix joined with a path."""
    if path.element and not path.elem:
        raise PathError(
            grpc.StatusCode.INVALID_ARGUMENT,
            "path uses the deprecated 'element' strings; send PathElem 'elem' instead",
        )
    return path.origin or prefix.origin, [*prefix.elem, *path.elem]


@dataclass(frozen=True)
class Subscription:
    """One STREAM subscription: what to sample, how often, and whether to send only changes."""

    origin: str
    elems: tuple[Any, ...]
    interval_ns: int
    changes_only: bool


def stream_plan(subscription_list: Any) -> list[Subscription]:
    """How each entry of a STREAM SubscriptionList is sampled (see the module docstring)."""
    plan = []
    for sub in subscription_list.subscription:
        origin, elems = full_path(subscription_list.prefix, sub.path)
        mode = sub.mode
        check_enum(gnmi_pb2.SubscriptionMode, mode, "subscription mode")
        if mode == gnmi_pb2.ON_CHANGE:
            interval, changes_only = MIN_SAMPLE_NS, True
        elif mode == gnmi_pb2.TARGET_DEFINED:
            interval, changes_only = sub.sample_interval or DEFAULT_SAMPLE_NS, False
        else:
            interval, changes_only = sub.sample_interval or MIN_SAMPLE_NS, sub.suppress_redundant
        if interval < MIN_SAMPLE_NS:
            raise PathError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"sample_interval {interval} ns is below this target's minimum "
                f"{MIN_SAMPLE_NS} ns ({MIN_SAMPLE_NS / 1e6:g} ms)",
            )
        if interval > MAX_SAMPLE_NS:
            raise PathError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"sample_interval {interval} ns is above this target's maximum "
                f"{MAX_SAMPLE_NS} ns (2**63 - 1)",
            )
        plan.append(Subscription(origin, tuple(elems), interval, changes_only))
    return plan


def changed(sent: dict[str, bytes], notice: Any) -> Any:
    """The notification without the updates whose value equals what was last sent."""
    keep = []
    for update in notice.update:
        key = update.path.SerializeToString(deterministic=True)
        value = update.val.SerializeToString(deterministic=True)
        if sent.get(key.hex()) != value:
            sent[key.hex()] = value
            keep.append(update)
    del notice.update[:]
    notice.update.extend(keep)
    return notice


class GnmiServicer(gnmi_pb2_grpc.gNMIServicer):
    """gNMI for the interface counters `source()` returns; wall-clock timestamps in ns."""

    def __init__(
        self,
        source: Callable[[], Sequence[PortCounters]],
        clock_ns: Callable[[], int] = time.time_ns,
        fidelity: Callable[[], Mapping[str, tuple[Sequence[int], float]]] | None = None,
        limits: ServiceLimits | None = None,
        telemetry: TelemetrySource | None = None,
        set_enabled: Callable[[str, bool], None] | None = None,
        queues: Callable[[], Sequence[QueueCounters]] | None = None,
        harness_key: str | None = None,
        log_limit: LogLimiter | None = None,
        build_cpu: Callable[[], float] = time.thread_time,
    ) -> None:
        self.source = source
        self.queues = queues  # the egress queues under /qos; None: /qos is not served
        self.set_enabled = set_enabled  # a port's config/enabled; None: Set is not served
        self.clock_ns = clock_ns
        self.fidelity = fidelity
        self.telemetry = telemetry
        self.limits = limits if limits is not None else ServiceLimits()
        self.log_limit = log_limit if log_limit is not None else LogLimiter()
        self.build_cpu = build_cpu  # a STREAM's CPU time, for its `BuildBudget`
        self._slots = SubscribeSlots(
            self.limits.max_subscriptions, self.limits.harness_subscriptions, harness_key
        )
        self._get_paths = PathCache()  # a Get's PROTO leaf paths, serialised once

    def _bounded(self, notice: Any, so_far: int = 0) -> int:
        """The bytes of a response holding `notice` after `so_far` bytes; RESOURCE_EXHAUSTED
        past the cap."""
        return self._within_cap(so_far + notice.ByteSize())

    def _within_cap(self, total: int) -> int:
        """`total` bytes of a response; RESOURCE_EXHAUSTED past the cap."""
        if total > self.limits.max_gnmi_response_bytes:
            raise PathError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the response would exceed {self.limits.max_gnmi_response_bytes} bytes, the "
                "most this target sends in one; ask for fewer or narrower paths",
            )
        return total

    def _matches(
        self, origin: str, elems: Sequence[Any], trees: dict[str, Any] | None = None
    ) -> list[Match]:
        """What a path selects now; `trees` keeps the trees read so far, so the
        subscriptions due at one instant read the switch once (finsy subscribes to
        each port's oper-status apart: 72 paths on the testbed)."""
        check_origin(origin)
        if is_telemetry(elems):
            raise PathError(
                grpc.StatusCode.UNIMPLEMENTED,
                "/cassini/telemetry is served by Subscribe STREAM only (its samples are "
                "deltas of 10 ms each, not state to Get)",
            )
        trees = {} if trees is None else trees
        if self.fidelity is not None and elems and bare_name(elems[0].name) == FIDELITY_CONTAINER:
            if FIDELITY_CONTAINER not in trees:
                trees[FIDELITY_CONTAINER] = fidelity_tree(self.fidelity())
            return select(trees[FIDELITY_CONTAINER], elems)
        if self.queues is not None and elems and bare_name(elems[0].name) == QOS_CONTAINER:
            if QOS_CONTAINER not in trees:
                trees[QOS_CONTAINER] = qos_tree(self.queues())
            return select(trees[QOS_CONTAINER], elems)
        if "interfaces" not in trees:
            trees["interfaces"] = interfaces_tree(self.source())
        return select(trees["interfaces"], elems)

    def _notice(
        self,
        origin: str,
        elems: Sequence[Any],
        encoding: int,
        prefix: Any,
        trees: dict[str, Any] | None = None,
    ) -> Any:
        matches = self._matches(origin, elems, trees)
        return notification(matches, encoding, self.clock_ns(), prefix)

    def Capabilities(self, request: Any, context: Any) -> Any:  # noqa: N802 (gRPC name)
        models = [
            gnmi_pb2.ModelData(name=OPENCONFIG_INTERFACES, organization="OpenConfig working group"),
            gnmi_pb2.ModelData(name=OPENCONFIG_P4RT, organization="OpenConfig working group"),
            gnmi_pb2.ModelData(
                name=CASSINI_MODULE, organization="cassini-harness", version="0.1.0"
            ),
        ]
        if self.queues is not None:
            models.append(
                gnmi_pb2.ModelData(name=QOS_MODULE, organization="OpenConfig working group")
            )
        return gnmi_pb2.CapabilityResponse(
            supported_models=models,
            supported_encodings=list(SUPPORTED_ENCODINGS),
            gNMI_version=GNMI_VERSION,
        )

    def Get(self, request: Any, context: Any) -> bytes:  # noqa: N802
        """The serialised GetResponse: registered with a serializer that passes bytes
        through (`add_gnmi_service`), so a PROTO Get's bytes are never parsed."""
        try:
            encoding = check_encoding(request.encoding)
            check_enum(gnmi_pb2.GetRequest.DataType, request.type, "data type")
            check_paths(len(request.path), self.limits.max_gnmi_paths, "GetRequest")
            paths = list(request.path) or [gnmi_pb2.Path()]
            notices: list[bytes] = []
            size = 0
            for path in paths:
                origin, elems = full_path(request.prefix, path)
                matches = self._matches(origin, elems)
                if request.type == gnmi_pb2.GetRequest.CONFIG:
                    matches = []  # every leaf served is state: there is no config to return
                if encoding == gnmi_pb2.PROTO:  # written as bytes, paths cached
                    notice = proto_notification_bytes(
                        matches, self.clock_ns(), request.prefix, self._get_paths
                    )
                else:
                    notice = notification(
                        matches, encoding, self.clock_ns(), request.prefix
                    ).SerializeToString()
                size = self._within_cap(size + len(notice))
                notices.append(notice)
        except PathError as err:
            context.abort(err.code, err.message)
        return get_response_bytes(notices)

    def Set(self, request: Any, context: Any) -> Any:  # noqa: N802
        """Only a port's config/enabled, where the switch can change it (`gnmi_config`)."""
        return serve_set(request, context, self.set_enabled)

    def Subscribe(self, request_iterator: Iterator[Any], context: Any) -> Iterator[Any]:  # noqa: N802
        """At most `max_subscriptions` at once (and the harness's kept ones): each holds
        a thread while it is open (`gnmi_subscriptions`)."""
        kind = self._slots.take(presented_key(context))
        if kind is None:
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"this target serves at most {self.limits.max_subscriptions} Subscribe RPCs "
                "at once: all are taken",
            )
            return  # abort raised
        try:
            yield from self._subscribe(request_iterator, context)
        finally:
            self._slots.give(kind)

    def _subscribe(self, request_iterator: Iterator[Any], context: Any) -> Iterator[Any]:
        try:
            first = next(request_iterator, None)
            if first is None:
                return
            if not first.HasField("subscribe"):
                raise PathError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "the first SubscribeRequest must carry a subscription list",
                )
            sub_list = first.subscribe
            encoding = subscribe_encoding(sub_list.encoding)
            check_enum(gnmi_pb2.SubscriptionList.Mode, sub_list.mode, "subscription list mode")
            if not sub_list.subscription:
                raise PathError(grpc.StatusCode.INVALID_ARGUMENT, "the subscription list is empty")
            check_paths(len(sub_list.subscription), self.limits.max_gnmi_paths, "SubscriptionList")
            for sub in sub_list.subscription:
                check_enum(gnmi_pb2.SubscriptionMode, sub.mode, "subscription mode")
            wanted = [full_path(sub_list.prefix, s.path) for s in sub_list.subscription]
            watch = SendWatch(
                context, self.limits.stream_stall_s, self.log_limit, time.monotonic
            )
            if any(is_telemetry(elems) for _, elems in wanted):
                yield from watch.responses(
                    self._telemetry(sub_list, wanted, encoding, request_iterator, context)
                )
                return
            checked: dict[str, Any] = {}
            for origin, elems in wanted:
                self._matches(origin, elems, checked)  # a bad path fails the RPC before any data
            if sub_list.mode == gnmi_pb2.SubscriptionList.STREAM:
                plan = stream_plan(sub_list)
                yield from watch.responses(
                    self._stream(plan, sub_list, encoding, request_iterator, context)
                )
                return
            if not sub_list.updates_only:
                trees: dict[str, Any] = {}
                for origin, elems in wanted:
                    yield self._update(
                        self._notice(origin, elems, encoding, sub_list.prefix, trees)
                    )
            yield gnmi_pb2.SubscribeResponse(sync_response=True)
            if sub_list.mode == gnmi_pb2.SubscriptionList.ONCE:
                return
            polls = PollRequests(request_iterator, self.limits.poll_idle_s)
            for request in polls:  # POLL: one full sample per Poll message
                if not request.HasField("poll"):
                    raise PathError(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        "a POLL subscription takes only Poll messages after the subscription list",
                    )
                trees = {}
                for origin, elems in wanted:
                    yield self._update(
                        self._notice(origin, elems, encoding, sub_list.prefix, trees)
                    )
                yield gnmi_pb2.SubscribeResponse(sync_response=True)
        except PathError as err:
            context.abort(err.code, err.message)
        except MalformedRequest as err:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed request: {err.message}")
        except TimeoutError as err:  # a POLL subscription nobody polls
            context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, str(err))

    def _update(self, notice: Any) -> Any:
        """A SubscribeResponse of one notification, within the response cap."""
        self._bounded(notice)
        return gnmi_pb2.SubscribeResponse(update=notice)

    def _stream(
        self,
        plan: Sequence[Subscription],
        sub_list: Any,
        encoding: int,
        request_iterator: Iterator[Any],
        context: Any,
    ) -> Iterator[Any]:
        """Each subscription's samples on its own schedule until the client goes away.

        A client that closes its side of the stream is done too (our choice:
        pygnmi's `close()` does that), so the RPC ends with OK then.
        """
        ended = client_gone(request_iterator, context)
        sent: list[dict[str, bytes]] = [{} for _ in plan]
        trees: dict[str, Any] = {}
        for i, sub in enumerate(plan):
            notice = changed(
                sent[i], self._notice(sub.origin, sub.elems, encoding, sub_list.prefix, trees)
            )
            if not sub_list.updates_only:
                yield self._update(notice)
        yield gnmi_pb2.SubscribeResponse(sync_response=True)
        start = time.monotonic_ns()
        due = [start + sub.interval_ns for sub in plan]
        budget = BuildBudget(cpu=self.build_cpu)
        while not ended.is_set() and context.is_active():
            delay = max(0, min(due) - time.monotonic_ns()) / 1e9
            if ended.wait(min(delay, threading.TIMEOUT_MAX)):
                return
            now = time.monotonic_ns()
            budget.start()
            trees = {}  # one read of the switch for every subscription due now
            built = []
            for i, sub in enumerate(plan):
                if due[i] > now:
                    continue
                built.append(i)
                notice = self._notice(sub.origin, sub.elems, encoding, sub_list.prefix, trees)
                if sub.changes_only:
                    notice = changed(sent[i], notice)
                    if not notice.update:
                        continue
                yield self._update(notice)
            # A late wake-up skips missed samples rather than bursting them, and a round
            # that cost more than the budget allows delays the next one.
            rest = time.monotonic_ns() + round(budget.rest_s() * 1e9)
            for i in built:
                due[i] = max(due[i] + plan[i].interval_ns, now + 1, rest)

    def _telemetry(
        self,
        sub_list: Any,
        wanted: Sequence[tuple[str, Sequence[Any]]],
        encoding: int,
        request_iterator: Iterator[Any],
        context: Any,
    ) -> Iterator[Any]:
        """A STREAM of /cassini/telemetry paths (`gnmi_telemetry`): checked, then every
        sample from now on at the finest interval any of them asks."""
        if self.telemetry is None:
            raise PathError(
                grpc.StatusCode.UNIMPLEMENTED,
                "this target has no sample ring: /cassini/telemetry is not served",
            )
        if not all(is_telemetry(elems) for _, elems in wanted):
            raise PathError(
                grpc.StatusCode.INVALID_ARGUMENT,
                "subscribe to /cassini/telemetry in a subscription list of its own",
            )
        if sub_list.mode != gnmi_pb2.SubscriptionList.STREAM:
            raise PathError(
                grpc.StatusCode.UNIMPLEMENTED,
                "/cassini/telemetry is served by STREAM only (ONCE and POLL would lose "
                "the samples between two looks)",
            )
        for sub in sub_list.subscription:
            if sub.mode == gnmi_pb2.ON_CHANGE:
                raise PathError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "/cassini/telemetry is sampled: use SAMPLE (or TARGET_DEFINED)",
                )
        ring = self.telemetry.ring()
        schema = telemetry_schema(ring.ports, self.telemetry.names)
        for origin, elems in wanted:
            check_origin(origin)
            select(schema, elems)  # a bad name fails the RPC before any data
        paths = [elems for _, elems in wanted]
        check_packed(paths, encoding)  # a mixed or JSON_IETF packed one fails here
        interval = min(check_interval(s.sample_interval) for s in sub_list.subscription)
        reader = SampleReader(ring)  # from the next sample: the client is told it is in place
        yield gnmi_pb2.SubscribeResponse(sync_response=True)
        ended = client_gone(request_iterator, context)
        for notice in stream_samples(
            reader, self.telemetry.names, paths, interval, encoding, sub_list.prefix,
            ended, context.is_active,
        ):  # fmt: skip
            yield self._update(notice)


def add_gnmi_service(
    server: grpc.Server,
    source: Callable[[], Sequence[PortCounters]],
    fidelity: Callable[[], Mapping[str, tuple[Sequence[int], float]]] | None = None,
    limits: ServiceLimits | None = None,
    telemetry: TelemetrySource | None = None,
    set_enabled: Callable[[str, bool], None] | None = None,
    queues: Callable[[], Sequence[QueueCounters]] | None = None,
    log_limit: LogLimiter | None = None,
    harness_key: str | None = None,
) -> None:
    """Register the gNMI servicer for `source()`'s interface counters (and, given, the
    packet loop's lateness histograms, its 10 ms sample ring and `queues()`' egress
    queues) on `server`, within `limits`."""
    servicer = GnmiServicer(
        source,
        fidelity=fidelity,
        limits=limits,
        telemetry=telemetry,
        set_enabled=set_enabled,
        queues=queues,
        harness_key=harness_key,
        log_limit=log_limit,
    )
    # Requests are parsed by the service, not by grpcio (`raw_requests` says why); the
    # Get's response is bytes already (`get_response_bytes`).
    service = gnmi_pb2.DESCRIPTOR.services_by_name["gNMI"]
    server.add_generic_rpc_handlers(
        (raw_service_handler(service, servicer, servicer.log_limit, {"Get": _as_sent}),)
    )


def _as_sent(response: bytes) -> bytes:
    """A response already serialised, handed to gRPC as it is."""
    return response
