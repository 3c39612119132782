"""One software P4Runtime switch: a gRPC service here, the packet loop in its own process.

The service (this process, its own threads) checks each Write against the
pipeline and sends what it changes to the packet loop (`datapath_process`),
which applies it between packet batches; counters and per-port statistics
come back through shared memory. The loop never waits for the service, so
a large Write or Read cannot stall forwarding. Starting opens the port
sockets first (in the loop), so a missing interface fails before anything
else is running; stopping undoes everything, in reverse order.
"""

from __future__ import annotations

import logging
import re
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np

from emulation.housekeeping.run_files import InterfaceLocks
from topologies.errors import UserInputError, did_you_mean
from topologies.port_names import port_name

from .datapath_process import DatapathProcess, DatapathSpec
from .port_stats import Lateness, PortCounters, QueueCounters, port_counters, queue_counters
from .ports import check_interfaces
from .shared_counters import checked_counter_names
from .state import Change, ForwardChange, WredChange, WredProfile
from .tm_config import TmConfig

if TYPE_CHECKING:
    from controlplane.tls import ServerTlsSettings

log = logging.getLogger(__name__)


class SoftwareSwitch:
    """`SoftwareSwitch(1, {1: "veth1", 2: "veth2"}, "127.0.0.1:9559", TmConfig())`.

    grpc_address None runs the packet path alone: entries are then written
    with `apply` (or `forward`/`wred`), as benchmarks and tests of the
    datapath do.
    """

    def __init__(
        self,
        device_id: int,
        ports: Mapping[int, str],
        grpc_address: str | None = "127.0.0.1:0",
        tm: TmConfig | None = None,
        seed: int = 0,
        rx_ring: bool = True,
        log_level: int = logging.INFO,
        tls: ServerTlsSettings | None = None,
        fast: bool = True,
        loop_cpu: int | None = None,
        interface_names: Mapping[int, str] | None = None,
    ) -> None:
        self.device_id = device_id
        # The ports' names for controllers (gNMI), from the topology (topologies.port_names).
        self.interface_names = dict(interface_names or {})
        self.loop_cpu = loop_cpu  # the packet loop's one CPU (emulation/housekeeping/cpu_split.py)
        self.fast = fast  # False: the Python reference pipeline instead of the compiled one
        self.port_names = dict(ports)
        self.requested_grpc_address = grpc_address
        self.tm = tm if tm is not None else TmConfig()
        self.seed = seed
        self.rx_ring = rx_ring  # False: one recv() per frame instead of the mmap ring
        self.log_level = log_level
        self.tls = tls  # None: an insecure P4Runtime port
        self.datapath: DatapathProcess | None = None
        self.server: Any = None  # RunningServer of the P4Runtime service
        self._locks: InterfaceLocks | None = None
        self._ports: list[int] = []

    @property
    def grpc_address(self) -> str | None:
        """The address the P4Runtime service listens on (port 0 resolved)."""
        return None if self.server is None else str(self.server.address)

    def start(self) -> SoftwareSwitch:
        try:
            check_interfaces(self.port_names)
            # A second switch on an interface would forward every frame twice: refuse it.
            self._locks = InterfaceLocks(self.port_names.values()).acquire()
            spec = DatapathSpec(
                ports=self.port_names,
                tm=self.tm,
                counter_names=checked_counter_names(),
                seed=self.seed,
                rx_ring=self.rx_ring,
                log_level=self.log_level,
                fast=self.fast,
                cpu=self.loop_cpu,
            )
            for line in self.tm.describe(self.port_names).splitlines():
                log.info("device %d TM: %s", self.device_id, line)
            self.datapath = DatapathProcess(spec).start()
            self._ports = sorted(set(self.port_names) | set(self.tm.cable_peers()))
            if self.requested_grpc_address is not None:
                from .gnmi_telemetry import TelemetrySource
                from .harness_key import harness_key
                from .p4runtime_service import serve

                self.server = serve(
                    self.device_id,
                    self.requested_grpc_address,
                    dataplane=self.datapath,
                    port_counters=self.port_counters,
                    fidelity=self.fidelity_histograms,
                    tls=self.tls,
                    telemetry=TelemetrySource(self.datapath.sample_ring, self.interface_names),
                    set_enabled=self.set_enabled,
                    queue_counters=self.queue_counters,
                    harness_key=harness_key(),
                )
                log.info("device %d: P4Runtime service on %s", self.device_id, self.grpc_address)
        except BaseException:
            self.stop()
            raise
        log.info(
            "device %d: forwarding on %s",
            self.device_id,
            ", ".join(f"{p}@{name}" for p, name in sorted(self.port_names.items())),
        )
        return self

    # --- the packet path, without P4Runtime -------------------------------------------

    def apply(self, changes: Sequence[Change]) -> None:
        """Change the tables as one batch (returns once the packet path sees it)."""
        self._running().apply(changes)

    def forward(self, entries: Mapping[tuple[int, bytes], int]) -> None:
        """Install forwarding entries {(ingress_port, dst_mac): egress_port}."""
        self.apply([ForwardChange(i, mac, out) for (i, mac), out in entries.items()])

    def wred(self, profiles: Mapping[int, WredProfile]) -> None:
        """Install WRED profiles {egress_port: profile}."""
        self.apply([WredChange(port, profile) for port, profile in profiles.items()])

    def counter(self, name: str) -> np.ndarray:
        """A copy of one P4 counter's cells [COUNTER_CELLS, (packets, bytes)]."""
        return self._running().counters([name])[name]

    def stats(self) -> dict[str, dict[int, int]]:
        """Every per-port statistic of the packet path ({name: {port: value}}, see port_stats)."""
        return self.datapath.stats() if self.datapath is not None else {}

    def fidelity(self) -> dict[str, Lateness]:
        """How late frames left against their scheduled departure and how late the loop
        woke up ({port_stats.FIDELITY_NAMES: Lateness})."""
        return self.datapath.fidelity() if self.datapath is not None else {}

    def fidelity_histograms(self) -> dict[str, tuple[tuple[int, ...], float]]:
        """The lateness histograms behind `fidelity()`, as gNMI serves them."""
        return self.datapath.fidelity_histograms() if self.datapath is not None else {}

    def port_counters(self) -> list[PortCounters]:
        """Interface counters of every port (attached and cabled), as gNMI serves them."""
        return port_counters(self.stats(), self.interface_names, self._ports)

    def queue_counters(self) -> list[QueueCounters]:
        """Every egress queue (port, queue class) of every port, as gNMI serves them."""
        stats = self.datapath.class_stats() if self.datapath is not None else {}
        return queue_counters(stats, self.interface_names, self._ports)

    def set_enabled(self, name: str, enabled: bool) -> None:
        """Take the port named `name` (as gNMI names it) down or up: gNMI's config/enabled
        (`gnmi_config`). UserInputError naming the ports for a name there is not."""
        names = {port_name(port, self.interface_names): port for port in self._ports}
        if name not in names:
            raise UserInputError(did_you_mean(name, names, "interface"))
        self._running().set_port_enabled(names[name], enabled)

    def stall(self, seconds: float) -> None:
        """Make the packet loop sleep once for `seconds` (for tests)."""
        self._running().stall(seconds)

    def failure(self) -> str | None:
        """Why the packet loop is gone, if it died; None while it runs."""
        return self.datapath.failure() if self.datapath is not None else None

    def _running(self) -> DatapathProcess:
        if self.datapath is None:
            raise RuntimeError("the switch is not running")
        return self.datapath

    # --- teardown --------------------------------------------------------------------

    def stop(self, grace: float = 0.5) -> None:
        """Stop the gRPC server (RPCs in flight get `grace` s), then the packet loop."""
        if self.server is not None:
            self.server.stop(grace)
            self.server = None
        if self.datapath is not None:
            self.datapath.stop()
            self.datapath = None
        if self._locks is not None:
            self._locks.release()
            self._locks = None

    def __enter__(self) -> SoftwareSwitch:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


