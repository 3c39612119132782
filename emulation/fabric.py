"""How does a topology become a running, programmed emulated fabric?

One source of truth: the chip map (`topologies.chip_mapping`) says which chip
port each server and each loopback cable uses, the topology's links give
every port's rate and every cable's delay, and `controlplane.settings` gives
the thresholds. This module only scales them (`emulation_profile`) and wires
them up (`EmulatedFabric`): one network namespace and veth per server, one
software switch holding all logical switches (cabled ports exist only inside
the switch), programmed over P4Runtime by the real control plane.

Emulation profile (testbed.md: "real time, scaled"): every rate is the
link's Gbps x S; every threshold in cells (WRED min/max, PFC XOFF, queue
limit, shared buffer) is multiplied by one factor F = max(S, floor), where
the floor makes WRED min hold THRESHOLD_FLOOR_PACKETS MTU frames. (our
choice) Flooring the factor rather than each threshold keeps the paper's
ratios (WRED min : max : XOFF = 1 : 2 : 4), so marking still starts before
pausing. Delays are not scaled: time runs at wall-clock speed.
"""

from __future__ import annotations

import json
import logging
import math
import re
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any

from controlplane.settings import ControlPlaneSettings, WredSettings
from topologies.addressing import SERVER_PREFIX_LEN
from topologies.chip_mapping import ChipMap, map_to_chip
from topologies.errors import UserInputError
from topologies.model import Link, Topology

from .netns import NetnsLab, exit_cause
from .target.switch import READY_PATTERN
from .target.tm_config import (
    TOFINO1_BUFFER_CELLS,
    LoopbackCable,
    PfcConfig,
    PortSettings,
    TmConfig,
)

if TYPE_CHECKING:
    import socket

    from controlplane.program import ProgramResult
    from controlplane.session import P4RuntimeSession

    from .target.switch import SoftwareSwitch

log = logging.getLogger(__name__)

# (our choice) Thresholds never fall below 8 MTU frames at WRED min: below that
# a single late wake-up of a Python sender would already look like congestion.
THRESHOLD_FLOOR_PACKETS = 8
MTU_FRAME_BYTES = 1500
# (our choice) 0.001 turns the testbed's 50 Gbps links into 50 Mbit/s, which a
# Python forwarder carries on one core with room for a 2:1 incast.
DEFAULT_SCALE = 0.001
FABRIC_PREFIX_BASE = "cas"
# (our choice) The switch process runs at nice -10. Arrivals carry the kernel's
# receive stamps, so a late read no longer invents a queue, but departures
# still happen when the switch thread runs: a higher priority keeps delivery
# jitter low on a shared machine.
SWITCH_NICE = -10
# How many of the switch's last log lines a failure report quotes.
FAILURE_LOG_LINES = 10


@dataclass(frozen=True)
class EmulationProfile:
    """Everything scaled for one run: what a report must state next to its numbers."""

    scale: float
    threshold_factor: float
    tm: TmConfig
    wred: WredSettings

    def describe(self, chip: ChipMap | None = None) -> str:
        """Human-readable summary, one fact per line."""
        rates = sorted({self.tm.rate_gbps(p) for p in self.tm.ports})
        lines = [
            f"scale S = {self.scale:g} (rates), threshold factor F = {self.threshold_factor:g} "
            f"(floor {THRESHOLD_FLOOR_PACKETS} x {MTU_FRAME_BYTES} B frames at WRED min)",
            "port rates: " + ", ".join(f"{r * 1e3:g} Mbit/s" for r in rates),
            f"WRED min {self.wred.min_cells} / max {self.wred.max_cells} cells of "
            f"{self.tm.cell_bytes} B, max probability {self.wred.max_prob_percent} %",
            (
                f"PFC XOFF {self.tm.pfc.xoff_cells} / XON {self.tm.pfc.xon_cells} cells"
                if self.tm.pfc.enabled
                else "PFC off"
            ),
            f"queue limit {self.tm.default_queue_cells} cells, "
            f"shared buffer {self.tm.buffer_cells} cells",
            f"{len(self.tm.loopback_cables)} loopback cables inside the switch",
        ]
        if chip is not None:
            lines.append(f"{len(chip.server_port)} server ports, {len(chip.ports())} chip ports")
        return "\n".join(lines)


def threshold_factor(scale: float, min_cells: int, cell_bytes: int) -> float:
    """F = max(S, the factor that leaves THRESHOLD_FLOOR_PACKETS frames at WRED min)."""
    _check_scale(scale)
    if min_cells <= 0:
        return scale
    floor_cells = THRESHOLD_FLOOR_PACKETS * math.ceil(MTU_FRAME_BYTES / cell_bytes)
    return max(scale, floor_cells / min_cells)


