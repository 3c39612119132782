"""How does a topology become a running, programmed emulated fabric?

One source of truth: the chip map (`topologies.chip_mapping`) says which chip
port each server and each loopback cable uses, the topology's links give
every port's rate and every cable's delay, and `controlplane.settings` gives
the thresholds. `emulation.fabric.scaling` scales them (rates x S, thresholds x F);
this module wires them up (`EmulatedFabric`) as a Mininet network
(`emulation.fabric.mininet_net`): one host (a named namespace) and veth per server,
one Mininet switch holding all logical switches, programmed over P4Runtime by
the real control plane with the same entries on every target. What the
fabric is asked to be is one value (`emulation.fabric.options.FabricOptions`);
what differs between targets (the software switch, whose cabled ports exist
only inside it, or bmv2, whose cables are veth pairs, queues set over
simple_switch_CLI, thresholds in packets) is the switch's class
(`emulation.fabric.mininet_switches`). On request every switch-side interface is
captured (`pcap_dir`) and the switch's log kept (`log_dir`), both written
into stages of the fabric's own and published once bring-up has opened their
files (`emulation.fabric.folders`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any

from controlplane.settings import ControlPlaneSettings
from emulation.fabric.folders import FabricFolders
from emulation.fabric.options import FabricOptions
from emulation.housekeeping.cpu_split import split_cpus
from emulation.housekeeping.signals import signals_deferred
from emulation.softswitch.processes import is_switch_process
from topologies.chip_mapping import map_to_chip
from topologies.errors import UserInputError
from topologies.model import Topology

from .capture import Capture, start_captures, stop_captures
from .mininet_switches import ChipSwitch, SwitchPlan
from .netns import NetnsLab
from .reachability import PingCheck
from .scaling import emulation_profile
from .switch_log import SwitchLog
from .target_limits import check_fabric_fit

if TYPE_CHECKING:
    import socket

    from mininet.net import Mininet

    from controlplane.program import ProgramResult
    from controlplane.session import P4RuntimeSession
    from controlplane.settings import WredSettings

log = logging.getLogger(__name__)

FABRIC_PREFIX_BASE = "cas"


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
    tor: str  # the logical switch behind chip port `port`


@dataclass(frozen=True)
class FabricSummary:
    """What a fabric is (`EmulatedFabric.describe`): what `cassini fabric up` prints,
    and what a run records next to its numbers."""

    topology: str
    target: str
    prefix: str
    grpc: str | None
    device_id: int
    switch_pid: int | None
    log_dir: Path | None
    pcap_dir: Path | None
    pcaps: tuple[Path, ...]
    entries: int
    bring_up_s: Mapping[str, float]  # rounded to ms
    scale: float
    profile: tuple[str, ...]  # the emulation profile, one line each
    notes: tuple[str, ...]  # what the target adds (bmv2's packets and queues)
    hosts: tuple[HostPort, ...]

    def as_dict(self) -> dict[str, Any]:
        """The JSON form `cassini fabric up --json` prints."""
        return {
            "topology": self.topology,
            "target": self.target,
            "prefix": self.prefix,
            "grpc": self.grpc,
            "device_id": self.device_id,
            "switch_pid": self.switch_pid,
            "log_dir": None if self.log_dir is None else str(self.log_dir),
            "pcaps": [str(p) for p in self.pcaps],
            "entries": self.entries,
            "bring_up_s": dict(self.bring_up_s),
            "profile": list(self.profile),
            "hosts": [
                {
                    "server": h.server,
                    "namespace": h.namespace,
                    "interface": h.ifname,
                    "ip": h.ip,
                    "mac": h.mac,
                    "chip_port": h.port,
                    "tor": h.tor,
                }
                for h in self.hosts
            ],
        }


class EmulatedFabric:
    """`with EmulatedFabric(load_topology("cassini-testbed"), FabricOptions()) as fabric: ...`

    `options` (`FabricOptions`, checked when made) say what to build; what
    only this machine can answer is checked here, before anything is built:
    bmv2 installed, the device config readable, the results folders free.
    The switch class (`options.switch_class`) runs the chip.
    """

    def __init__(self, topo: Topology, options: FabricOptions | None = None) -> None:
        self.options = options if options is not None else FabricOptions()
        self.switch_class: type[ChipSwitch] = self.options.switch_class
        self.topo = topo
        self.chip = map_to_chip(topo)
        check_fabric_fit(topo, self.chip, self.options.target)  # refused before anything is built
        self.device_config = self.options.device_config_bytes()
        self.pcap_dir, self.log_dir = self.options.results_folders()
        named = ((self.pcap_dir, "--pcap"), (self.log_dir, "--log-dir"))
        self.folders = FabricFolders({f: flag for f, flag in reversed(named) if f is not None})
        settings = self.options.settings
        self.profile = emulation_profile(
            topo, self.chip, self.options.scale, settings.cell_bytes, self.options.pfc, settings
        )
        # The software switch's loop on a core of its own, the hosts' receive work on the
        # others (cpu_split.py); None with one CPU, for a switch whose loop is not
        # pinned, or when not asked.
        self.cpu_split = (
            split_cpus(os.sched_getaffinity(0))
            if self.options.pin_loop and self.switch_class.PINS_LOOP
            else None
        )
        self.lab = NetnsLab(
            self.options.prefix, base=FABRIC_PREFIX_BASE, processes=is_switch_process
        )
        self.hosts: dict[str, HostPort] = {}
        self.grpc_address: str | None = None
        self.program_result: ProgramResult | None = None
        self.timings: dict[str, float] = {}
        self.captures: list[Capture] = []
        self.capture_problems: list[str] = []  # captures that did not record whole
        self.output_problems: list[str] = []  # a log cut short, a folder not published
        self.net: Mininet | None = None  # Mininet's network: net["s01"].cmd(...)
        self._switch: ChipSwitch | None = None  # the network's one switch, once built
        self._log = SwitchLog()  # what the switch's process prints

    @property
    def prefix(self) -> str:
        """The name prefix of this fabric's namespaces and interfaces."""
        return self.lab.prefix

    @property
    def timeout(self) -> float:
        """How long bring-up and P4Runtime sessions wait, in seconds."""
        return self.options.timeout

    @property
    def wred(self) -> WredSettings:
        """The WRED entries' thresholds: the profile's, in the unit the target counts
        (packets on bmv2, converted as `cassini program --bmv2` does)."""
        return self.switch_class.entry_wred(self._scaled_settings())

    def _scaled_settings(self) -> ControlPlaneSettings:
        """The settings with the profile's scaled thresholds and queue limit, in cells."""
        return dataclasses.replace(
            self.options.settings,
            wred=self.profile.wred,
            queue_cells=self.profile.tm.default_queue_cells,
        )

    def queue_commands(self) -> tuple[str, ...]:
        """The lines that set the queues outside P4Runtime: bmv2's simple_switch_CLI
        (each port's depth and its rate x S); none for the software switch."""
        return self.switch_class.queue_commands_for(
            self.topo, self.chip, self._scaled_settings(), self.profile.scale
        )

    def describe(self) -> FabricSummary:
        """What this fabric is: its target, addresses, profile and hosts."""
        result = self.program_result
        return FabricSummary(
            topology=self.topo.name,
            target=self.options.target,
            prefix=self.prefix,
            grpc=self.grpc_address,
            device_id=self.options.device_id,
            switch_pid=self.switch_pid,
            log_dir=self.log_dir,
            pcap_dir=self.pcap_dir,
            pcaps=tuple(c.file for c in self.captures),
            entries=result.desired_count if result else 0,
            bring_up_s={k: round(v, 3) for k, v in self.timings.items()},
            scale=self.profile.scale,
            profile=tuple(self.profile.describe(self.chip).splitlines()),
            notes=self.switch_class.notes(self.wred, self.queue_commands()),
            hosts=tuple(self.hosts.values()),
        )

    # --- bring-up -------------------------------------------------------------

    def start(self) -> EmulatedFabric:
        """Namespaces, veths, neighbours, switch, pipeline and entries; undone on failure."""
        try:
            began = time.monotonic()
            self.lab.claim()  # a prefix in use is refused before anything is built
            self.folders.open()  # the results folders' stages: nobody else writes there
            self._build_hosts()
            self.timings["hosts_s"] = time.monotonic() - began
            mark = time.monotonic()
            self._start_switch()
            self.timings["switch_s"] = time.monotonic() - mark
            mark = time.monotonic()
            self._program()
            self.timings["program_s"] = time.monotonic() - mark
            if self.pcap_dir is not None:
                self._start_captures(self.folders.stage_of(self.pcap_dir) or self.pcap_dir)
            self._publish_folders()  # their files are open: the folders appear
            self.timings["total_s"] = time.monotonic() - began
        except BaseException:
            self.stop()
            raise
        return self

    def _build_hosts(self) -> None:
        """The Mininet network: a named namespace per server, its cable to the chip, ARP."""
        from functools import partial

        from .mininet_net import (
            CassiniHost,
            CassiniNet,
            CassiniTopo,
            host_ifname,
            static_arp,
            switch_ifname,
        )

        ports = self.chip.server_port
        run = self.lab.claim()
        for server in self.topo.servers:
            port = ports[server.name]
            names = (host_ifname(server.name), switch_ifname(self.prefix, port))
            # The root namespace's end is recorded before it exists (deleting it deletes
            # the pair); the server's end is made inside its namespace and goes with it.
            run.add("links", names[1])
            self.lab.root_links.append(names[1])
            self.hosts[server.name] = HostPort(
                server.name,
                self.prefix + server.name,
                *names,
                port,
                server.mac,
                server.ip,
                self.tor_of(server.name),
            )
        options = self.options
        plan = SwitchPlan(
            lab=self.lab,
            device_id=options.device_id,
            grpc_address=options.grpc_address,
            tm=self.profile.tm,
            seed=options.seed,
            nice=options.switch_nice,
            loop_cpu=self.cpu_split.loop_cpu if self.cpu_split else None,
            cables=tuple(self.chip.loopback_pairs),
            queue_commands=self.queue_commands(),
            thrift_port=options.thrift_port,
            log_dir=self.folders.stage_of(self.log_dir),
            topology=self.topo,
        )
        self.net = CassiniNet(
            topo=CassiniTopo(
                self.topo,
                self.chip,
                self.prefix,
                nic_mbit=self.profile.nic_mbit(self.chip),
                wire_overhead=self.profile.tm.wire_overhead_bytes,
            ),
            host=partial(
                CassiniHost,
                lab=self.lab,
                rps_cpus=self.cpu_split.rps_mask if self.cpu_split else None,
            ),
            switch=partial(self.switch_class, **self.switch_class.params(plan)),
            controller=None,
            build=False,
            cleanup=False,
        )
        self.net.build()
        self._switch = self.net.switches[0]
        static_arp(self.net.hosts)

    def lab_popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[str]:
        """Start a process in the root namespace, recorded in the run file."""
        return self.lab.popen(None, argv, **kwargs)

    def switch_ports(self) -> dict[int, str]:
        """{chip port: switch-side interface} of the server ports; cabled ports have none."""
        return {h.port: h.switch_ifname for h in self.hosts.values()}

    def interfaces(self) -> dict[int, str]:
        """{chip port: interface} of every port that has one: the server ports, and the
        cables that are interfaces (bmv2's veth pairs)."""
        ports = self.switch_ports()
        if self._switch is not None:
            ports.update(self._switch.cable_interfaces)
        return dict(sorted(ports.items()))

    def _start_switch(self) -> None:
        for line in self.profile.describe(self.chip).splitlines():
            log.info("emulation profile: %s", line)
        assert self.net is not None and self._switch is not None
        self.net.start()  # the chip's switch, on the ports Mininet cabled
        switch = self._switch
        stream = switch.log_stream()
        if stream is not None:  # a process: what it prints is read, kept and copied
            folder = self.folders.stage_of(self.log_dir)
            copy = None if folder is None else folder / switch.CONSOLE_LOG
            try:
                self._log.follow(stream, copy, switch.READY)
            except OSError as err:
                raise UserInputError(
                    f"--log-dir {self.log_dir}: cannot write {switch.CONSOLE_LOG} "
                    f"({err.strerror or err})"
                ) from None
        self.grpc_address = switch.wait_ready(self._log, self.timeout)
        switch.p4runtime_address = self.grpc_address  # for its `dpctl dump-flows`

    def _start_captures(self, folder: Path) -> None:
        self.captures = start_captures(self.interfaces(), folder, self.lab_popen)

    def _publish_folders(self) -> None:
        """The staged results folders renamed into place (idempotent); the captures' files
        named where they now are."""
        self.output_problems += self.folders.publish()
        if self.pcap_dir is not None:
            self.captures = [
                dataclasses.replace(c, file=self.pcap_dir / c.file.name) for c in self.captures
            ]

    def _program(self) -> None:
        from controlplane.program import program_topology
        from controlplane.session import P4RuntimeSession

        assert self.grpc_address is not None
        with P4RuntimeSession.connect(
            self.grpc_address, self.options.device_id, timeout=self.timeout
        ) as session:
            self.program_result = program_topology(
                session, self.topo, self.chip, self.wred, device_config=self.device_config
            )

    # --- use ------------------------------------------------------------------

    def session(self, election_id: tuple[int, int] | None = None) -> P4RuntimeSession:
        """A P4Runtime session to the switch; read-only unless an election id is given."""
        from controlplane.session import P4RuntimeSession

        if self.grpc_address is None:
            raise RuntimeError("the fabric is not running")
        return P4RuntimeSession.connect(
            self.grpc_address,
            self.options.device_id,
            election_id=election_id,
            timeout=self.timeout,
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

    def check_reachability(self) -> PingCheck:
        """One ping for every ordered server pair (`cassini fabric up --check`).

        One source at a time: its pings run in parallel, the sources in turn,
        so a machine with few cores is not flooded with processes.
        """
        servers = list(self.hosts)
        pairs = [(a, b) for a in servers for b in servers if a != b]
        results: dict[tuple[str, str], float | None] = {}
        for src in servers:
            results.update(self.ping([p for p in pairs if p[0] == src]))
        lost = tuple(p for p, rtt in results.items() if rtt is None)
        rtts = tuple(sorted(rtt for rtt in results.values() if rtt is not None))
        return PingCheck(len(pairs), lost, rtts)

    def cli(self, stdin: IO[str] | None = None) -> None:
        """Mininet's CLI on this fabric (`s01 ping -c1 s24`, `pingall`), until EOF or `exit`
        (`emulation.fabric.mininet_cli`: Ctrl-C interrupts the command, twice at the prompt ends)."""
        from .mininet_cli import CassiniCLI

        if self.net is None:
            raise RuntimeError("the fabric is not running")
        CassiniCLI(self.net, stdin=stdin or sys.stdin)

    # --- watching -------------------------------------------------------------

    @property
    def switch_pid(self) -> int | None:
        """The switch process's pid (None when the switch runs in this process or is stopped)."""
        process = None if self._switch is None else self._switch.process
        return None if process is None else process.pid

    @property
    def thrift_port(self) -> int | None:
        """bmv2's Thrift port, where simple_switch_CLI reads registers its P4Runtime server
        does not serve (None on other targets or when stopped)."""
        port = getattr(self._switch, "thrift_port", None)
        return port if isinstance(port, int) else None

    def switch_failure(self) -> str | None:
        """None while the switch process runs; once it has ended, which process and why.

        A fabric whose switch died still has its namespaces and answers
        nothing, so whoever keeps a fabric up must poll this rather than
        trust that bring-up succeeded. The in-process switch is not watched:
        it dies only with its caller.
        """
        return None if self._switch is None else self._switch.failure(self._log)

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

    def _stop_net(self) -> None:
        """A switch in this process first (Mininet stops the links before the switches),
        then Mininet's own stop: the chip's process, the host shells, their interfaces."""
        if self._switch is not None:
            self._switch.stop_serving()
        net, self.net = self.net, None
        if net is not None:
            with signals_deferred(redeliver=False), contextlib.suppress(Exception):
                net.stop()

    def _stop_captures(self) -> None:
        """Captures first, so each closes its file before its interface goes; what did
        not record whole is kept in `capture_problems` for the caller to report."""
        captures, self.captures = self.captures, []
        self.capture_problems += stop_captures(captures)

    def stop(self) -> None:
        """Captures, switch, then namespaces and veths (idempotent)."""
        self._stop_captures()
        self._stop_net()
        self.lab.close()  # also stops the switch process
        self._switch = None
        self._log.close()
        if self._log.problem is not None and self.log_dir is not None:
            self.output_problems.append(f"--log-dir {self.log_dir}: {self._log.problem}")
            self._log.problem = None
        self._publish_folders()  # what a failed bring-up wrote says why it failed
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
            self._stop_captures()
            self._stop_net()
        finally:
            self.lab.__exit__(exc_type, exc, tb)
            self.stop()
