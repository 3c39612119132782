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
from typing import Protocol

import numpy as np

# One counter cell per port; P4Info declares 512 (bit<9> ports).
COUNTER_CELLS = 512


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
    # counter name from the P4Info -> int64 array [COUNTER_CELLS, 2] of (packets, bytes).
    counters: dict[str, np.ndarray] = field(default_factory=dict)
    # Held by writers that change several entries at once (a batched Write).
    write_lock: threading.Lock = field(default_factory=threading.Lock)

    def counter(self, name: str) -> np.ndarray:
        """The array of a counter, created on first use."""
        arr = self.counters.get(name)
        if arr is None:
            arr = np.zeros((COUNTER_CELLS, 2), dtype=np.int64)
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
class CounterChange:
    """Set cell `index` of a counter (every cell below `size` when index is None)."""

    counter: str
    index: int | None
    size: int
    packets: int
    byte_count: int


@dataclass(frozen=True)
class ClearTables:
    """Empty both tables (a new pipeline); zero every counter too when asked."""

    zero_counters: bool


Change = ForwardChange | WredChange | CounterChange | ClearTables


def apply_changes(state: DataplaneState, changes: Iterable[Change]) -> None:
    """Make `state` reflect `changes`, in order (the caller keeps packets out meanwhile)."""
    for change in changes:
        if isinstance(change, ForwardChange):
            key = (change.ingress_port, change.dst_mac)
            if change.egress_port is None:
                state.forward.pop(key, None)
            else:
                state.forward[key] = change.egress_port
        elif isinstance(change, WredChange):
            if change.profile is None:
                state.wred.pop(change.egress_port, None)
            else:
                state.wred[change.egress_port] = change.profile
        elif isinstance(change, CounterChange):
            cells = state.counter(change.counter)
            value = (change.packets, change.byte_count)
            if change.index is None:
                cells[: change.size] = value
            else:
                cells[change.index] = value
        else:
            state.forward.clear()
            state.wred.clear()
            if change.zero_counters:
                for cells in state.counters.values():
                    cells[:] = 0


class Dataplane(Protocol):
    """Where the P4Runtime service sends its changes and reads its counters."""

    def apply(self, changes: Sequence[Change]) -> None:
        """Apply a batch as one step; return when the packet path sees it."""

    def counters(self, names: Iterable[str]) -> dict[str, np.ndarray]:
        """Copies of counter arrays [COUNTER_CELLS, 2], all taken at one instant."""


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
