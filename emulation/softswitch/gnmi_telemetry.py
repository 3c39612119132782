"""What does a gNMI STREAM of the 10 ms per-job telemetry send, and how?

The packet loop samples per-(port, job class) counts and each port's deepest
queue every 10 ms into a ring in shared memory (`sample_ring`). A STREAM
subscription to a path under `/cassini/telemetry` (the paths are defined in
`controlplane.gnmi`, documented in the package README) gets its own
`SampleReader` and, every `sample_interval` (10 ms at the finest), one
notification per sample written since its last look, stamped with the
sample's wall-clock time. The packet loop never waits for it: a reader that
falls a ring behind (2.56 s) loses samples, and the next notification's
`samples-lost` leaf says how many (their counts are in that notification:
`intervals` says how many 10 ms intervals it covers, so no byte is lost).

A subscription to `/cassini/telemetry/packed` gets the same samples in one
notification each with two bytes leaves instead of a leaf per count
(`packed_notification`, our choice): the per-leaf form of a busy testbed
sample is about 150 updates, which cost its reader more than the switch
takes to make them (the stream then lost samples); the packed form is five
updates made and read with numpy. The layout is `controlplane.job_samples`'s
(`PACKED_CELL_COLUMNS`), which reads it.

Pure: `telemetry_tree` (one sample as a gNMI tree), `telemetry_schema` (every
port and class, to check a path before any data). `stream_samples` is the
loop a Subscribe handler runs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np
from pygnmi.spec.v080 import gnmi_pb2

from controlplane.gnmi import (
    JOB_LEAVES,
    QUEUE_LEAF,
    SAMPLE_LEAVES,
    TELEMETRY_MIN_SAMPLE_NS,
    TELEMETRY_ROOT,
)
from controlplane.job_samples import PACKED, PACKED_CELLS, PACKED_DEPTHS
from topologies.port_names import port_name

from .gnmi_tree import (
    Elem,
    Keyed,
    Match,
    PathError,
    bare_name,
    leaves,
    notification,
    select,
    set_path,
)
from .sample_ring import Sample, SampleReader, SampleRing
from .state import JOB_CLASSES

# The slowest sampling of any path: 2**63 - 1 ns (292 years), gNMI's largest timestamp.
MAX_SAMPLE_NS = 2**63 - 1


def is_telemetry(elems: Sequence[Any]) -> bool:
    """Does a path start at /cassini (the telemetry tree)?"""
    return bool(elems) and bare_name(elems[0].name) == TELEMETRY_ROOT[0]


# (our choice) At 100 samples a second each update costs: no leaf repeats a list's key
# (OpenConfig's name/name; the keys are in every update's path), and a sample leaves
# out the leaves of a port or class that are 0 (a missing leaf is 0; the schema,
# `zeros`, has them all, to check paths against).
def _port_entry(depth: int, jobs: Mapping[str, Any], zeros: bool = False) -> dict[str, Any]:
    state = {QUEUE_LEAF: depth} if depth or zeros else {}
    return {"state": state, "job": Keyed("class", jobs)}


def _job_entry(values: Sequence[int], zeros: bool = False) -> dict[str, Any]:
    return {"state": {k: v for k, v in zip(JOB_LEAVES, values, strict=True) if v or zeros}}


def _wrap(
    state: Mapping[str, int], ports: Mapping[str, Any], packed: bool = False
) -> dict[str, Any]:
    root, container = TELEMETRY_ROOT
    tree: dict[str, Any] = {"state": dict(state), "port": Keyed("name", ports)}
    if packed:  # only in the schema: a path to /packed is checked against it
        tree[PACKED] = {PACKED_CELLS: 0, PACKED_DEPTHS: 0}
    return {root: {container: tree}}


def telemetry_tree(sample: Sample, names: Mapping[int, str], lost: int) -> dict[str, Any]:
    """One sample as served: the ports that sent or queued in it, the classes that sent,
    their leaves that are not 0.

    >>> import numpy as np
    >>> z = np.zeros((1, JOB_CLASSES), dtype=np.int64)
    >>> p, b = z.copy(), z.copy(); p[0, 2], b[0, 2] = 3, 4500
    >>> s = Sample(7, 1.0, 2.0, 1, (5,), p, b, z, np.array([12]))
    >>> t = telemetry_tree(s, {5: "tor1-eth1"}, 0)["cassini"]["telemetry"]
    >>> t["state"], t["port"].entries["tor1-eth1"]["job"].entries["2"]["state"]
    ({'sample': 7, 'intervals': 1, 'samples-lost': 0}, {'packets': 3, 'bytes': 4500})
    """
    ports: dict[str, Any] = {}
    for i, port in enumerate(sample.ports):
        sent = sample.packets[i]
        depth = int(sample.max_depth_cells[i])
        if depth == 0 and not sent.any():
            continue
        jobs = {
            str(c): _job_entry((int(sent[c]), int(sample.bytes[i, c]), int(sample.ce_marks[i, c])))
            for c in range(JOB_CLASSES)
            if sent[c]
        }
        ports[port_name(port, names)] = _port_entry(depth, jobs)
    state = dict(zip(SAMPLE_LEAVES, (sample.number, sample.intervals, lost), strict=True))
    return _wrap(state, ports)


def telemetry_schema(ports: Sequence[int], names: Mapping[int, str]) -> dict[str, Any]:
    """The tree with every port and class (zeros): what a path is checked against."""
    jobs = {str(c): _job_entry((0,) * len(JOB_LEAVES), zeros=True) for c in range(JOB_CLASSES)}
    entries = {port_name(p, names): _port_entry(0, jobs, zeros=True) for p in ports}
    return _wrap(dict.fromkeys(SAMPLE_LEAVES, 0), entries, packed=True)


def check_interval(interval_ns: int) -> int:
    """A telemetry subscription's sample interval: 0 means the finest (10 ms); below it is
    INVALID_ARGUMENT (the ring has nothing finer), and so is above `MAX_SAMPLE_NS`."""
    if interval_ns == 0:
        return TELEMETRY_MIN_SAMPLE_NS
    if interval_ns > MAX_SAMPLE_NS:  # as every other path: 2**64 - 1 failed later, UNKNOWN
        raise PathError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"sample_interval {interval_ns} ns is above this target's maximum "
            f"{MAX_SAMPLE_NS} ns (2**63 - 1)",
        )
    if interval_ns < TELEMETRY_MIN_SAMPLE_NS:
        raise PathError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"sample_interval {interval_ns} ns is below the telemetry's "
            f"{TELEMETRY_MIN_SAMPLE_NS} ns (the packet loop samples every "
            f"{TELEMETRY_MIN_SAMPLE_NS / 1e6:g} ms)",
        )
    return interval_ns


def _state_matches(tree: Mapping[str, Any]) -> list[Match]:
    """The /cassini/telemetry/state leaves: in every notification, whatever the path, so
    a reader always learns of lost samples."""
    root, container = TELEMETRY_ROOT
    state = tree[root][container]["state"]
    path = ((root, ()), (container, ()), ("state", ()))
    return [Match((*path, (leaf, ())), state[leaf]) for leaf in SAMPLE_LEAVES]


def is_packed(elems: Sequence[Any]) -> bool:
    """Does a path ask for the packed form (/cassini/telemetry/packed or a leaf of it)?"""
    return len(elems) >= 3 and bare_name(elems[2].name) == PACKED


def check_packed(paths: Sequence[Sequence[Any]], encoding: int) -> bool:
    """Is a subscription's list of paths the packed form (then alone and as typed scalars,
    `encoding` being what the service answers with: its leaves are bytes, one form per
    stream)? INVALID_ARGUMENT if not."""
    packed = [is_packed(elems) for elems in paths]
    if not any(packed):
        return False
    if not all(packed):
        raise PathError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"/cassini/telemetry/{PACKED} is served in a subscription list of its own",
        )
    if encoding != gnmi_pb2.PROTO:
        raise PathError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"/cassini/telemetry/{PACKED} is served as typed scalars only (PROTO or JSON: "
            "its leaves are bytes), not in JSON_IETF",
        )
    return True


def whole_tree(paths: Sequence[Sequence[Any]]) -> bool:
    """Does a subscription select everything (/cassini or /cassini/telemetry)?"""
    return all(len(elems) <= 2 and not any(e.key for e in elems) for elems in paths)


def _varint(n: int) -> bytes:
    """Protobuf's base-128 varint of a non-negative integer.

    >>> _varint(1), _varint(300)
    (b'\\x01', b'\\xac\\x02')
    """
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        if not n:
            out.append(low)
            return bytes(out)
        out.append(low | 0x80)


def _tag(message: Any, field: str, wire: int) -> bytes:
    """The key of `field` of a message class: field number and wire type (0 varint,
    2 length-delimited), from the descriptor, so the stubs stay the one source."""
    return _varint(message.DESCRIPTOR.fields_by_name[field].number << 3 | wire)


_TIMESTAMP = _tag(gnmi_pb2.Notification, "timestamp", 0)
_PREFIX = _tag(gnmi_pb2.Notification, "prefix", 2)
_UPDATE = _tag(gnmi_pb2.Notification, "update", 2)
_PATH = _tag(gnmi_pb2.Update, "path", 2)
_VAL = _tag(gnmi_pb2.Update, "val", 2)
_UINT = _tag(gnmi_pb2.TypedValue, "uint_val", 0)
_BYTES = _tag(gnmi_pb2.TypedValue, "bytes_val", 2)


def _field(tag: bytes, payload: bytes) -> bytes:
    return tag + _varint(len(payload)) + payload


def fast_notification(
    sample: Sample,
    names: Mapping[int, str],
    lost: int,
    prefix: Any,
    cache: dict[Any, tuple[bytes, ...]],
) -> Any:
    """`sample_notification` of the whole tree in PROTO, encoded from the sample's non-zero
    cells with each leaf's path serialised once per subscription (`cache`) and the
    message parsed once: the tree, `select` and messages built field by field cost
    2.1 ms for a sample of 20 busy ports (0.2 of a core at 100 samples a second).
    Tested equal to `sample_notification`."""
    root: tuple[Elem, ...] = tuple((name, ()) for name in TELEMETRY_ROOT)
    parts = [_TIMESTAMP + _varint(round(sample.wall_s * 1e9))]
    if prefix is not None and (prefix.target or prefix.origin):
        head = gnmi_pb2.Path(target=prefix.target, origin=prefix.origin)
        parts.append(_field(_PREFIX, head.SerializeToString()))

    def paths(key: Any, leaf_paths: Callable[[], Sequence[Sequence[Elem]]]) -> tuple[bytes, ...]:
        """The serialised path fields of a group of leaves, made once per subscription."""
        found = cache.get(key)
        if found is None:
            made = []
            for elems in leaf_paths():
                message = gnmi_pb2.Path()
                set_path(message, elems)
                made.append(_field(_PATH, message.SerializeToString()))
            found = cache[key] = tuple(made)
        return found

    def add(path: bytes, value: int) -> None:
        parts.append(_field(_UPDATE, path + _field(_VAL, _UINT + _varint(value))))

    state = paths("state", lambda: [(*root, ("state", ()), (leaf, ())) for leaf in SAMPLE_LEAVES])
    for path, value in zip(state, (sample.number, sample.intervals, lost), strict=True):
        add(path, int(value))
    rows, classes = np.nonzero(sample.packets)
    depths = sample.max_depth_cells
    for i in np.flatnonzero(depths).tolist():

        def depth_path(i: int = i) -> list[tuple[Elem, ...]]:
            port = ("port", (("name", port_name(sample.ports[i], names)),))
            return [(*root, port, ("state", ()), (QUEUE_LEAF, ()))]

        (path,) = paths(i, depth_path)
        add(path, int(depths[i]))
    values = zip(
        sample.packets[rows, classes].tolist(),
        sample.bytes[rows, classes].tolist(),
        sample.ce_marks[rows, classes].tolist(),
        strict=True,
    )
    for i, c, counts in zip(rows.tolist(), classes.tolist(), values, strict=True):

        def job_paths(i: int = i, c: int = c) -> list[tuple[Elem, ...]]:
            port = ("port", (("name", port_name(sample.ports[i], names)),))
            job = ("job", (("class", str(c)),))
            return [(*root, port, job, ("state", ()), (leaf, ())) for leaf in JOB_LEAVES]

        for path, value in zip(paths((i, c), job_paths), counts, strict=True):
            if value:
                add(path, value)
    return gnmi_pb2.Notification.FromString(b"".join(parts))


def _serialised_path(elems: Sequence[Elem]) -> bytes:
    """An Update's path field, serialised."""
    message = gnmi_pb2.Path()
    set_path(message, elems)
    return _field(_PATH, message.SerializeToString())


