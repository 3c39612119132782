"""Reading the switch's port counters in tests: increments once the datapath has settled."""

from __future__ import annotations

import time

from controlplane.session import P4RuntimeSession
from controlplane.telemetry import PortDelta, Snapshot, deltas


def snapshot(session: P4RuntimeSession) -> Snapshot:
    return Snapshot.of(time.monotonic(), session.read_counters())


def settled_deltas(
    session: P4RuntimeSession, before: Snapshot, *, rx_packets: int = 0, timeout_s: float = 5.0
) -> list[PortDelta]:
    """Counter increments once they stop moving: unchanged over three reads 30 ms apart.

    rx_packets: keep waiting (up to timeout_s) until the ports have received at least
    this many in all: on a loaded machine the switch's loop can stall for longer than
    one read's gap between two frames.
    """
    deadline = time.monotonic() + timeout_s
    last = snapshot(session)
    quiet = 0
    while time.monotonic() < deadline and quiet < 3:
        time.sleep(0.03)
        now = snapshot(session)
        enough = sum(d.rx_packets for d in deltas(before, now)) >= rx_packets
        quiet = quiet + 1 if now.cells == last.cells and enough else 0
        last = now
    return deltas(before, last)
