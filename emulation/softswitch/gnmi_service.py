"""Which interface counters does the software target serve over gNMI, and how?

Switches serve gNMI next to P4Runtime on one gRPC server (Stratum does), so
`add_gnmi_service(server, source)` registers a gNMI servicer on the
P4Runtime server; `source()` returns the ports' `PortCounters`. The tree:

    /interfaces/interface[name=NAME]/name
    /interfaces/interface[name=NAME]/state/name
    /interfaces/interface[name=NAME]/state/id                 (openconfig-p4rt: P4Runtime port)
    /interfaces/interface[name=NAME]/state/counters/LEAF

with LEAF one of `controlplane.gnmi.COUNTER_LEAVES`: the OpenConfig counters
and our own per-cause leaves (module `cassini-interfaces`). A key may be `*`
or left out (every interface); a path may stop at any container.

The RPCs are a thin shell over pure functions: `interfaces_tree` (the data
of PortCounters), `select` (a path's matches, or a `PathError` naming the
bad element and the names that exist), `notification` (matches encoded as
JSON, JSON_IETF or PROTO). Capabilities, Get and Subscribe (ONCE, POLL,
STREAM with SAMPLE, ON_CHANGE or TARGET_DEFINED) are served; Set is not.
Our choices where gNMI leaves it to the target: PROTO sends one typed leaf
per update, JSON one update per matched node; a STREAM ends when the client
closes its side of the stream; STREAM samples no faster than
`MIN_SAMPLE_NS` (sample_interval 0 means that), TARGET_DEFINED samples
every `DEFAULT_SAMPLE_NS`, ON_CHANGE checks every `MIN_SAMPLE_NS` and sends
the leaves that changed; heartbeat_interval is ignored.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import grpc
from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc

from controlplane.gnmi import (
    CASSINI_COUNTER_LEAVES,
    CASSINI_MODULE,
    COUNTER_LEAVES,
    PORT_ID_LEAF,
)
from topologies.errors import did_you_mean

from .port_stats import PortCounters

GNMI_VERSION = "0.8.0"  # the gnmi.proto of the stubs we serve (pygnmi.spec.v080)
OPENCONFIG_INTERFACES = "openconfig-interfaces"
OPENCONFIG_P4RT = "openconfig-p4rt"
MODULES = (OPENCONFIG_INTERFACES, OPENCONFIG_P4RT, CASSINI_MODULE)
# Path origins we answer: none, OpenConfig's, or a module name (pygnmi puts one there).
ORIGINS = ("", "openconfig", *MODULES)
SUPPORTED_ENCODINGS = (gnmi_pb2.JSON, gnmi_pb2.JSON_IETF, gnmi_pb2.PROTO)
MIN_SAMPLE_NS = 100_000_000  # 100 ms: the fastest STREAM sampling (our choice)
DEFAULT_SAMPLE_NS = 1_000_000_000  # TARGET_DEFINED subscriptions sample every second
_NOT_LEAVES = ("port", "name")  # PortCounters fields that are not counters


def _field(leaf: str) -> str:
    """The PortCounters field a counters leaf reports ('in-octets' -> 'in_octets')."""
    return leaf.replace("-", "_")


def _check_leaves() -> None:
    """The leaf list and PortCounters must name the same counters (checked at import)."""
    served = {_field(leaf) for leaf in COUNTER_LEAVES}
    counted = {f.name for f in fields(PortCounters)} - set(_NOT_LEAVES)
    if served != counted:
        raise ImportError(
            "gNMI counters leaves and PortCounters disagree: "
            f"leaves without a field {sorted(served - counted)}, "
            f"fields without a leaf {sorted(counted - served)}"
        )


_check_leaves()


class PathError(Exception):
    """A path the tree does not have; `code` is the gRPC status to answer with."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Keyed:
    """A YANG list: its key leaf and its entries by key value."""

    key: str
    entries: Mapping[str, Any]