def packed_paths() -> tuple[bytes, ...]:
    """The serialised paths of a packed notification's leaves: the state leaves, cells,
    depths."""
    root: tuple[Elem, ...] = tuple((name, ()) for name in TELEMETRY_ROOT)
    state = [(*root, ("state", ()), (leaf, ())) for leaf in SAMPLE_LEAVES]
    packed = [(*root, (PACKED, ()), (leaf, ())) for leaf in (PACKED_CELLS, PACKED_DEPTHS)]
    return tuple(_serialised_path(elems) for elems in (*state, *packed))


def packed_bytes(sample: Sample) -> tuple[bytes, bytes]:
    """The two packed leaves of a sample: little-endian int64 rows of (port, class,
    packets, bytes, CE-marked packets) per (port, class) that sent, and of (port,
    deepest queue in cells) per port that queued.

    >>> import numpy as np
    >>> z = np.zeros((2, JOB_CLASSES), dtype=np.int64)
    >>> p, b = z.copy(), z.copy(); p[1, 2], b[1, 2] = 3, 4500
    >>> cells, depths = packed_bytes(Sample(7, 1.0, 2.0, 1, (5, 6), p, b, z, np.array([0, 4])))
    >>> np.frombuffer(cells, "<i8").tolist(), np.frombuffer(depths, "<i8").tolist()
    ([6, 2, 3, 4500, 0], [6, 4])
    """
    ports = np.asarray(sample.ports, dtype=np.int64)
    rows, classes = np.nonzero(sample.packets)
    cells = np.stack(
        (
            ports[rows],
            classes,
            sample.packets[rows, classes],
            sample.bytes[rows, classes],
            sample.ce_marks[rows, classes],
        ),
        axis=1,
    )
    queued = np.flatnonzero(sample.max_depth_cells)
    depths = np.stack((ports[queued], sample.max_depth_cells[queued]), axis=1)
    return cells.astype("<i8").tobytes(), depths.astype("<i8").tobytes()


