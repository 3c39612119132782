"""How does a topology become a running, programmed emulated fabric?

One source of truth: the chip map (`topologies.chip_mapping`) says which chip
port each server and each loopback cable uses, the topology's links give
every port's rate and every cable's delay, and `controlplane.settings` gives
the thresholds. `emulation.scaling` scales them (rates x S, thresholds x F);
this module wires them up (`EmulatedFabric`) as a Mininet network
(`emulation.mininet_net`): one host (a named namespace) and veth per server,
one Mininet switch holding all logical switches, programmed over P4Runtime by
the real control plane with the same entries on every target. The target is
the software switch (cabled ports exist only inside it) or bmv2 (cables are
veth pairs, queues set over simple_switch_CLI, thresholds in packets).
On request every switch-side interface is captured (`pcap_dir`) and the
switch's log kept (`log_dir`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any

from controlplane.settings import ControlPlaneSettings
from topologies.chip_mapping import ChipMap, map_to_chip
from topologies.errors import UserInputError
from topologies.model import Topology

from .cpu_split import split_cpus
from .netns import NetnsLab
from .scaling import (
    DEFAULT_SCALE,
    THRESHOLD_FLOOR_PACKETS,
    EmulationProfile,
    check_scale,
    emulation_profile,
    port_links,
    scaled_wred,
    threshold_factor,
    tm_config_for,
)
from .signals import exit_cause, signals_deferred
from .softswitch.processes import is_switch_process
from .softswitch.switch import READY_PATTERN
from .softswitch.tm_config import tm_config_to_dict

if TYPE_CHECKING:
    import socket

    from mininet.net import Mininet

    from controlplane.program import ProgramResult
    from controlplane.session import P4RuntimeSession
    from controlplane.settings import WredSettings

    from .capture import Capture
    from .softswitch.switch import SoftwareSwitch

log = logging.getLogger(__name__)

FABRIC_PREFIX_BASE = "cas"
# (our choice) The switch process runs at nice -10. Arrivals carry the kernel's
# receive stamps, so a late read no longer invents a queue, but departures
# still happen when the switch thread runs: a higher priority keeps delivery
# jitter low on a shared machine.
SWITCH_NICE = -10
# How many of the switch's last log lines a failure report quotes.
FAILURE_LOG_LINES = 10
DEFAULT_TARGET = "softswitch"
# The switch's log in `log_dir` (the Mininet node's name, as p4-utils names it),
# and what bmv2 prints besides its own log file.
SWITCH_LOG = "chip.log"
SWITCH_CONSOLE_LOG = "chip-console.log"


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


def wait_ready_in_file(
    log_file: str | Path, process: subprocess.Popen[Any], timeout: float = 30.0
) -> str:
    """The address the software switch's readiness line names, once its log file holds
    it (a switch no one reads a pipe from, e.g. under `mn`); RuntimeError if it ends."""
    deadline = time.monotonic() + timeout
    path = Path(log_file)
    text = ""
    while time.monotonic() < deadline:
        text = path.read_text(errors="replace") if path.exists() else ""
        match = READY_PATTERN.search(text)
        if match:
            return match.group(1)
        if process.poll() is not None:
            raise RuntimeError(
                describe_exit(
                    "the software switch", process.pid, process.returncode, text.splitlines()
                )
            )
        time.sleep(0.05)
    raise RuntimeError(f"the software switch did not become ready in {timeout:g} s:\n{text}")


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


@dataclass(frozen=True)
class PingCheck:
    """What one ping per server pair found: the pairs that got no answer, the RTTs of the rest."""

    pairs: int
    lost: tuple[tuple[str, str], ...]
    rtts_ms: tuple[float, ...]  # sorted

    @property
    def ok(self) -> bool:
        return not self.lost

    def rtt_summary(self) -> dict[str, float | None]:
        """{'min', 'median', 'max'} in ms (None when nothing answered)."""
        rtts = self.rtts_ms
        return {
            "min": rtts[0] if rtts else None,
            "median": statistics.median(rtts) if rtts else None,
            "max": rtts[-1] if rtts else None,
        }

    def as_dict(self) -> dict[str, Any]:
        """The JSON form `cassini fabric up --check --json` prints."""
        return {
            "pairs": self.pairs,
            "reachable": len(self.rtts_ms),
            "lost": [f"{a}->{b}" for a, b in self.lost],
            "rtt_ms": self.rtt_summary(),
        }


class EmulatedFabric:
    """`with EmulatedFabric(load_topology("cassini-testbed"), 0.001) as fabric: ...`

    switch_process=True runs the switch as `cassini switch serve` in its own
    process at `switch_nice` (its own interpreter lock and a higher priority,
    so a busy test or sender cannot stall the packet path and fake
    queueing); False runs a SoftwareSwitch in this process. `pin_loop`
    (software switch, two or more CPUs) puts the packet loop on a core of its
    own and steers the hosts' receive processing to the others (cpu_split.py).

    target="bmv2" runs simple_switch_grpc instead (refused, naming what is
    missing, when it is not installed) and pushes `device_config`, the
    compiled JSON (default: where `make p4` writes it). `pcap_dir` receives a
    pcap per switch-side interface, `log_dir` the switch's log; both are
    results folders (refused when they hold files, unless `force`).
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
        target: str = DEFAULT_TARGET,
        device_config: bytes | str | Path | None = None,
        pcap_dir: str | Path | None = None,
        log_dir: str | Path | None = None,
        force: bool = False,
        thrift_port: int = 0,
        pin_loop: bool = True,
    ) -> None:
        check_scale(scale)
        self.target, self.device_config = _check_target(target, device_config, switch_process)
        self.pcap_dir, self.log_dir = _check_folders(pcap_dir, log_dir, force)
        self.thrift_port = thrift_port
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
        # The software switch's loop on a core of its own, the hosts' receive work on the
        # others (cpu_split.py); None with one CPU, for bmv2, or when not asked.
        self.cpu_split = (
            split_cpus(os.sched_getaffinity(0))
            if pin_loop and switch_process and self.target == DEFAULT_TARGET
            else None
        )
        self.timeout = timeout
        self.lab = NetnsLab(prefix, base=FABRIC_PREFIX_BASE, processes=is_switch_process)
        self.hosts: dict[str, HostPort] = {}
        self.grpc_address: str | None = None
        self.program_result: ProgramResult | None = None
        self.timings: dict[str, float] = {}
        self._switch: SoftwareSwitch | None = None
        self._process: subprocess.Popen[str] | None = None
        self._log_tail: deque[str] = deque(maxlen=200)
        self._log_thread: threading.Thread | None = None
        self._switch_log: Path | None = None
        self._log_copy: IO[str] | None = None
        self.captures: list[Capture] = []
        self.net: Mininet | None = None  # Mininet's network: net["s01"].cmd(...)

    @property
    def prefix(self) -> str:
        """The name prefix of this fabric's namespaces and interfaces."""
        return self.lab.prefix

    @property
    def wred(self) -> WredSettings:
        """The WRED entries' thresholds: the profile's cells, or packets on bmv2
        (its enq_qdepth counts packets), converted as `cassini program --bmv2` does."""
        if self.target != "bmv2":
            return self.profile.wred
        from controlplane.bmv2 import bmv2_wred

        return bmv2_wred(self._bmv2_settings())

    def _bmv2_settings(self) -> ControlPlaneSettings:
        """The settings with the profile's scaled thresholds and queue limit, in cells."""
        return dataclasses.replace(
            self.settings, wred=self.profile.wred, queue_cells=self.profile.tm.default_queue_cells
        )

    def bmv2_queue_commands(self) -> list[str]:
        """The simple_switch_CLI lines bmv2 gets: each port's queue depth and its rate x S."""
        from controlplane.bmv2 import queue_commands

        return queue_commands(self.topo, self.chip, self._bmv2_settings(), self.profile.scale)

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
            if self.pcap_dir is not None:
                self._start_captures(self.pcap_dir)
            self.timings["total_s"] = time.monotonic() - began
        except BaseException:
            self.stop()
            raise
        return self

    def _build_hosts(self) -> None:
        """The Mininet network: a named namespace per server, its cable to the chip, ARP."""
        from functools import partial

        from mininet.net import Mininet

        from .mininet_net import (
            Bmv2Switch,
            CassiniHost,
            CassiniTopo,
            ChipSwitch,
            SoftSwitch,
            fixed_address,
            host_ifname,
            static_arp,
            switch_ifname,
        )

        ports = self.chip.server_port
        run = self.lab.claim()
        for index, server in enumerate(self.topo.servers, start=1):
            port = ports[server.name]
            names = (host_ifname(self.prefix, index), switch_ifname(self.prefix, port))
            for name in names:  # recorded before they exist
                run.add("links", name)
            self.lab.root_links += list(names)
            self.hosts[server.name] = HostPort(
                server.name, self.prefix + server.name, *names, port, server.mac, server.ip
            )
        switch: Any
        if self.target == "bmv2":
            switch = partial(
                Bmv2Switch,
                lab=self.lab,
                device_id=self.device_id,
                grpc_address=fixed_address(self.requested_grpc_address),
                launch=self.lab_popen,
                log_file=str(self.log_dir / SWITCH_LOG) if self.log_dir else None,
                cables=self.chip.loopback_pairs,
                prefix=self.prefix,
                thrift_port=self.thrift_port or int(fixed_address("127.0.0.1:0").split(":")[1]),
                queue_commands=self.bmv2_queue_commands(),
            )
        elif self.switch_process:
            self._switch_log = self.lab.tempdir("switch")
            tm_file = self._switch_log / "tm.json"
            tm_file.write_text(json.dumps(tm_config_to_dict(self.profile.tm), indent=1))
            switch = partial(
                SoftSwitch,
                lab=self.lab,
                device_id=self.device_id,
                grpc_address=self.requested_grpc_address,
                launch=self.lab_popen,
                tm_config=str(tm_file),
                seed=self.seed,
                nice=self.switch_nice,
                loop_cpu=self.cpu_split.loop_cpu if self.cpu_split else None,
            )
        else:
            switch = partial(ChipSwitch, lab=self.lab)
        self.net = Mininet(
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
            switch=switch,
            controller=None,
            build=False,
            cleanup=False,
        )
        self.net.build()
        static_arp(self.net.hosts)

    def lab_popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[str]:
        """Start a process in the root namespace, recorded in the run file."""
        return self.lab.popen(None, argv, **kwargs)

    def switch_ports(self) -> dict[int, str]:
        """{chip port: switch-side interface} of the server ports; cabled ports have none."""
        return {h.port: h.switch_ifname for h in self.hosts.values()}

    def interfaces(self) -> dict[int, str]:
        """{chip port: interface} of every port that has one: the server ports, and on
        bmv2 also both ends of every cable (veths)."""
        ports = self.switch_ports()
        if self.net is not None and self.net.switches:
            ports.update(getattr(self.net.switches[0], "cable_interfaces", {}))
        return dict(sorted(ports.items()))

    def _start_switch(self) -> None:
        tm = self.profile.tm
        for line in self.profile.describe(self.chip).splitlines():
            log.info("emulation profile: %s", line)
        assert self.net is not None
        self.net.start()  # the chip's process, on the ports Mininet cabled
        if not self.switch_process:
            from .softswitch.switch import SoftwareSwitch

            self._switch = SoftwareSwitch(
                self.device_id, self.switch_ports(), self.requested_grpc_address, tm, self.seed
            ).start()
            self.grpc_address = self._switch.grpc_address
            return
        chip = self.net.switches[0]
        self._process = chip.process
        stream = chip.log_stream()
        assert self._process is not None and stream is not None
        if self.log_dir is not None:
            name = SWITCH_CONSOLE_LOG if self.target == "bmv2" else SWITCH_LOG
            self._log_copy = open(self.log_dir / name, "w")  # noqa: SIM115 (closed in stop)
        if self.target == "bmv2":
            self._drain(stream, None)
            self.grpc_address = self._wait_listening(chip.grpc_address)
            chip.configure_queues()
        else:
            self.grpc_address = self._wait_ready(stream)

    def _drain(self, stream: IO[str], ready: Any) -> list[str]:
        """Read the switch's output until it ends: keep its tail, copy it to the log
        folder, and report the address its readiness line names (software switch)."""
        found: list[str] = []
        copy = self._log_copy

        def drain() -> None:
            for line in stream:
                self._log_tail.append(line.rstrip())
                if copy is not None:
                    copy.write(line)
                    copy.flush()
                match = READY_PATTERN.search(line) if ready is not None else None
                if match and not ready.is_set():
                    found.append(match.group(1))
                    ready.set()
            if ready is not None:
                ready.set()  # the process ended

        self._log_thread = threading.Thread(target=drain, name="fabric-switch-log", daemon=True)
        self._log_thread.start()
        return found

    def _wait_ready(self, stream: IO[str]) -> str:
        """Read the switch's log until it names its address; keep draining it afterwards."""
        ready = threading.Event()
        found = self._drain(stream, ready)
        if not ready.wait(self.timeout) or not found:
            tail = "\n".join(self._log_tail) or "(no output)"
            raise RuntimeError(f"the software switch did not become ready:\n{tail}")
        return found[0]

    def _wait_listening(self, address: str) -> str:
        """Until bmv2's P4Runtime port accepts connections (it names no address)."""
        import socket as socket_module

        host, _, port = address.rpartition(":")
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            failure = self.switch_failure()
            if failure is not None:
                raise RuntimeError(failure)
            with contextlib.suppress(OSError):
                socket_module.create_connection((host.strip("[]"), int(port)), 0.2).close()
                return address
            time.sleep(0.05)
        tail = "\n".join(self._log_tail) or "(no output)"
        raise RuntimeError(f"bmv2 did not listen on {address} in {self.timeout:g} s:\n{tail}")

    def _start_captures(self, folder: Path) -> None:
        from .capture import start_captures

        self.captures = start_captures(self.interfaces(), folder, self.lab_popen)

    def _program(self) -> None:
        from controlplane.program import program_topology
        from controlplane.session import P4RuntimeSession

        assert self.grpc_address is not None
        with P4RuntimeSession.connect(
            self.grpc_address, self.device_id, timeout=self.timeout
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
        """Mininet's CLI on this fabric (`s01 ping -c1 s24`, `pingall`), until EOF or `exit`."""
        from mininet.cli import CLI

        if self.net is None:
            raise RuntimeError("the fabric is not running")
        CLI(self.net, stdin=stdin or sys.stdin)

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
        what = "bmv2 (simple_switch_grpc)" if self.target == "bmv2" else "the software switch"
        return describe_exit(
            f"{what} process", process.pid, process.returncode, list(self._log_tail)
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

    def _stop_net(self) -> None:
        """Mininet's own stop: the chip's process, the host shells, their interfaces."""
        net, self.net = self.net, None
        if net is not None:
            with signals_deferred(redeliver=False), contextlib.suppress(Exception):
                net.stop()

    def _stop_captures(self) -> None:
        """Captures first, so each closes its file before its interface goes."""
        from .capture import stop_captures

        captures, self.captures = self.captures, []
        stop_captures(captures)

    def stop(self) -> None:
        """Captures, switch, then namespaces and veths (idempotent)."""
        self._stop_captures()
        if self._switch is not None:
            self._switch.stop()
            self._switch = None
        self._stop_net()
        self.lab.close()  # also stops the switch process
        self._process = None
        if self._log_thread is not None:
            self._log_thread.join(timeout=2.0)
            self._log_thread = None
        if self._log_copy is not None:
            self._log_copy.close()
            self._log_copy = None
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
            if self._switch is not None:
                self._switch.stop()
                self._switch = None
            self._stop_net()
        finally:
            self.lab.__exit__(exc_type, exc, tb)
            self.stop()


def _check_target(
    target: str, device_config: bytes | str | Path | None, switch_process: bool
) -> tuple[str, bytes]:
    """The target and the device config to push; bmv2 missing, or its JSON, is one line."""
    from .mininet_net import bmv2_available, check_target

    check_target(target)
    if target != "bmv2":
        if isinstance(device_config, bytes) or device_config is None:
            return target, device_config or b""
        try:
            return target, Path(device_config).read_bytes()
        except OSError as err:
            raise UserInputError(
                f"cannot read --device-config {device_config}: {err.strerror}"
            ) from None
    if not switch_process:
        raise UserInputError("--target bmv2 runs bmv2's own process (switch_process=True)")
    missing = bmv2_available()
    if missing is not None:
        raise UserInputError(f"--target bmv2: {missing}; install bmv2 or use --target softswitch")
    if isinstance(device_config, bytes):
        return target, device_config
    from controlplane.bmv2 import bmv2_device_config

    return target, bmv2_device_config(device_config)


def _check_folders(
    pcap_dir: str | Path | None, log_dir: str | Path | None, force: bool
) -> tuple[Path | None, Path | None]:
    """The results folders, checked by the output rule (one folder may serve both)."""
    from topologies.outputs import check_output

    checked: dict[Path, Path] = {}
    found: list[Path | None] = []
    if pcap_dir is not None:
        from .capture import check_tcpdump

        check_tcpdump()  # before anything is built
    for folder, flag in ((pcap_dir, "--pcap"), (log_dir, "--log-dir")):
        if folder is None:
            found.append(None)
            continue
        path = Path(folder)
        if path not in checked:
            checked[path] = check_output(path, "folder", force, flag)
            checked[path].mkdir(exist_ok=True)
        found.append(checked[path])
    return found[0], found[1]


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
    "PingCheck",
    "describe_exit",
    "emulation_profile",
    "port_links",
    "scaled_wred",
    "server_pairs_covering_tors",
    "threshold_factor",
    "tm_config_for",
    "tm_config_to_dict",
]
