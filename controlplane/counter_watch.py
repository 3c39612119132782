"""How are a device's counters watched while something runs on it?

`CounterWatch` is the one poller of `cassini ecn watch` and of the schedule
runner: it opens a P4Runtime session (read-only unless an election id is
given) and, where the target serves it, a gNMI reader of the interface
counters; snapshots only the cells of the chip map's ports (not all 512)
when it has one; runs `telemetry.watch`; and records every interval in its
`TelemetryLog` before handing it on. `run` watches in the caller's thread
(Ctrl-C while watching ends the watch, and what was recorded stays in `log`);
`start` and `stop` watch in a thread of their own, which takes one last
snapshot after a stop and reports a failure in `error` instead of raising.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass

from topologies.chip_mapping import ChipMap

from .gnmi import GnmiReader
from .session import P4RuntimeSession
from .telemetry import Interval, Snapshot, TelemetryLog, snapshot, watch
from .tls import TlsSettings

# (our choice) How often the emulation's runs poll the P4 counters and the gNMI
# interface counters: twice a second, the fastest at which the polls stay under a
# tenth of a core of the switch's service. Measured with the compiled protobuf on
# a 20 s `cassini emulate` of the default testbed (72 interfaces, four-jobs,
# themis; 2-core machine, busy): the service process (not its packet loop) ran at
# a median 0.08 cores polling both every 0.5 s, 0.04 every 1 s, 0.02 with P4
# counters alone every 1 s. On the idle fabric, over idle: 0.054 cores at 0.5 s,
# 0.100 at 0.25 s, 0.249 at 0.1 s.
DEFAULT_POLL_INTERVAL_S = 0.5


@dataclass(frozen=True)
class CounterSource:
    """Where a watch reads: the P4Runtime server and, unless `gnmi` is None, the
    gNMI server of the interface counters."""

    grpc: str
    device_id: int = 1
    gnmi: str | None = None
    election_id: tuple[int, int] | None = None  # None: read-only, no arbitration
    timeout_s: float = 5.0
    tls: TlsSettings | None = None


class CounterWatch:
    """One watch of a device's counters: every interval goes to `log`, `marked`
    and `on_interval`; see the module docstring."""

    def __init__(
        self,
        source: CounterSource,
        interval_s: float,
        chip: ChipMap | None = None,
        on_interval: Callable[[Interval], None] | None = None,
    ) -> None:
        self.source = source
        self.interval_s = interval_s
        self.chip = chip
        self.on_interval = on_interval
        self.log = TelemetryLog()
        self.marked = 0  # ecn_marked packets so far, every port
        self.error: str | None = None  # why a watch in its own thread failed
        self._stop = threading.Event()
        self._ready = threading.Event()  # the first snapshot is in (or the watch failed)
        self._stopped = False  # a stop came: one last snapshot, then the watch ends
        self._thread: threading.Thread | None = None

    def run(self, duration_s: float | None = None) -> None:
        """Watch in this thread for `duration_s` (None: until `stop` or Ctrl-C).
        Connection and gNMI errors are raised."""
        source = self.source
        reader = None
        try:
            if source.gnmi is not None:
                reader = GnmiReader(source.gnmi, source.timeout_s, source.tls)
            ports = self.chip.ports() if self.chip is not None else None  # its cells only
            with P4RuntimeSession.connect(
                source.grpc,
                source.device_id,
                source.election_id,
                timeout=source.timeout_s,
                tls=source.tls,
            ) as session:

                def take() -> Snapshot:
                    snap = snapshot(
                        session, interfaces=reader.read if reader else None, ports=ports
                    )
                    self._ready.set()
                    return snap

                with contextlib.suppress(KeyboardInterrupt):
                    watch(
                        take,
                        self.interval_s,
                        self._record,
                        duration_s,
                        stop=self._stop,
                        chip=self.chip,
                        wait=self._wait,
                    )
        finally:
            self._ready.set()
            if reader is not None:
                reader.close()

    def start(self) -> None:
        """Watch in a thread of its own; returns once the first snapshot is in (or
        the source's timeout passed)."""
        self._thread = threading.Thread(target=self._run_reporting, name="counters", daemon=True)
        self._thread.start()
        self._ready.wait(self.source.timeout_s)

    def stop(self) -> None:
        """End a watch started with `start`, after one last snapshot."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.source.timeout_s + 5)

    def _run_reporting(self) -> None:
        try:
            self.run()
        except Exception as err:  # reported with what the watch served, not raised in a thread
            self.error = f"counter polling failed: {err}"

    def _record(self, done: Interval) -> None:
        self.log.add(done.ports, done.links)
        self.marked += sum(r.ecn_marked_packets for r in done.ports)
        if self.on_interval is not None:
            self.on_interval(done)

    def _wait(self, seconds: float) -> bool:
        """`stop.wait`, except that after a stop one more snapshot is taken first."""
        if self._stopped:
            return True
        self._stopped = self._stop.wait(seconds)
        return False
