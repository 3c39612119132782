"""What does the software target's gNMI tree hold, and what does a path select from it?

The data of the ports' `PortCounters`, as gNMI serves it (`gnmi_service`):

    /interfaces/interface[name=NAME]/name
    /interfaces/interface[name=NAME]/state/name
    /interfaces/interface[name=NAME]/state/ifindex            (the chip port)
    /interfaces/interface[name=NAME]/state/admin-status       (UP: ports are never disabled)
    /interfaces/interface[name=NAME]/state/oper-status        (UP, or DOWN once gone)
    /interfaces/interface[name=NAME]/state/id                 (openconfig-p4rt: P4Runtime port)
    /interfaces/interface[name=NAME]/state/counters/LEAF

with LEAF one of `controlplane.gnmi.COUNTER_LEAVES`: the OpenConfig counters
and our own per-cause leaves (module `cassini-interfaces`), and the packet
loop's lateness histograms under /fidelity. The egress queues' `QueueCounters`
(one queue per queue class, N = 0-7) under the OpenConfig QoS model:

    /qos/interfaces/interface[interface-id=NAME]/state/interface-id
    /qos/interfaces/interface[interface-id=NAME]/output/queues/queue[name=N]/state/LEAF

with LEAF `name` or one of `controlplane.gnmi.QUEUE_LEAVES` (transmit-pkts,
transmit-octets, dropped-pkts of openconfig-qos; ecn-marked-pkts ours). These are the leaves a Stratum
switch serves per interface and standard controllers read: finsy's `Switch`
lists the ports by `state/ifindex` and follows `state/oper-status`. NAME is
the port's name for controllers (`port_stats.PortCounters.name`, stable from
run to run, never the Linux interface: see the package README). A key may be
`*` or left out (every interface); a path may stop at any container.

Pure functions: `interfaces_tree` (the data of PortCounters), `qos_tree` (of
QueueCounters), `select` (a
path's matches, or a `PathError` naming the bad element and the names that
exist), `notification` (matches encoded as JSON, JSON_IETF or PROTO; our
choice: PROTO sends one typed leaf per update, JSON one update per matched
node).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import grpc
from pygnmi.spec.v080 import gnmi_pb2

from controlplane.gnmi import (
    CASSINI_COUNTER_LEAVES,
    CASSINI_MODULE,
    CASSINI_QUEUE_LEAVES,
    COUNTER_LEAVES,
    PORT_ID_LEAF,
    QOS_MODULE,
    QUEUE_LEAVES,
)
from topologies.errors import did_you_mean

from .port_stats import PortCounters, QueueCounters

OPENCONFIG_INTERFACES = "openconfig-interfaces"
OPENCONFIG_P4RT = "openconfig-p4rt"
MODULES = (OPENCONFIG_INTERFACES, OPENCONFIG_P4RT, QOS_MODULE, CASSINI_MODULE)
QOS_CONTAINER = "qos"
_NOT_QUEUE_LEAVES = ("port", "name", "queue_class")  # QueueCounters fields that are not leaves
# Path origins we answer: none, OpenConfig's, or a module name (pygnmi puts one there).
ORIGINS = ("", "openconfig", *MODULES)
_NOT_LEAVES = ("port", "name", "oper_status")  # PortCounters fields that are not counters


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
    queue_fields = {f.name for f in fields(QueueCounters)} - set(_NOT_QUEUE_LEAVES)
    if {_field(leaf) for leaf in QUEUE_LEAVES} != queue_fields:
        raise ImportError("gNMI queue leaves and QueueCounters disagree")


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
    >>> tree = interfaces_tree(port_counters({"rx_packets": {1: 7}}, {1: "tor1-eth1"}, [1]))
    >>> entry = tree["interfaces"]["interface"].entries["tor1-eth1"]
    >>> entry["state"]["counters"]["in-unicast-pkts"], entry["state"]["ifindex"]
    (7, 1)
    >>> entry["state"]["oper-status"]
    'UP'
    """
    entries = {}
    for c in ports:
        counters = {leaf: int(getattr(c, _field(leaf))) for leaf in COUNTER_LEAVES}
        state = {
            "name": c.name,
            # OpenConfig's ifindex (uint32, "the system-assigned number"): the chip port,
            # as a hardware switch numbers its ports; finsy's Switch lists ports by it.
            "ifindex": c.port,
            "admin-status": "UP",  # no port is ever disabled here (our choice: no Set)
            "oper-status": c.oper_status,  # OpenConfig's UP or DOWN
            PORT_ID_LEAF: c.port,
            "counters": counters,
        }
        entries[c.name] = {"name": c.name, "state": state}
    return {"interfaces": {"interface": Keyed("name", entries)}}