# The line `cassini switch serve` logs once it forwards and serves P4Runtime;
# whoever starts it reads the address from this line.
READY_MESSAGE = "ready: device %d, P4Runtime on %s"
READY_PATTERN = re.compile(r"ready: device \d+, P4Runtime on (\S+)")
WATCH_INTERVAL_S = 0.2
# (our choice) RPCs in flight at SIGTERM get this long; shutdown stays under a second.
STOP_GRACE_S = 0.2


def serve_until_stopped(
    device_id: int,
    ports: Mapping[int, str],
    grpc_address: str,
    tm: TmConfig,
    seed: int = 0,
    log_level: int = logging.INFO,
    tls: ServerTlsSettings | None = None,
    loop_cpu: int | None = None,
    interface_names: Mapping[int, str] | None = None,
    on_ready: Callable[[str], None] | None = None,
) -> int:
    """Run a switch until SIGINT/SIGTERM/SIGHUP (0) or until its packet loop dies (1);
    `on_ready` gets the P4Runtime address once it answers (port 0: the bound one).

    Signals only set a flag; teardown happens here, so it is the same for
    both and bounded: the server gets a short grace, the loop a stop message.
    """
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    # SIGHUP too: a closed terminal stops the switch the same way, locks released.
    stopping = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, on_signal) for s in stopping}
    switch = SoftwareSwitch(
        device_id,
        ports,
        grpc_address,
        tm,
        seed=seed,
        log_level=log_level,
        tls=tls,
        loop_cpu=loop_cpu,
        interface_names=interface_names,
    )
    code = 0
    try:
        switch.start()
        log.info(READY_MESSAGE, device_id, switch.grpc_address)
        if on_ready is not None and switch.grpc_address is not None:
            on_ready(switch.grpc_address)
        while not stop.wait(WATCH_INTERVAL_S):
            failure = switch.failure()
            if failure is not None:
                log.error("device %d: %s; stopping the switch", device_id, failure)
                code = 1
                break
        else:
            log.info("stopping")
    finally:
        began, started = time.monotonic(), switch.datapath is not None
        switch.stop(grace=STOP_GRACE_S)
        if started:
            log.info("stopped in %.2f s", time.monotonic() - began)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return code
