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

from controlplane.gnmi import (
    JOB_LEAVES,
    QUEUE_LEAF,
    SAMPLE_LEAVES,
    TELEMETRY_MIN_SAMPLE_NS,
    TELEMETRY_ROOT,
)
from topologies.port_names import port_name

from .gnmi_tree import Keyed, Match, PathError, bare_name, notification, select
from .sample_ring import Sample, SampleReader, SampleRing
from .state import JOB_CLASSES


def is_telemetry(elems: Sequence[Any]) -> bool:
    """Does a path start at /cassini (the telemetry tree)?"""
    return bool(elems) and bare_name(elems[0].name) == TELEMETRY_ROOT[0]


def _port_entry(name: str, depth: int, jobs: Mapping[str, Any]) -> dict[str, Any]:
    return {"name": name, "state": {QUEUE_LEAF: depth}, "job": Keyed("class", jobs)}


def _job_entry(job_class: int, values: Sequence[int]) -> dict[str, Any]:
    return {"class": job_class, "state": dict(zip(JOB_LEAVES, values, strict=True))}


def _wrap(state: Mapping[str, int], ports: Mapping[str, Any]) -> dict[str, Any]:
    root, container = TELEMETRY_ROOT
    return {root: {container: {"state": dict(state), "port": Keyed("name", ports)}}}


def telemetry_tree(sample: Sample, names: Mapping[int, str], lost: int) -> dict[str, Any]:
    """One sample as served: the ports that sent or queued in it, the classes that sent.

    >>> import numpy as np
    >>> z = np.zeros((1, JOB_CLASSES), dtype=np.int64)
    >>> p, b = z.copy(), z.copy(); p[0, 2], b[0, 2] = 3, 4500
    >>> s = Sample(7, 1.0, 2.0, 1, (5,), p, b, z, np.array([12]))
    >>> t = telemetry_tree(s, {5: "tor1-eth1"}, 0)["cassini"]["telemetry"]
    >>> t["state"], t["port"].entries["tor1-eth1"]["job"].entries["2"]["state"]
    ({'sample': 7, 'intervals': 1, 'samples-lost': 0}, {'packets': 3, 'bytes': 4500, 'ce-marks': 0})
    """
    ports: dict[str, Any] = {}
    for i, port in enumerate(sample.ports):
        sent = sample.packets[i]
        depth = int(sample.max_depth_cells[i])
        if depth == 0 and not sent.any():
            continue
        jobs = {
            str(c): _job_entry(
                c, (int(sent[c]), int(sample.bytes[i, c]), int(sample.ce_marks[i, c]))
            )
            for c in range(JOB_CLASSES)
            if sent[c]
        }
        name = port_name(port, names)
        ports[name] = _port_entry(name, depth, jobs)
    state = dict(zip(SAMPLE_LEAVES, (sample.number, sample.intervals, lost), strict=True))
    return _wrap(state, ports)


def telemetry_schema(ports: Sequence[int], names: Mapping[int, str]) -> dict[str, Any]:
    """The tree with every port and class (zeros): what a path is checked against."""
    jobs = {str(c): _job_entry(c, (0,) * len(JOB_LEAVES)) for c in range(JOB_CLASSES)}
    entries = {port_name(p, names): _port_entry(port_name(p, names), 0, jobs) for p in ports}
    return _wrap(dict.fromkeys(SAMPLE_LEAVES, 0), entries)


def check_interval(interval_ns: int) -> int:
    """A telemetry subscription's sample interval: 0 means the finest (10 ms); below it is
    INVALID_ARGUMENT (the ring has nothing finer)."""
    if interval_ns == 0:
        return TELEMETRY_MIN_SAMPLE_NS
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
            if match.path[: len(state_path)] != state_path:  # the state leaves are in already
                matches.append(match)
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
    `ended` (make the reader before telling the client the subscription is in place).

    Runs in the Subscribe handler's thread: a client that reads slowly holds
    this generator at its `yield`, never the packet loop, which goes on
    overwriting the ring; the reader then finds samples gone and says so.
    """
    due = time.monotonic_ns()
    while not ended.is_set() and active():
        due += interval_ns
        delay = (due - time.monotonic_ns()) / 1e9
        if delay > 0 and ended.wait(delay):
            return
        due = max(due, time.monotonic_ns() - interval_ns)  # late: no burst of catch-ups
        got = reader.read()
        lost = got.lost
        for sample in got.samples:
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