def _cells(cells: int, factor: float) -> int:
    return max(1, round(cells * factor))


def scaled_wred(wred: WredSettings, factor: float) -> WredSettings:
    """WRED thresholds times the threshold factor; the probability is not a size."""
    return WredSettings(
        min_cells=_cells(wred.min_cells, factor),
        max_cells=_cells(wred.max_cells, factor),
        max_prob_percent=wred.max_prob_percent,
    )


def port_links(topo: Topology, chip: ChipMap) -> dict[int, Link]:
    """The topology link behind every chip port (both ports of a loopback cable share one)."""
    by_ends: dict[tuple[str, str], Link] = {}
    for link in topo.links:
        by_ends[(link.a, link.b)] = link
        by_ends[(link.b, link.a)] = link
    found: dict[int, Link] = {}
    for port in chip.ports():
        ends = (chip.switch_of_port[port], chip.neighbor_of_port[port])
        behind = by_ends.get(ends)
        if behind is None:
            raise UserInputError(f"chip port {port}: no link {ends[0]} - {ends[1]} in the topology")
        found[port] = behind
    return found


def tm_config_for(
    topo: Topology,
    chip: ChipMap,
    scale: float,
    cell_bytes: int = 80,
    pfc: bool = True,
    settings: ControlPlaneSettings | None = None,
) -> TmConfig:
    """The software switch's traffic manager for `topo` at scale S (see the module doc)."""
    settings = settings or ControlPlaneSettings()
    factor = threshold_factor(scale, settings.wred.min_cells, cell_bytes)
    links = port_links(topo, chip)
    ports = {port: PortSettings(rate_gbps=link.gbps * scale) for port, link in links.items()}
    cables = tuple(LoopbackCable(a, b, delay_us=links[a].delay_us) for a, b in chip.loopback_pairs)
    xoff = _cells(settings.pfc.skid_cells, factor)
    return TmConfig(
        cell_bytes=cell_bytes,
        buffer_cells=_cells(TOFINO1_BUFFER_CELLS, factor),
        default_rate_gbps=max(ports[p].rate_gbps or 0.0 for p in ports) if ports else scale,
        default_queue_cells=_cells(settings.queue_cells, factor),
        ports=ports,
        pfc=PfcConfig(
            enabled=pfc and settings.pfc.enabled,
            xoff_cells=max(xoff, 2),
            xon_cells=max(xoff, 2) * 3 // 4,
            priority=settings.pfc.priority,
        ),
        loopback_cables=cables,
    )


def emulation_profile(
    topo: Topology,
    chip: ChipMap,
    scale: float,
    cell_bytes: int = 80,
    pfc: bool = True,
    settings: ControlPlaneSettings | None = None,
) -> EmulationProfile:
    """The TM config and the WRED entries' thresholds for one run, scaled together."""
    settings = settings or ControlPlaneSettings()
    factor = threshold_factor(scale, settings.wred.min_cells, cell_bytes)
    return EmulationProfile(
        scale=scale,
        threshold_factor=factor,
        tm=tm_config_for(topo, chip, scale, cell_bytes, pfc, settings),
        wred=scaled_wred(settings.wred, factor),
    )


def tm_config_to_dict(tm: TmConfig) -> dict[str, Any]:
    """The file form `tm_config_from_dict` reads back (for `cassini switch serve --tm-config`)."""
    return {
        "cell_bytes": tm.cell_bytes,
        "buffer_cells": tm.buffer_cells,
        "default_rate_gbps": tm.default_rate_gbps,
        "default_queue_cells": tm.default_queue_cells,
        "wire_overhead_bytes": tm.wire_overhead_bytes,
        "ports": {
            str(port): {
                key: value
                for key, value in (("rate_gbps", s.rate_gbps), ("queue_cells", s.queue_cells))
                if value is not None
            }
            for port, s in sorted(tm.ports.items())
        },
        "pfc": {
            "enabled": tm.pfc.enabled,
            "xoff_cells": tm.pfc.xoff_cells,
            "xon_cells": tm.pfc.xon_cells,
            "pause_quanta": tm.pfc.pause_quanta,
            "priority": tm.pfc.priority,
        },
        "loopback_cables": [
            {"port_a": c.port_a, "port_b": c.port_b, "delay_us": c.delay_us}
            for c in tm.loopback_cables
        ],
    }


def _check_scale(scale: float) -> None:
    if isinstance(scale, bool) or not isinstance(scale, int | float) or not 0 < scale <= 1:
        raise UserInputError(f"--scale: expected a factor in (0, 1], got {scale!r}")


