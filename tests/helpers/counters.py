"""Reading the switch's port counters in tests: increments once the datapath has settled."""

from __future__ import annotations

import time

from controlplane.session import P4RuntimeSession
from controlplane.telemetry import PortDelta, Snapshot, deltas


def snapshot(session: P4RuntimeSession) -> Snapshot:
    return Snapshot.of(time.monotonic(), session.read_counters())


def settled_deltas(session: P4RuntimeSession, before: Snapshot) -> list[PortDelta]:
    """Counter increments once they stop moving (the datapath flushes within ~1 ms)."""
    last = snapshot(session)
    for _ in range(50):
        time.sleep(0.03)
        now = snapshot(session)
        if now.cells == last.cells:
            break
        last = now
    return deltas(before, last)
