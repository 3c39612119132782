"""How does bmv2 run the chip as a Mininet switch?

`Bmv2Switch` runs `simple_switch_grpc --no-p4` on every chip port: bmv2 has
no internal cables, so the loopback cables are veth pairs; it counts its
queues in packets, so the WRED thresholds are converted and each port's
queue depth and rate are set over `simple_switch_CLI`; it names no
address, so it is given free ports (`fixed_address`) and is ready once its
P4Runtime port accepts connections. `bmv2_available` says whether it can
run here at all.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from controlplane.bmv2 import bmv2_device_config, bmv2_wred, queue_commands, run_cli
from controlplane.settings import ControlPlaneSettings, WredSettings
from emulation.softswitch.processes import BMV2_PROCESS
from topologies.chip_mapping import ChipMap
from topologies.errors import UserInputError
from topologies.model import Topology

from .mininet_net import switch_ifname
from .mininet_switches import SWITCH_LOG, ChipSwitch, SwitchPlan
from .netns import OFFLOADS
from .switch_log import SwitchLog

BMV2_BINARY = BMV2_PROCESS  # the name cassini clean looks for
BMV2_CLI = "simple_switch_CLI"
BMV2_CPU_PORT = 255
# (our choice) bmv2 logs every table hit at debug and trace (its default level);
# info keeps its log to start-up, pipeline and errors, and its packet rate up.
BMV2_LOG_LEVEL = "info"
# Strict-priority queues per port when queue classes are wanted (the P4 program's
# queue_class tables set standard_metadata.priority; 7 is served first).
BMV2_PRIORITY_QUEUES = 8
# What bmv2 prints in a log folder, besides its own log file (SWITCH_LOG).
SWITCH_CONSOLE_LOG = "chip-console.log"


class Bmv2Switch(ChipSwitch):
    """`simple_switch_grpc --no-p4` on every chip port, the loopback cables as veth pairs.

    bmv2 has no internal cables: each cable (chip ports a <-> b) becomes a
    veth pair `<prefix>p<a>` <-> `<prefix>p<b>` in the root namespace, both
    ends attached to bmv2, so a frame leaving port a enters port b. Queue
    depth and rate are set per port over `simple_switch_CLI` (Thrift) once
    the process is up (`queue_commands`, from `controlplane.bmv2.queue_commands`);
    the pipeline (P4Info and the compiled JSON) and the entries are pushed over
    P4Runtime by the project's control plane. bmv2 prints to stdout, so its
    stdout and stderr are one stream (`output`).
    """

    WHAT = "bmv2 (simple_switch_grpc)"
    CONSOLE_LOG = SWITCH_CONSOLE_LOG
    # 0: one FIFO per port (bmv2's default); BMV2_PRIORITY_QUEUES: `--priority-queues`.
    priority_queues = 0

    def __init__(
        self,
        name: str,
        cables: Sequence[tuple[int, int]] = (),
        prefix: str = "cas",
        thrift_port: int = 9090,
        queue_commands: Sequence[str] = (),
        log_level: str = BMV2_LOG_LEVEL,
        priority_queues: int = 0,
        **params: Any,
    ) -> None:
        self.cables = tuple(cables)
        self.prefix = prefix
        self.thrift_port = thrift_port
        self.queue_commands = tuple(queue_commands)
        self.log_level = log_level
        self.priority_queues = priority_queues
        super().__init__(name, **params)

    @classmethod
    def params(cls, plan: SwitchPlan) -> dict[str, Any]:
        """bmv2 names no address, so it is given free ports; it writes its own log."""
        return super().params(plan) | {
            "grpc_address": fixed_address(plan.grpc_address),
            "log_file": str(plan.log_dir / SWITCH_LOG) if plan.log_dir else None,
            "cables": plan.cables,
            "prefix": plan.lab.prefix,
            "thrift_port": plan.thrift_port or int(fixed_address("127.0.0.1:0").split(":")[1]),
            "queue_commands": plan.queue_commands,
        }

    @classmethod
    def device_config(cls, given: bytes | str | Path | None) -> bytes:
        """The compiled JSON (default: where `make p4` writes it); bmv2 missing is one line."""
        missing = bmv2_available()
        if missing is not None:
            raise UserInputError(
                f"--target bmv2: {missing}; install bmv2 or use --target softswitch"
            )
        if isinstance(given, bytes):
            return given
        return bmv2_device_config(given)

    @classmethod
    def entry_wred(cls, settings: ControlPlaneSettings) -> WredSettings:
        """In packets: bmv2's enq_qdepth counts packets (as `cassini program --bmv2`)."""
        return bmv2_wred(settings)

    @classmethod
    def queue_commands_for(
        cls, topo: Topology, chip: ChipMap, settings: ControlPlaneSettings, scale: float
    ) -> tuple[str, ...]:
        """The simple_switch_CLI lines: each port's queue depth and its rate x S."""
        return tuple(queue_commands(topo, chip, settings, scale))

    @classmethod
    def notes(cls, wred: WredSettings, queue_commands: Sequence[str]) -> tuple[str, ...]:
        return (
            f"bmv2: cables are veth pairs, no PFC; WRED min {wred.min_cells} / max "
            f"{wred.max_cells} packets; queues set by {len(queue_commands)} "
            "simple_switch_CLI lines",
        )

    def _make_cables(self) -> None:
        for a, b in self.cables:
            if_a, if_b = switch_ifname(self.prefix, a), switch_ifname(self.prefix, b)
            if self.lab is not None:
                run = self.lab.claim()
                run.add("links", if_a)
                run.add("links", if_b)
                self.lab.root_links += [if_a, if_b]
            subprocess.run(
                ["ip", "link", "add", if_a, "type", "veth", "peer", "name", if_b],
                check=True,
                capture_output=True,
            )
            for ifname in (if_a, if_b):
                with contextlib.suppress(OSError):  # IPv6 may be off altogether
                    Path(f"/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6").write_text("1")
                subprocess.run(["ip", "link", "set", ifname, "up"], check=True, capture_output=True)
            self.cable_interfaces[a] = if_a
            self.cable_interfaces[b] = if_b

    def set_ports_enabled(self, ports: dict[int, str], enabled: bool) -> None:
        """The cable's veth ends down or up (bmv2's sends to a down veth fail: dropped)."""
        for port in sorted(ports):
            ifname = self.cable_interfaces.get(port)
            if ifname is None:
                raise UserInputError(f"chip port {port} is not a cable end of this bmv2")
            subprocess.run(
                ["ip", "link", "set", ifname, "up" if enabled else "down"],
                check=True,
                capture_output=True,
            )

    def all_interfaces(self) -> dict[int, str]:
        """{chip port: interface} of every port bmv2 is given: server ports and cable ends."""
        return {**self.port_interfaces(), **self.cable_interfaces}

    def command(self) -> list[str]:
        """simple_switch_grpc's argv as bmv2 documents it: general options, then `--`
        and the target's (`--grpc-server-addr`, `--cpu-port`, and `--priority-queues`
        when queue classes are on)."""
        argv = [BMV2_BINARY, "--no-p4", "--device-id", str(self.device_id)]
        for port, ifname in sorted(self.all_interfaces().items()):
            argv += ["-i", f"{port}@{ifname}"]
        argv += ["--thrift-port", str(self.thrift_port), "--log-level", self.log_level]
        if self.log_file:
            argv += ["--log-file", self.log_file, "--log-flush"]
        else:  # its log on stdout, which the fabric reads (a build without Thrift says so there)
            argv += ["--log-console"]
        target = ["--grpc-server-addr", self.grpc_address, "--cpu-port", str(BMV2_CPU_PORT)]
        if self.priority_queues:
            target += ["--priority-queues", str(self.priority_queues)]
        return [*argv, "--", *target]

    def start(self, controllers: Sequence[Any] = ()) -> None:
        self._make_cables()
        for ifname in self.cable_interfaces.values():
            subprocess.run(
                ["ethtool", "-K", ifname, *[w for o in OFFLOADS for w in (o, "off")]],
                check=True,
                capture_output=True,
            )
        super().start(controllers)

    def output_streams(self) -> dict[str, Any]:
        """bmv2 says "Server listening on ..." on stdout: one stream for both."""
        return {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}

    def logs_to_stderr(self) -> bool:
        return False

    def wait_ready(self, log: SwitchLog, timeout: float) -> str:
        """Until its P4Runtime port accepts connections (bmv2 names no address), then
        its queues set."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            failure = self.failure(log)
            if failure is not None:
                raise RuntimeError(failure)
            if self._listening():
                self.configure_queues(log)
                return self.grpc_address
            time.sleep(0.05)
        raise RuntimeError(
            f"bmv2 did not listen on {self.grpc_address} in {timeout:g} s:\n{log.text()}"
        )

    def _listening(self) -> bool:
        host, _, port = self.grpc_address.rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), 0.2).close()
        except OSError:
            return False
        return True

    def cli_commands(self) -> str:
        """What `configure_queues` feeds simple_switch_CLI."""
        return "".join(line + "\n" for line in self.queue_commands)

    def configure_queues(self, log: SwitchLog | None = None) -> None:
        """Send `queue_commands` to bmv2's Thrift server (after it is up).

        A simple_switch_grpc built without Thrift (its configure's default) has no
        server to send them to: its log says so (`no_thrift`), and that is the error."""
        if not self.queue_commands:
            return
        try:
            run_cli(self.queue_commands, self.thrift_port, BMV2_CLI)
        except UserInputError:
            # bmv2 logs the warning just after it starts listening on gRPC.
            deadline = time.monotonic() + NO_THRIFT_WAIT_S
            while time.monotonic() < deadline:
                if no_thrift(self._log_lines(log)):
                    raise UserInputError(NO_THRIFT_ERROR) from None
                time.sleep(0.05)
            raise

    def _log_lines(self, log: SwitchLog | None) -> list[str]:
        """What bmv2 has logged so far: its --log-file, or its console (the pipe)."""
        lines = list(log.tail) if log is not None else []
        if self.log_file is not None and Path(self.log_file).exists():
            lines += Path(self.log_file).read_text(errors="replace").splitlines()
        return lines

    def stop(self, deleteIntfs: bool = True) -> None:  # noqa: N803 (Mininet's name)
        super().stop(deleteIntfs)
        for ifname in self.cable_interfaces.values():
            if Path("/sys/class/net", ifname).exists():
                subprocess.run(["ip", "link", "delete", ifname], capture_output=True)


# What simple_switch_grpc logs when given --thrift-port but built without Thrift
# (behavioral-model, targets/simple_switch_grpc/switch_runner.cpp).
NO_THRIFT_LOG = "compiled without Thrift support"
# How long after a refused simple_switch_CLI the fabric looks for that line.
NO_THRIFT_WAIT_S = 2.0
NO_THRIFT_ERROR = (
    "--target bmv2: this simple_switch_grpc was built without Thrift (its log says so), "
    "so simple_switch_CLI cannot set its queues' depth and rate; rebuild behavioral-model "
    "and simple_switch_grpc with `./configure --with-thrift` (see emulation/README.md)"
)


def no_thrift(log_lines: Sequence[str]) -> bool:
    """Whether bmv2's log says its simple_switch_grpc has no Thrift server.

    >>> no_thrift(["[12:00:00.000] [bmv2] [W] [thread 7] You used the '--thrift-port' "
    ...            "command-line option, but this target was compiled without Thrift support."])
    True
    >>> no_thrift(["Thrift server was started"])
    False
    """
    return any(NO_THRIFT_LOG in line for line in log_lines)


def bmv2_available() -> str | None:
    """None when bmv2 can run here, else why not (a test's skip reason)."""
    missing = [tool for tool in (BMV2_BINARY, BMV2_CLI) if shutil.which(tool) is None]
    if missing:
        return f"{' and '.join(missing)} not on PATH (bmv2 is not installed)"
    return None


def fixed_address(address: str) -> str:
    """`address` with port 0 replaced by a port free now.

    bmv2 cannot say which port it bound, so it is given one (our choice: the
    kernel's pick, released just before bmv2 binds it; a race with another
    process binding the same port in between fails bring-up, named).

    >>> fixed_address("127.0.0.1:9559")
    '127.0.0.1:9559'
    """
    host, _, port = address.rpartition(":")
    if port != "0":
        return address
    bare = host.strip("[]")
    family = socket.AF_INET6 if ":" in bare else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.bind((bare, 0))
        return f"{host}:{probe.getsockname()[1]}"