def describe_exit(
    what: str,
    pid: int,
    returncode: int,
    log_tail: Sequence[str] = (),
    lines: int = FAILURE_LOG_LINES,
) -> str:
    """Why a process ended, in one sentence plus its last log lines.

    A negative return code is a signal (subprocess's convention), named so the
    reader need not look it up:

    >>> print(describe_exit("the switch", 4242, -9, ["ready: device 1"]))
    the switch (pid 4242) was killed by SIGKILL (signal 9); last log lines:
      ready: device 1
    >>> describe_exit("the switch", 4242, 3)
    'the switch (pid 4242) exited with code 3 (no log output)'
    """
    cause = exit_cause(returncode)
    tail = [line for line in log_tail if line.strip()][-lines:] if lines > 0 else []
    if not tail:
        return f"{what} (pid {pid}) {cause} (no log output)"
    return f"{what} (pid {pid}) {cause}; last log lines:\n" + "\n".join(f"  {t}" for t in tail)


@dataclass(frozen=True)
class HostPort:
    """Where one server lives in the emulation."""

    server: str
    namespace: str
    ifname: str  # inside the namespace
    switch_ifname: str  # root namespace, attached to chip port `port`
    port: int
    mac: str
    ip: str


class EmulatedFabric:
    """`with EmulatedFabric(load_topology("cassini-testbed"), 0.001) as fabric: ...`

    switch_process=True runs the switch as `cassini switch serve` in its own
    process at `switch_nice` (its own interpreter lock and a higher priority,
    so a busy test or sender cannot stall the packet path and fake
    queueing); False runs a SoftwareSwitch in this process.
    """

    def __init__(
        self,
        topo: Topology,
        scale: float = DEFAULT_SCALE,
        prefix: str | None = None,
        settings: ControlPlaneSettings | None = None,
        pfc: bool = True,
        device_id: int = 1,
        grpc_address: str = "127.0.0.1:0",
        seed: int = 0,
        switch_process: bool = True,
        switch_nice: int = SWITCH_NICE,
        timeout: float = 30.0,
    ) -> None:
        _check_scale(scale)
        self.topo = topo
        self.chip = map_to_chip(topo)
        self.settings = settings or ControlPlaneSettings()
        self.profile = emulation_profile(
            topo, self.chip, scale, self.settings.cell_bytes, pfc, self.settings
        )
        self.device_id = device_id
        self.requested_grpc_address = grpc_address
        self.seed = seed
        self.switch_process = switch_process
        self.switch_nice = switch_nice
        self.timeout = timeout
        self.lab = NetnsLab(prefix, base=FABRIC_PREFIX_BASE)
        self.hosts: dict[str, HostPort] = {}
        self.grpc_address: str | None = None
        self.program_result: ProgramResult | None = None
        self.timings: dict[str, float] = {}
        self._switch: SoftwareSwitch | None = None
        self._process: subprocess.Popen[str] | None = None
        self._log_tail: deque[str] = deque(maxlen=200)
        self._log_thread: threading.Thread | None = None

    @property
    def prefix(self) -> str:
        """The name prefix of this fabric's namespaces and interfaces."""
        return self.lab.prefix

    # --- bring-up -------------------------------------------------------------

    def start(self) -> EmulatedFabric:
        """Namespaces, veths, neighbours, switch, pipeline and entries; undone on failure."""
        try:
            began = time.monotonic()
            self.lab.claim()  # a prefix in use is refused before anything is built
            self._build_hosts()
            self.timings["hosts_s"] = time.monotonic() - began
            mark = time.monotonic()
            self._start_switch()
            self.timings["switch_s"] = time.monotonic() - mark
            mark = time.monotonic()
            self._program()
            self.timings["program_s"] = time.monotonic() - mark
            self.timings["total_s"] = time.monotonic() - began
        except BaseException:
            self.stop()
            raise
        return self

    def _build_hosts(self) -> None:
        ports = self.chip.server_port
        for index, server in enumerate(self.topo.servers, start=1):
            port = ports[server.name]
            ns = self.lab.namespace(server.name)
            address = f"{server.ip}/{SERVER_PREFIX_LEN}" if server.ip else None
            host_if, switch_if = self.lab.veth(
                f"h{index}", f"p{port}", ns_a=ns, mac_a=server.mac, ip_a=address
            )
            self.hosts[server.name] = HostPort(
                server.name, ns, host_if, switch_if, port, server.mac, server.ip
            )
        for host in self.hosts.values():
            self._add_neighbours(host)

    def _add_neighbours(self, host: HostPort) -> None:
        """Permanent ARP entries for every other server.

        (our choice) The chip forwards unicast destination MACs only (no
        broadcast rule), so ARP could not resolve; static entries also keep
        the counters free of anything but the traffic a test sends.
        """
        lines = [
            f"neigh replace {other.ip} lladdr {other.mac} dev {host.ifname} nud permanent"
            for other in self.hosts.values()
            if other.server != host.server and other.ip
        ]
        if not lines:
            return
        subprocess.run(
            ["ip", "-n", host.namespace, "-batch", "-"],
            input="\n".join(lines) + "\n",
            text=True,
            check=True,
            capture_output=True,
        )

    def switch_ports(self) -> dict[int, str]:
        """{chip port: switch-side interface} of the server ports; cabled ports have none."""
        return {h.port: h.switch_ifname for h in self.hosts.values()}

    def _start_switch(self) -> None:
        tm = self.profile.tm
        for line in self.profile.describe(self.chip).splitlines():
            log.info("emulation profile: %s", line)
        if not self.switch_process:
            from .target.switch import SoftwareSwitch

            self._switch = SoftwareSwitch(
                self.device_id, self.switch_ports(), self.requested_grpc_address, tm, self.seed
            ).start()
            self.grpc_address = self._switch.grpc_address
            return
        tm_file = self.lab.tempdir("switch") / "tm.json"
        tm_file.write_text(json.dumps(tm_config_to_dict(tm), indent=1))
        argv = ["nice", "-n", str(self.switch_nice)] if self.switch_nice else []
        argv += [sys.executable, "-m", "emulation", "switch", "serve"]
        argv += ["--device-id", str(self.device_id)]
        for port, ifname in sorted(self.switch_ports().items()):
            argv += ["-i", f"{port}@{ifname}"]
        argv += ["--grpc-server-addr", self.requested_grpc_address]
        argv += ["--tm-config", str(tm_file), "--seed", str(self.seed)]
        # Its own session: Ctrl-C at a terminal reaches only us, and we stop it in
        # order, rather than it dying mid-start with a traceback of its own.
        self._process = self.lab.popen(
            None,
            argv,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert self._process.stderr is not None
        self.grpc_address = self._wait_ready(self._process.stderr)

    def _wait_ready(self, stream: IO[str]) -> str:
        """Read the switch's log until it names its address; keep draining it afterwards."""
        found: list[str] = []
        ready = threading.Event()

        def drain() -> None:
            for line in stream:
                self._log_tail.append(line.rstrip())
                match = READY_PATTERN.search(line)
                if match and not ready.is_set():
                    found.append(match.group(1))
                    ready.set()
            ready.set()  # the process ended

        self._log_thread = threading.Thread(target=drain, name="fabric-switch-log", daemon=True)
        self._log_thread.start()
        if not ready.wait(self.timeout) or not found:
            tail = "\n".join(self._log_tail) or "(no output)"
            raise RuntimeError(f"the software switch did not become ready:\n{tail}")
        return found[0]

    def _program(self) -> None:
        from controlplane.compile import desired_entries
        from controlplane.p4info import load_p4info
        from controlplane.program import program_device
        from controlplane.session import P4RuntimeSession

        assert self.grpc_address is not None
        p4info = load_p4info()
        desired = desired_entries(self.topo, self.chip, self.profile.wred)
        with P4RuntimeSession.connect(
            self.grpc_address, self.device_id, timeout=self.timeout
        ) as session:
            self.program_result = program_device(session, desired, p4info)

    # --- use ------------------------------------------------------------------

    def session(self, election_id: tuple[int, int] | None = None) -> P4RuntimeSession:
        """A P4Runtime session to the switch; read-only unless an election id is given."""
        from controlplane.session import P4RuntimeSession

        if self.grpc_address is None:
            raise RuntimeError("the fabric is not running")
        return P4RuntimeSession.connect(
            self.grpc_address, self.device_id, election_id=election_id, timeout=self.timeout
        )

    def packet_socket(self, server: str) -> socket.socket:
        """A raw AF_PACKET socket on `server`'s interface, inside its namespace."""
        host = self.hosts[server]
        return self.lab.packet_socket(host.namespace, host.ifname)

    def run(
        self, server: str, argv: Sequence[str], check: bool = True, timeout: float = 30.0
    ) -> subprocess.CompletedProcess[str]:
        """Run a command inside `server`'s namespace."""
        return self.lab.run(self.hosts[server].namespace, argv, check=check, timeout=timeout)

    def tor_of(self, server: str) -> str:
        return self.chip.switch_of_port[self.chip.server_port[server]]

    def ping(
        self, pairs: Iterable[tuple[str, str]], wait_s: float = 2.0
    ) -> dict[tuple[str, str], float | None]:
        """One ICMP echo per (src, dst) pair, all at once: RTT in ms, None when lost."""
        started: list[tuple[tuple[str, str], subprocess.Popen[str]]] = []
        try:
            for src, dst in pairs:
                argv = ["ip", "netns", "exec", self.hosts[src].namespace]
                argv += ["ping", "-n", "-c", "1", "-W", f"{wait_s:g}", self.hosts[dst].ip]
                process = subprocess.Popen(
                    argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
                )
                started.append(((src, dst), process))
            results: dict[tuple[str, str], float | None] = {}
            for pair, process in started:
                out, _ = process.communicate(timeout=wait_s + 10)
                match = re.search(r"time=([\d.]+) ms", out)
                results[pair] = float(match.group(1)) if match and process.returncode == 0 else None
            return results
        finally:
            for _, process in started:
                if process.poll() is None:
                    process.kill()
                    process.wait()

    # --- watching -------------------------------------------------------------

    @property
    def switch_pid(self) -> int | None:
        """The switch process's pid (None when the switch runs in this process or is stopped)."""
        return None if self._process is None else self._process.pid

    def switch_failure(self) -> str | None:
        """None while the switch process runs; once it has ended, which process and why.

        A fabric whose switch died still has its namespaces and answers
        nothing, so whoever keeps a fabric up must poll this rather than
        trust that bring-up succeeded. The in-process switch is not watched:
        it dies only with its caller.
        """
        process = self._process
        if process is None or process.poll() is None:
            return None
        if self._log_thread is not None:
            # The log reader sees EOF right after the exit; wait briefly so the
            # report quotes the switch's last words.
            self._log_thread.join(timeout=1.0)
        return describe_exit(
            "the software switch process", process.pid, process.returncode, list(self._log_tail)
        )

    def wait_for_failure(self, stop: threading.Event, poll_s: float = 0.2) -> str | None:
        """Block until `stop` is set (returns None) or the switch dies (returns why).

        A stop wins: a switch that exits because it was told to is no failure.
        """
        while not stop.wait(poll_s):
            failure = self.switch_failure()
            if failure is not None:
                return failure
        return None

    # --- teardown ---------------------------------------------------------------

    def stop(self) -> None:
        """Switch first, then namespaces and veths (idempotent)."""
        if self._switch is not None:
            self._switch.stop()
            self._switch = None
        self.lab.close()  # also stops the switch process
        self._process = None
        if self._log_thread is not None:
            self._log_thread.join(timeout=2.0)
            self._log_thread = None
        self.grpc_address = None

    def __enter__(self) -> EmulatedFabric:
        self.lab.__enter__()  # SIGTERM becomes SystemExit, so __exit__ still runs
        try:
            return self.start()
        except BaseException:
            self.lab.__exit__(None, None, None)
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self._switch is not None:
                self._switch.stop()
                self._switch = None
        finally:
            self.lab.__exit__(exc_type, exc, tb)
            self.stop()


def server_pairs_covering_tors(
    fabric_chip: ChipMap, servers: Sequence[str]
) -> list[tuple[str, str]]:
    """One (src, dst) pair per ordered ToR pair, plus one pair inside every rack.

    Servers are rotated within each rack so different pairs use different
    servers; every ToR-to-ToR path of the chip is crossed once in each direction.
    """
    racks: dict[str, list[str]] = {}
    for server in servers:
        racks.setdefault(fabric_chip.switch_of_port[fabric_chip.server_port[server]], []).append(
            server
        )
    tors = list(racks)
    pairs: list[tuple[str, str]] = []
    turn: dict[str, int] = dict.fromkeys(tors, 0)

    def pick(tor: str) -> str:
        members = racks[tor]
        chosen = members[turn[tor] % len(members)]
        turn[tor] += 1
        return chosen

    for a in tors:
        for b in tors:
            if a == b:
                if len(racks[a]) > 1:
                    first = pick(a)
                    second = next(s for s in racks[a] if s != first)
                    pairs.append((first, second))
                continue
            pairs.append((pick(a), pick(b)))
    return pairs


__all__ = [
    "DEFAULT_SCALE",
    "THRESHOLD_FLOOR_PACKETS",
    "EmulatedFabric",
    "EmulationProfile",
    "HostPort",
    "describe_exit",
    "emulation_profile",
    "port_links",
    "scaled_wred",
    "server_pairs_covering_tors",
    "threshold_factor",
    "tm_config_for",
    "tm_config_to_dict",
]
