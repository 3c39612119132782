"""What the software target's P4Runtime service writes and its packet path reads.

The gRPC service (many threads) owns the writes; the packet path (one thread)
only reads the tables and bumps the counters. Plain dicts keyed by bytes and
ints keep the per-packet lookup to one hash probe; replacing a dict entry is
atomic under the GIL, so readers never see a half-written entry.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

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
