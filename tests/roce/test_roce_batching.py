"""The RoCE loop batches (`_roce.transfer`): one wake-up sends every packet due within
its pacing quantum and reads everything queued, so a worker is woken far less than once
per packet, and it still never runs faster than the NIC's line rate (beyond one
quantum's head start)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from emulation.jobs.ring import Ring
from emulation.jobs.roce_links import PAYLOAD, RoceLinks
from tests.roce.test_roce_links import NIC_GBPS, SCALE, run_workers

STEP_BYTES = 400_000  # ~390 packets each way, ~33 ms at the line rate
QUANTUM_S = 0.0005  # PACING_QUANTUM_S in _roce.c


def wakeups() -> int:
    """This thread's voluntary context switches: each is one sleep the loop woke from."""
    status = Path(f"/proc/self/task/{threading.get_native_id()}/status").read_text()
    line = next(x for x in status.splitlines() if x.startswith("voluntary_ctxt_switches"))
    return int(line.split()[1])


def test_a_relay_wakes_far_less_than_once_per_packet_and_keeps_the_line_rate() -> None:
    def body(ring: Ring, roce: RoceLinks) -> tuple[int, float, int]:
        before, started = wakeups(), time.monotonic()
        got, _ = roce.relay([STEP_BYTES], [STEP_BYTES])
        elapsed, woke = time.monotonic() - started, wakeups() - before
        counts = roce.take()
        assert (counts.timeouts, counts.retransmits) == (0, 0)
        return got, elapsed, woke

    packets = -(-(STEP_BYTES + 1) // PAYLOAD)  # each way, header byte included
    line_bps = 0.97 * NIC_GBPS * 1e9 * SCALE
    for got, elapsed, woke in run_workers(2, body):
        assert got == STEP_BYTES
        # payload bits alone at the line rate, less one quantum's head start (and two
        # packets of catch-up credit)
        assert elapsed >= STEP_BYTES * 8 / line_bps - QUANTUM_S - 2 * PAYLOAD * 8 / line_bps
        # each worker sends `packets` and receives `packets`: once per packet (what the
        # loop did before batching) would be >= `packets` wake-ups
        assert woke < 0.5 * packets, (woke, packets)
        print(f"{woke} wake-ups for {packets} packets each way in {elapsed * 1e3:.1f} ms")