def packed_notification(sample: Sample, lost: int, prefix: Any, paths: tuple[bytes, ...]) -> Any:
    """The notification of one sample in the packed form (`paths`: `packed_paths()`,
    made once per subscription): the state leaves, then the cells and depths leaves."""
    parts = [_TIMESTAMP + _varint(round(sample.wall_s * 1e9))]
    if prefix is not None and (prefix.target or prefix.origin):
        head = gnmi_pb2.Path(target=prefix.target, origin=prefix.origin)
        parts.append(_field(_PREFIX, head.SerializeToString()))
    for path, value in zip(paths, (sample.number, sample.intervals, lost), strict=False):
        parts.append(_field(_UPDATE, path + _field(_VAL, _UINT + _varint(int(value)))))
    for path, blob in zip(paths[len(SAMPLE_LEAVES) :], packed_bytes(sample), strict=True):
        parts.append(_field(_UPDATE, path + _field(_VAL, _field(_BYTES, blob))))
    return gnmi_pb2.Notification.FromString(b"".join(parts))


def sample_notification(
    sample: Sample,
    names: Mapping[int, str],
    lost: int,
    paths: Sequence[Sequence[Any]],
    encoding: int,
    prefix: Any,
) -> Any:
    """The notification of one sample for a subscription's `paths` (checked already)."""
    tree = telemetry_tree(sample, names, lost)
    matches = _state_matches(tree)
    state_path = matches[0].path[:-1]
    for elems in paths:
        for match in select(tree, elems, absent_ok=True):
            for leaf in leaves(match):  # one update per leaf, the state leaves once
                if leaf.path[: len(state_path)] != state_path:
                    matches.append(leaf)
    return notification(matches, encoding, round(sample.wall_s * 1e9), prefix)