# One element of a concrete path: (name, ((key, value), ...)).
Elem = tuple[str, tuple[tuple[str, str], ...]]


@dataclass(frozen=True)
class Match:
    """One node a path selected: its concrete path (keys filled in) and its value."""

    path: tuple[Elem, ...]
    value: Any  # a container (dict), a list (Keyed) or a leaf (int, str)


def interfaces_tree(ports: Sequence[PortCounters]) -> dict[str, Any]:
    """The served data of `ports`, as nested containers.

    >>> from emulation.softswitch.port_stats import port_counters
    >>> tree = interfaces_tree(port_counters({"rx_packets": {1: 7}}, {1: "veth1"}, [1]))
    >>> tree["interfaces"]["interface"].entries["veth1"]["state"]["counters"]["in-unicast-pkts"]
    7
    """
    entries = {}
    for c in ports:
        counters = {leaf: int(getattr(c, _field(leaf))) for leaf in COUNTER_LEAVES}
        state = {"name": c.name, PORT_ID_LEAF: c.port, "counters": counters}
        entries[c.name] = {"name": c.name, "state": state}
    return {"interfaces": {"interface": Keyed("name", entries)}}


# (our choice) The packet loop's lateness histograms (issue 16's fidelity monitor)
# under a container of our own, /fidelity/state/<histogram>/: one leaf per
# bucket (bucket-0 ...) and the largest lateness in ns, cumulative since the
# switch started, so a reader subtracts two Gets to get one interval's figures.
FIDELITY_CONTAINER = "fidelity"


def fidelity_tree(histograms: Mapping[str, tuple[Sequence[int], float]]) -> dict[str, Any]:
    """The served data of the lateness histograms, as nested containers.

    >>> tree = fidelity_tree({"departure_lateness": ((5, 1), 2e-6)})
    >>> tree["fidelity"]["state"]["departure-lateness"]
    {'bucket-0': 5, 'bucket-1': 1, 'max-ns': 2000}
    """
    state = {}
    for name, (buckets, largest) in histograms.items():
        leaves: dict[str, Any] = {f"bucket-{i}": int(c) for i, c in enumerate(buckets)}
        leaves["max-ns"] = round(largest * 1e9)
        state[name.replace("_", "-")] = leaves
    return {FIDELITY_CONTAINER: {"state": state}}


def render(path: Sequence[Elem]) -> str:
    """'/interfaces/interface[name=veth1]/state' (the text a user would type)."""
    parts = [name + "".join(f"[{k}={v}]" for k, v in keys) for name, keys in path]
    return "/" + "/".join(parts)


def _bare(name: str) -> str:
    """The element name without a module prefix ('openconfig-interfaces:interfaces')."""
    if ":" not in name:
        return name
    module, bare = name.split(":", 1)
    if module not in MODULES:
        raise PathError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"'{name}': {did_you_mean(module, MODULES, 'module')}",
        )
    return bare


def check_origin(origin: str) -> None:
    """Refuse paths of an origin (schema) we do not serve."""
    if origin not in ORIGINS:
        raise PathError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"path origin: {did_you_mean(origin, [o for o in ORIGINS if o], 'origin')}"
            " or leave it empty",
        )