def qos_tree(queues: Sequence[QueueCounters]) -> dict[str, Any]:
    """The served data of the egress queues, as nested containers (openconfig-qos).

    >>> from emulation.softswitch.port_stats import queue_counters
    >>> queues = queue_counters({"sent_packets": {(1, 7): 3}}, {1: "tor1-eth1"}, [1])
    >>> interface = qos_tree(queues)["qos"]["interfaces"]["interface"].entries["tor1-eth1"]
    >>> queue = interface["output"]["queues"]["queue"].entries["7"]
    >>> queue["state"]["transmit-pkts"], queue["state"]["name"], len(interface["output"]["queues"]["queue"].entries)
    (3, '7', 8)
    """
    per_port: dict[str, dict[str, Any]] = {}
    for q in queues:
        key = str(q.queue_class)
        state: dict[str, Any] = {"name": key}
        state.update((leaf, int(getattr(q, _field(leaf)))) for leaf in QUEUE_LEAVES)
        per_port.setdefault(q.name, {})[key] = {"name": key, "state": state}
    entries = {
        name: {
            "interface-id": name,
            "state": {"interface-id": name},
            "output": {"queues": {"queue": Keyed("name", found)}},
        }
        for name, found in per_port.items()
    }
    return {QOS_CONTAINER: {"interfaces": {"interface": Keyed("interface-id", entries)}}}


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


def bare_name(name: str) -> str:
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


def select(tree: Mapping[str, Any], elems: Sequence[Any], absent_ok: bool = False) -> list[Match]:
    """The nodes of `tree` that the gnmi PathElems `elems` select (a key `*` selects all).

    Raises PathError: NOT_FOUND for a name the tree does not have (with the
    names it has), INVALID_ARGUMENT for keys where there is no list or a key
    the list does not have. With `absent_ok` a list entry or a name the tree
    lacks selects nothing instead (the telemetry of one sample holds only the
    ports and jobs that moved; the path was checked against the whole tree).
    """
    matches: list[tuple[tuple[Elem, ...], Any]] = [((), tree)]
    for elem in elems:
        name = bare_name(elem.name)
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
                if absent_ok:
                    continue
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
                elif absent_ok:
                    chosen = []
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


def _module(name: str, parent: str | None = None) -> str:
    """The YANG module of a node named `name` under a node of module `parent`."""
    if name in CASSINI_COUNTER_LEAVES or name in CASSINI_QUEUE_LEAVES:
        return CASSINI_MODULE
    if name == QOS_CONTAINER or parent == QOS_MODULE:
        return QOS_MODULE  # everything below /qos but our own leaf
    if name == PORT_ID_LEAF:
        return OPENCONFIG_P4RT
    return OPENCONFIG_INTERFACES


def _path_module(path: Sequence[Elem]) -> str | None:
    """The module of the node a concrete path names (None: the root)."""
    module = None
    for name, _keys in path:
        module = _module(name, module)
    return module


def to_json(value: Any, name: str, ietf: bool, parent_module: str | None) -> Any:
    """A node as JSON data; with ietf, RFC 7951: qualified names, 64-bit counters as strings."""
    module = _module(name, parent_module)
    if isinstance(value, Keyed):
        return [
            to_json(entry, name, ietf, parent_module) for _, entry in sorted(value.entries.items())
        ]
    if isinstance(value, dict):
        out = {}
        for child_name, child in value.items():
            member = child_name
            if ietf and _module(child_name, module) != module:
                member = f"{_module(child_name, module)}:{child_name}"
            out[member] = to_json(child, child_name, ietf, module)
        return out
    if ietf and (name in COUNTER_LEAVES or name in QUEUE_LEAVES):
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
    return to_json(match.value, name, ietf, _path_module(match.path[:-1]))


def set_path(path: Any, elems: Sequence[Elem]) -> None:
    for name, keys in elems:
        elem = path.elem.add(name=name)
        for key, value in keys:
            elem.key[key] = value


def add_updates(into: Any, matches: Sequence[Match], encoding: int) -> None:
    """gnmi.Update messages of matches, added to the repeated field `into`: one per match
    (JSON), one per leaf (PROTO). Built in place: with the pure-Python protobuf (the
    project's before issue 24) a message passed to a constructor is copied, and
    the copies were most of a Get of the testbed."""
    if encoding == gnmi_pb2.PROTO:
        for match in matches:
            for leaf in leaves(match):
                update = into.add()
                set_path(update.path, leaf.path)
                if isinstance(leaf.value, str):
                    update.val.string_val = leaf.value
                else:
                    update.val.uint_val = int(leaf.value)
        return
    ietf = encoding == gnmi_pb2.JSON_IETF
    for match in matches:
        text = json.dumps(_json_value(match, ietf)).encode()
        update = into.add()
        set_path(update.path, match.path)
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
