"""What the software target's P4Runtime service writes and its packet path reads.

The packet path owns a `DataplaneState`: plain dicts keyed by bytes and ints
keep the per-packet lookup to one hash probe, and counters are int64 arrays.
The P4Runtime service never writes those dicts itself: it turns each Write
into a list of `Change`s and hands the whole list to a `Dataplane`, which
applies it between two packet batches (so the packet path sees a batch
either not at all or whole) and returns once it is applied. `LocalDataplane`
does that in the calling process; the packet loop in its own process
(`datapath_process.py`) does it on its side of a pipe.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import numpy as np

from controlplane.job_classes import JOB_CLASSES
from controlplane.p4names import JOB_COUNTERS

Key = TypeVar("Key", int, bytes)

# One counter cell per port; P4Info declares 512 (bit<9> ports).
COUNTER_CELLS = 512
# The job counters have a cell per (port, job class), at port * JOB_CLASSES + class.
JOB_COUNTER_CELLS = COUNTER_CELLS * JOB_CLASSES


def counter_cells(name: str) -> int:
    """How many cells this target keeps for a counter (the P4Info's size, checked at push)."""
    return JOB_COUNTER_CELLS if name in JOB_COUNTERS else COUNTER_CELLS


def socket_key(address: int, port: int) -> int:
    """The key of a worker's socket in the job-class tables: IPv4 address << 16 | L4 port.

    >>> hex(socket_key(0x0A000001, 47000))
    '0xa000001b798'
    """
    return address << 16 | port


@dataclass(frozen=True)
class WredProfile:
    """WRED/ECN thresholds of one egress port, in cells; max_prob in percent."""

    min_cells: int
    max_cells: int
    max_prob_percent: int


@dataclass
class DataplaneState:
    """Installed table entries and counter arrays of one device."""

    # (ingress_port, dst_mac as 6 bytes) -> egress_port. Missing key: drop.
    forward: dict[tuple[int, bytes], int] = field(default_factory=dict)
    # egress_port -> WRED profile. Missing key: no marking.
    wred: dict[int, WredProfile] = field(default_factory=dict)
    # socket_key(address, port) -> job class, looked up by a packet's destination, then
    # by its source (job_by_dst, job_by_src). Missing in both: class 0.
    job_by_dst: dict[int, int] = field(default_factory=dict)
    job_by_src: dict[int, int] = field(default_factory=dict)
    # A packet's queue class: by flow_key(frame's 5-tuple) in queue_by_flow, else by
    # its DSCP in queue_by_dscp (queue_class_by_flow, queue_class). Missing: class 0.
    queue_by_dscp: dict[int, int] = field(default_factory=dict)
    queue_by_flow: dict[bytes, int] = field(default_factory=dict)
    # counter name from the P4Info -> int64 array [counter_cells(name), 2] of (packets, bytes).
    counters: dict[str, np.ndarray] = field(default_factory=dict)
    # Held by writers that change several entries at once (a batched Write).
    write_lock: threading.Lock = field(default_factory=threading.Lock)

    def counter(self, name: str) -> np.ndarray:
        """The array of a counter, created on first use."""
        arr = self.counters.get(name)
        if arr is None:
            arr = np.zeros((counter_cells(name), 2), dtype=np.int64)
            self.counters[name] = arr
        return arr


@dataclass(frozen=True)
class ForwardChange:
    """forward[(ingress_port, dst_mac)] = egress_port, or removed when egress_port is None."""

    ingress_port: int
    dst_mac: bytes
    egress_port: int | None


@dataclass(frozen=True)
class WredChange:
    """wred[egress_port] = profile, or removed when profile is None."""

    egress_port: int
    profile: WredProfile | None


@dataclass(frozen=True)
class JobClassChange:
    """job_by_src (by_source) or job_by_dst [socket key] = job_class, or removed when None."""

    by_source: bool
    key: int
    job_class: int | None


def flow_key(src_addr: int, dst_addr: int, protocol: int, src_port: int, dst_port: int) -> bytes:
    """queue_by_flow's key: the 13 bytes source, destination, protocol, ports, as a
    frame carries them (the packet path slices them out of the frame).

    >>> flow_key(0x0A000001, 0x0A000002, 17, 4791, 4791).hex()
    '0a0000010a0000021112b712b7'
    """
    return (
        src_addr.to_bytes(4, "big")
        + dst_addr.to_bytes(4, "big")
        + bytes((protocol,))
        + src_port.to_bytes(2, "big")
        + dst_port.to_bytes(2, "big")
    )


@dataclass(frozen=True)
class QueueClassChange:
    """queue_by_flow (by_flow, key from flow_key) or queue_by_dscp [key] = class, or
    removed when None."""

    by_flow: bool
    key: int | bytes
    queue_class: int | None


@dataclass(frozen=True)
class CounterChange:
    """Set cell `index` of a counter (every cell below `size` when index is None)."""

    counter: str
    index: int | None
    size: int
    packets: int
    byte_count: int


@dataclass(frozen=True)
class ClearTables:
    """Empty every table (a new pipeline); zero every counter too when asked."""

    zero_counters: bool


Change = (
    ForwardChange | WredChange | JobClassChange | QueueClassChange | CounterChange | ClearTables
)


@dataclass
class ChangeBatch:
    """A batch of changes reduced to what it leaves behind, in the form a packet loop
    applies fastest: a 3,000-entry Write becomes one dict.update (0.2 ms) instead of
    3,000 dataclasses to unpickle and dispatch (5 ms the loop could not forward in).

    Applying it equals applying the changes in order.
    """

    clear: bool = False  # empty every table first
    zero_counters: bool = False  # ... and zero every counter
    forward_set: dict[tuple[int, bytes], int] = field(default_factory=dict)
    forward_delete: set[tuple[int, bytes]] = field(default_factory=set)
    wred_set: dict[int, WredProfile] = field(default_factory=dict)
    wred_delete: set[int] = field(default_factory=set)
    # (job_by_dst, job_by_src): keys set and keys removed
    job_set: tuple[dict[int, int], dict[int, int]] = field(default_factory=lambda: ({}, {}))
    job_delete: tuple[set[int], set[int]] = field(default_factory=lambda: (set(), set()))
    # (queue_by_dscp, queue_by_flow): keys set and keys removed
    queue_set: tuple[dict[int, int], dict[bytes, int]] = field(default_factory=lambda: ({}, {}))
    queue_delete: tuple[set[int], set[bytes]] = field(default_factory=lambda: (set(), set()))
    counters: list[CounterChange] = field(default_factory=list)  # in order


def reduce_changes(changes: Iterable[Change]) -> ChangeBatch:
    """The ChangeBatch that leaves the state as applying `changes` in order would."""
    batch = ChangeBatch()
    for change in changes:
        if isinstance(change, ForwardChange):
            key = (change.ingress_port, change.dst_mac)
            if change.egress_port is None:
                batch.forward_set.pop(key, None)
                batch.forward_delete.add(key)
            else:
                batch.forward_delete.discard(key)
                batch.forward_set[key] = change.egress_port
        elif isinstance(change, WredChange):
            if change.profile is None:
                batch.wred_set.pop(change.egress_port, None)
                batch.wred_delete.add(change.egress_port)
            else:
                batch.wred_delete.discard(change.egress_port)
                batch.wred_set[change.egress_port] = change.profile
        elif isinstance(change, JobClassChange):
            job_set = batch.job_set[change.by_source]
            job_delete = batch.job_delete[change.by_source]
            if change.job_class is None:
                job_set.pop(change.key, None)
                job_delete.add(change.key)
            else:
                job_delete.discard(change.key)
                job_set[change.key] = change.job_class
        elif isinstance(change, QueueClassChange):
            if isinstance(change.key, bytes):
                _note(batch.queue_set[1], batch.queue_delete[1], change.key, change.queue_class)
            else:
                _note(batch.queue_set[0], batch.queue_delete[0], change.key, change.queue_class)
        elif isinstance(change, CounterChange):
            batch.counters.append(change)
        else:  # the tables' changes before a clear are moot; counters' only if it zeroes
            kept = [] if change.zero_counters else batch.counters
            zero = change.zero_counters or batch.zero_counters
            batch = ChangeBatch(clear=True, zero_counters=zero, counters=kept)
    return batch


def _note(keys_set: dict[Key, int], keys_deleted: set[Key], key: Key, value: int | None) -> None:
    """Record `key` set to `value`, or deleted when None, in a batch's pair of sets."""
    if value is None:
        keys_set.pop(key, None)
        keys_deleted.add(key)
    else:
        keys_deleted.discard(key)
        keys_set[key] = value


def apply_batch(state: DataplaneState, batch: ChangeBatch) -> None:
    """Make `state` reflect a reduced batch (the caller keeps packets out meanwhile)."""
    if batch.clear:
        state.forward.clear()
        state.wred.clear()
        state.job_by_dst.clear()
        state.job_by_src.clear()
        state.queue_by_dscp.clear()
        state.queue_by_flow.clear()
        if batch.zero_counters:
            for cells in state.counters.values():
                cells[:] = 0
    forward = state.forward
    for key in batch.forward_delete:
        forward.pop(key, None)
    forward.update(batch.forward_set)
    wred = state.wred
    for port in batch.wred_delete:
        wred.pop(port, None)
    wred.update(batch.wred_set)
    for table, keys_set, keys_deleted in zip(
        (state.job_by_dst, state.job_by_src), batch.job_set, batch.job_delete, strict=True
    ):
        for socket in keys_deleted:
            table.pop(socket, None)
        table.update(keys_set)
    for dscp in batch.queue_delete[0]:
        state.queue_by_dscp.pop(dscp, None)
    state.queue_by_dscp.update(batch.queue_set[0])
    for flow in batch.queue_delete[1]:
        state.queue_by_flow.pop(flow, None)
    state.queue_by_flow.update(batch.queue_set[1])
    for change in batch.counters:
        cells = state.counter(change.counter)
        value = (change.packets, change.byte_count)
        if change.index is None:
            cells[: change.size] = value
        else:
            cells[change.index] = value


def apply_changes(state: DataplaneState, changes: Iterable[Change]) -> None:
    """Make `state` reflect `changes`, in order (the caller keeps packets out meanwhile)."""
    apply_batch(state, reduce_changes(changes))


class Dataplane(Protocol):
    """Where the P4Runtime service sends its changes and reads its counters."""

    def apply(self, changes: Sequence[Change]) -> None:
        """Apply a batch as one step; return when the packet path sees it."""

    def counters(self, names: Iterable[str]) -> dict[str, np.ndarray]:
        """Copies of counter arrays [counter_cells(name), 2], all taken at one instant."""


class LocalDataplane:
    """A Dataplane over a DataplaneState in this process (the service alone, or a
    packet loop running as a thread of it)."""

    def __init__(self, state: DataplaneState | None = None) -> None:
        self.state = state if state is not None else DataplaneState()

    def apply(self, changes: Sequence[Change]) -> None:
        with self.state.write_lock:
            apply_changes(self.state, changes)

    def counters(self, names: Iterable[str]) -> dict[str, np.ndarray]:
        with self.state.write_lock:
            return {name: self.state.counter(name).copy() for name in names}
