"""One software P4Runtime switch: gRPC service and packet path on one state.

The service (its own threads) writes table entries into the DataplaneState;
the datapath thread reads them and bumps the counters the service reads back.
Starting opens the port sockets first, so a missing interface fails before
anything else is running; stopping undoes everything, in reverse order.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from .datapath import Datapath, Pipeline
from .port_stats import PortCounters, port_counters
from .ports import PortSocket, open_ports
from .state import DataplaneState
from .tm_config import TmConfig

log = logging.getLogger(__name__)


class SoftwareSwitch:
    """`SoftwareSwitch(1, {1: "veth1", 2: "veth2"}, "127.0.0.1:9559", TmConfig())`.

    grpc_address None runs the packet path alone (entries written straight
    into `state`), which benchmarks and tests of the datapath use.
    """

    def __init__(
        self,
        device_id: int,
        ports: Mapping[int, str],
        grpc_address: str | None = "127.0.0.1:0",
        tm: TmConfig | None = None,
        seed: int = 0,
        state: DataplaneState | None = None,
        rx_ring: bool = True,
    ) -> None:
        self.device_id = device_id
        self.port_names = dict(ports)
        self.requested_grpc_address = grpc_address
        self.tm = tm if tm is not None else TmConfig()
        self.seed = seed
        self.rx_ring = rx_ring  # False: one recv() per frame instead of the mmap ring
        self.state = state if state is not None else DataplaneState()
        self.pipeline: Pipeline | None = None
        self.datapath: Datapath | None = None
        self.server: Any = None  # RunningServer of the P4Runtime service
        self._sockets: list[PortSocket] = []

    @property
    def grpc_address(self) -> str | None:
        """The address the P4Runtime service listens on (port 0 resolved)."""
        return None if self.server is None else str(self.server.address)

    def start(self) -> SoftwareSwitch:
        try:
            self._sockets = open_ports(self.port_names, use_ring=self.rx_ring)
            macs = {s.port: s.mac for s in self._sockets}
            self.pipeline = Pipeline(
                self.state, self.tm, self.port_names, seed=self.seed, port_macs=macs
            )
            for line in self.tm.describe(self.port_names).splitlines():
                log.info("device %d TM: %s", self.device_id, line)
            if self.requested_grpc_address is not None:
                from .p4runtime_service import serve

                self.server = serve(
                    self.device_id,
                    self.requested_grpc_address,
                    self.state,
                    port_counters=self.port_counters,
                )
                log.info("device %d: P4Runtime service on %s", self.device_id, self.grpc_address)
            self.datapath = Datapath(self.pipeline, self._sockets)
            self.datapath.start()
        except BaseException:
            self.stop()
            raise
        log.info(
            "device %d: forwarding on %s",
            self.device_id,
            ", ".join(f"{p}@{name}" for p, name in sorted(self.port_names.items())),
        )
        return self

    def stats(self) -> dict[str, dict[int, int]]:
        """Every per-port statistic of the packet path ({name: {port: value}}, see port_stats)."""
        if self.pipeline is None:
            return {}
        return self.pipeline.port_stats()

    def port_counters(self) -> list[PortCounters]:
        """Interface counters of every port (attached and cabled), as gNMI serves them."""
        if self.pipeline is None:
            return []
        return port_counters(self.stats(), self.port_names, self.pipeline.ports)

    def stop(self) -> None:
        """Stop the packet loop, the gRPC server, and close the sockets (idempotent)."""
        if self.datapath is not None:
            self.datapath.stop()
            self.datapath = None
        if self.server is not None:
            self.server.stop()
            self.server = None
        for port_socket in self._sockets:
            port_socket.close()
        self._sockets = []

    def __enter__(self) -> SoftwareSwitch:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