def select(tree: Mapping[str, Any], elems: Sequence[Any]) -> list[Match]:
    """The nodes of `tree` that the gnmi PathElems `elems` select (a key `*` selects all).

    Raises PathError: NOT_FOUND for a name the tree does not have (with the
    names it has), INVALID_ARGUMENT for keys where there is no list or a key
    the list does not have.
    """
    matches: list[tuple[tuple[Elem, ...], Any]] = [((), tree)]
    for elem in elems:
        name = _bare(elem.name)
        keys = dict(elem.key)
        found: list[tuple[tuple[Elem, ...], Any]] = []
        for path, node in matches:
            where = render(path)
            if not isinstance(node, dict):
                raise PathError(
                    grpc.StatusCode.NOT_FOUND,
                    f"{where} is a leaf: it has no element '{name}' below it",
                )
            if name not in node:
                raise PathError(
                    grpc.StatusCode.NOT_FOUND, f"{where}: {did_you_mean(name, node, 'element')}"
                )
            child = node[name]
            here = f"{where.rstrip('/')}/{name}"
            if isinstance(child, Keyed):
                unknown = sorted(set(keys) - {child.key})
                if unknown:
                    raise PathError(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"{here} is keyed by '{child.key}', not by {', '.join(unknown)}",
                    )
                wanted = keys.get(child.key, "*")
                if wanted == "*":
                    chosen = sorted(child.entries)
                elif wanted in child.entries:
                    chosen = [wanted]
                else:
                    raise PathError(
                        grpc.StatusCode.NOT_FOUND,
                        f"{here}: {did_you_mean(wanted, child.entries, name)}",
                    )
                for value in chosen:
                    found.append((path + ((name, ((child.key, value),)),), child.entries[value]))
            else:
                if keys:
                    raise PathError(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"{here} is not a list: it takes no keys, got "
                        + ", ".join(f"[{k}={v}]" for k, v in sorted(keys.items())),
                    )
                found.append((path + ((name, ()),), child))
        matches = found
    return [Match(path, value) for path, value in matches]


def leaves(match: Match) -> list[Match]:
    """Every leaf under a match, each with its concrete path."""
    value = match.value
    if isinstance(value, dict):
        out = []
        for name, child in value.items():
            out.extend(leaves(Match((*match.path, (name, ())), child)))
        return out
    if isinstance(value, Keyed):
        name, _ = match.path[-1]
        base = match.path[:-1]
        out = []
        for key_value, entry in sorted(value.entries.items()):
            out.extend(leaves(Match((*base, (name, ((value.key, key_value),))), entry)))
        return out
    return [match]


def _module(name: str) -> str:
    if name in CASSINI_COUNTER_LEAVES:
        return CASSINI_MODULE
    if name == PORT_ID_LEAF:
        return OPENCONFIG_P4RT
    return OPENCONFIG_INTERFACES


def to_json(value: Any, name: str, ietf: bool, parent_module: str | None) -> Any:
    """A node as JSON data; with ietf, RFC 7951: qualified names, 64-bit counters as strings."""
    module = _module(name)
    if isinstance(value, Keyed):
        return [
            to_json(entry, name, ietf, parent_module) for _, entry in sorted(value.entries.items())
        ]
    if isinstance(value, dict):
        out = {}
        for child_name, child in value.items():
            member = child_name
            if ietf and _module(child_name) != module:
                member = f"{_module(child_name)}:{child_name}"
            out[member] = to_json(child, child_name, ietf, module)
        return out
    if ietf and name in COUNTER_LEAVES:
        return str(value)  # counter64: RFC 7951 section 6.1
    return value


def _json_value(match: Match, ietf: bool) -> Any:
    """The JSON of a match's value; the root's members are qualified as RFC 7951 asks."""
    if not match.path:
        value = match.value
        return {
            (f"{_module(n)}:{n}" if ietf else n): to_json(v, n, ietf, None)
            for n, v in value.items()
        }
    name = match.path[-1][0]
    # The members of a container take its module; the top value is named by the path.
    return to_json(match.value, name, ietf, _module(name))


def _set_path(path: Any, elems: Sequence[Elem]) -> None:
    for name, keys in elems:
        elem = path.elem.add(name=name)
        for key, value in keys:
            elem.key[key] = value