def stream_samples(
    reader: SampleReader,
    names: Mapping[int, str],
    paths: Sequence[Sequence[Any]],
    interval_ns: int,
    encoding: int,
    prefix: Any,
    ended: threading.Event,
    active: Callable[[], bool],
) -> Iterator[Any]:
    """Notifications of every sample `reader` has not read, read every `interval_ns`, until
    `ended` (make the reader before telling the client the subscription is in place);
    a client that closed its side still gets the samples written since the last look
    (a client with a long interval would otherwise miss up to an interval at its end).

    Runs in the Subscribe handler's thread: a client that reads slowly holds
    this generator at its `yield`, never the packet loop, which goes on
    overwriting the ring; the reader then finds samples gone and says so.
    """
    packed = packed_paths() if check_packed(paths, encoding) else None
    fast = encoding == gnmi_pb2.PROTO and whole_tree(paths)
    cache: dict[Any, tuple[bytes, ...]] = {}  # serialised leaf paths of this subscription
    due = time.monotonic_ns()
    last = False
    while not last and active():
        due += interval_ns
        delay = (due - time.monotonic_ns()) / 1e9
        last = ended.wait(delay) if delay > 0 else ended.is_set()
        if last and not active():  # cancelled: nobody to send to
            return
        due = max(due, time.monotonic_ns() - interval_ns)  # late: no burst of catch-ups
        got = reader.read()
        lost = got.lost
        for sample in got.samples:
            if packed is not None:
                yield packed_notification(sample, lost, prefix, packed)
            elif fast:
                yield fast_notification(sample, names, lost, prefix, cache)
            else:
                yield sample_notification(sample, names, lost, paths, encoding, prefix)
            lost = 0
        if lost:  # every sample of this look was overwritten: say so without data
            root, container = TELEMETRY_ROOT
            path = ((root, ()), (container, ()), ("state", ()), ("samples-lost", ()))
            yield notification([Match(path, lost)], encoding, time.time_ns(), prefix)


@dataclass(frozen=True)
class TelemetrySource:
    """Where a telemetry STREAM reads: the sample ring (asked for when a subscription
    opens) and the ports' names for controllers."""

    ring: Callable[[], SampleRing]
    names: Mapping[int, str]