def add_updates(into: Any, matches: Sequence[Match], encoding: int) -> None:
    """gnmi.Update messages of matches, added to the repeated field `into`: one per match
    (JSON), one per leaf (PROTO). Built in place: with the pure-Python protobuf this
    project gets (p4runtime-shell pins protobuf < 3.21), a message passed to a
    constructor is copied, and the copies were most of a Get of the testbed."""
    if encoding == gnmi_pb2.PROTO:
        for match in matches:
            for leaf in leaves(match):
                update = into.add()
                _set_path(update.path, leaf.path)
                if isinstance(leaf.value, str):
                    update.val.string_val = leaf.value
                else:
                    update.val.uint_val = int(leaf.value)
        return
    ietf = encoding == gnmi_pb2.JSON_IETF
    for match in matches:
        text = json.dumps(_json_value(match, ietf)).encode()
        update = into.add()
        _set_path(update.path, match.path)
        if ietf:
            update.val.json_ietf_val = text
        else:
            update.val.json_val = text


def notification(
    matches: Sequence[Match], encoding: int, timestamp_ns: int, prefix: Any = None
) -> Any:
    """gnmi.Notification of matches (full paths in the updates; prefix only names target/origin)."""
    notice = gnmi_pb2.Notification(timestamp=timestamp_ns)
    if prefix is not None:
        notice.prefix.target = prefix.target
        notice.prefix.origin = prefix.origin
    else:
        notice.prefix.SetInParent()
    add_updates(notice.update, matches, encoding)
    return notice


def check_encoding(encoding: int) -> int:
    """The encoding if we serve it; UNIMPLEMENTED (as gNMI asks) naming the ones we do."""
    if encoding not in SUPPORTED_ENCODINGS:
        names = ", ".join(gnmi_pb2.Encoding.Name(e) for e in SUPPORTED_ENCODINGS)
        raise PathError(
            grpc.StatusCode.UNIMPLEMENTED,
            f"encoding {gnmi_pb2.Encoding.Name(encoding)} is not served; use one of {names}",
        )
    return encoding


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
    ) -> None:
        self.source = source
        self.clock_ns = clock_ns
        self.fidelity = fidelity

    def _matches(self, origin: str, elems: Sequence[Any]) -> list[Match]:
        check_origin(origin)
        tree = interfaces_tree(self.source())
        if self.fidelity is not None and elems and _bare(elems[0].name) == FIDELITY_CONTAINER:
            tree = fidelity_tree(self.fidelity())
        return select(tree, elems)

    def _notice(self, origin: str, elems: Sequence[Any], encoding: int, prefix: Any) -> Any:
        return notification(self._matches(origin, elems), encoding, self.clock_ns(), prefix)

    def Capabilities(self, request: Any, context: Any) -> Any:  # noqa: N802 (gRPC name)
        models = [
            gnmi_pb2.ModelData(name=OPENCONFIG_INTERFACES, organization="OpenConfig working group"),
            gnmi_pb2.ModelData(name=OPENCONFIG_P4RT, organization="OpenConfig working group"),
            gnmi_pb2.ModelData(
                name=CASSINI_MODULE, organization="cassini-harness", version="0.1.0"
            ),
        ]
        return gnmi_pb2.CapabilityResponse(
            supported_models=models,
            supported_encodings=list(SUPPORTED_ENCODINGS),
            gNMI_version=GNMI_VERSION,
        )

    def Get(self, request: Any, context: Any) -> Any:  # noqa: N802
        try:
            encoding = check_encoding(request.encoding)
            paths = list(request.path) or [gnmi_pb2.Path()]
            notices = []
            for path in paths:
                origin, elems = full_path(request.prefix, path)
                matches = self._matches(origin, elems)
                if request.type == gnmi_pb2.GetRequest.CONFIG:
                    matches = []  # every leaf served is state: there is no config to return
                notices.append(notification(matches, encoding, self.clock_ns(), request.prefix))
        except PathError as err:
            context.abort(err.code, err.message)
        return gnmi_pb2.GetResponse(notification=notices)

    def Set(self, request: Any, context: Any) -> Any:  # noqa: N802
        context.abort(
            grpc.StatusCode.UNIMPLEMENTED,
            "Set is not served: the interface counters are read-only state",
        )

    def Subscribe(self, request_iterator: Iterator[Any], context: Any) -> Iterator[Any]:  # noqa: N802
        first = next(request_iterator, None)
        if first is None:
            return
        try:
            if not first.HasField("subscribe"):
                raise PathError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "the first SubscribeRequest must carry a subscription list",
                )
            sub_list = first.subscribe
            encoding = check_encoding(sub_list.encoding)
            if not sub_list.subscription:
                raise PathError(grpc.StatusCode.INVALID_ARGUMENT, "the subscription list is empty")
            wanted = [full_path(sub_list.prefix, s.path) for s in sub_list.subscription]
            for origin, elems in wanted:
                self._matches(origin, elems)  # a bad path fails the RPC before any data
            if sub_list.mode == gnmi_pb2.SubscriptionList.STREAM:
                plan = stream_plan(sub_list)
                yield from self._stream(plan, sub_list, encoding, request_iterator, context)
                return
            if not sub_list.updates_only:
                for origin, elems in wanted:
                    yield gnmi_pb2.SubscribeResponse(
                        update=self._notice(origin, elems, encoding, sub_list.prefix)
                    )
            yield gnmi_pb2.SubscribeResponse(sync_response=True)
            if sub_list.mode == gnmi_pb2.SubscriptionList.ONCE:
                return
            for request in request_iterator:  # POLL: one full sample per Poll message
                if not request.HasField("poll"):
                    raise PathError(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        "a POLL subscription takes only Poll messages after the subscription list",
                    )
                for origin, elems in wanted:
                    yield gnmi_pb2.SubscribeResponse(
                        update=self._notice(origin, elems, encoding, sub_list.prefix)
                    )
                yield gnmi_pb2.SubscribeResponse(sync_response=True)
        except PathError as err:
            context.abort(err.code, err.message)

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
        ended = threading.Event()
        context.add_callback(ended.set)

        def drain() -> None:
            try:
                for _ in request_iterator:
                    pass  # nothing else is asked of a STREAM subscription
            except grpc.RpcError:
                pass  # cancelled: the callback above fires too
            finally:
                ended.set()

        threading.Thread(target=drain, name="gnmi-stream-requests", daemon=True).start()
        sent: list[dict[str, bytes]] = [{} for _ in plan]
        for i, sub in enumerate(plan):
            notice = changed(
                sent[i], self._notice(sub.origin, sub.elems, encoding, sub_list.prefix)
            )
            if not sub_list.updates_only:
                yield gnmi_pb2.SubscribeResponse(update=notice)
        yield gnmi_pb2.SubscribeResponse(sync_response=True)
        start = time.monotonic_ns()
        due = [start + sub.interval_ns for sub in plan]
        while not ended.is_set() and context.is_active():
            delay = max(0, min(due) - time.monotonic_ns()) / 1e9
            if ended.wait(delay):
                return
            now = time.monotonic_ns()
            for i, sub in enumerate(plan):
                if due[i] > now:
                    continue
                # A late wake-up skips missed samples rather than bursting them.
                due[i] = max(due[i] + sub.interval_ns, now + 1)
                notice = self._notice(sub.origin, sub.elems, encoding, sub_list.prefix)
                if sub.changes_only:
                    notice = changed(sent[i], notice)
                    if not notice.update:
                        continue
                yield gnmi_pb2.SubscribeResponse(update=notice)


def add_gnmi_service(
    server: grpc.Server,
    source: Callable[[], Sequence[PortCounters]],
    fidelity: Callable[[], Mapping[str, tuple[Sequence[int], float]]] | None = None,
) -> None:
    """Register the gNMI servicer for `source()`'s interface counters (and, given, the
    packet loop's lateness histograms) on `server`."""
    gnmi_pb2_grpc.add_gNMIServicer_to_server(GnmiServicer(source, fidelity=fidelity), server)
