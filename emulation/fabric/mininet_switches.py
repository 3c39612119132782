"""Which Mininet switch runs the chip, and how does it start, answer and stop?

One `Switch` subclass per way of running the chip, each carrying everything
that differs between targets: `SoftSwitch` runs `cassini switch serve` in a
process of its own (the loopback cables stay inside it; its packet loop may
have a core of its own), `InProcessSwitch` runs the same software switch in
the caller's process, and `emulation.fabric.bmv2_switch.Bmv2Switch` runs
`simple_switch_grpc`. `emulation.fabric.options.switch_class` maps a
`--target` name to its class, once.

The fabric (`emulation.fabric.emulated.EmulatedFabric`) asks the class, before
anything runs, for its Mininet parameters (`params`, from one `SwitchPlan`),
its device config, WRED thresholds and queue commands; once Mininet has
started the node, it waits until the switch answers P4Runtime
(`wait_ready`) and asks it why it died (`failure`).
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import IO, Any, ClassVar

from mininet.node import Switch

from controlplane.settings import ControlPlaneSettings, WredSettings
from emulation.softswitch.switch import READY_PATTERN, SoftwareSwitch
from emulation.softswitch.tm_config import TmConfig, tm_config_to_dict
from topologies.chip_mapping import ChipMap, map_to_chip
from topologies.datafile import read_capped_bytes
from topologies.errors import UserInputError
from topologies.io import save_topology_file
from topologies.model import Topology
from topologies.port_names import interface_names, port_name

from .mininet_net import start_recorded_shell
from .netns import OFFLOADS, NetnsLab
from .switch_log import SwitchLog, describe_exit

# How long a switch that gave no readiness line may take to exit (it is exiting).
EXIT_WAIT_S = 5.0
# How `cassini switch serve` says it refused its input (`emulation.cli.main`).
USER_ERROR_PREFIX = "cassini: error: "


def user_error(lines: Sequence[str]) -> str | None:
    """The last `cassini: error:` message among a switch's log lines, if any.

    >>> user_error(["E1202 bind failed", "cassini: error: cannot listen on 127.0.0.1:9559"])
    'cannot listen on 127.0.0.1:9559'
    """
    found = [line[len(USER_ERROR_PREFIX) :] for line in lines if line.startswith(USER_ERROR_PREFIX)]
    return found[-1].strip() if found else None


# The switch's log in a log folder (the Mininet node's name, as p4-utils names it).
SWITCH_LOG = "chip.log"


@dataclass(frozen=True)
class SwitchPlan:
    """What a fabric asks of its chip, whichever class runs it (`ChipSwitch.params`)."""

    lab: NetnsLab
    device_id: int
    grpc_address: str  # as asked: port 0 is any free port
    tm: TmConfig  # the emulation profile's traffic manager
    seed: int  # of the WRED marking RNG
    nice: int  # the switch process's niceness
    loop_cpu: int | None  # the packet loop's core (cpu_split.py); None: not pinned
    cables: tuple[tuple[int, int], ...]  # the chip's loopback cables (port pairs)
    queue_commands: tuple[str, ...]  # `queue_commands_for`'s lines
    thrift_port: int  # bmv2's; 0: any free port
    log_dir: Path | None  # where the switch writes its own log, if it writes one
    topology: Topology | None = None  # names the ports for controllers (topologies.port_names)


class ChipSwitch(Switch):
    """The chip as one Mininet switch in the root namespace: a process on its ports.

    `launch(argv, **popen_kwargs)` starts the process (the fabric passes its
    lab's `popen`, which records the pid); the process's log is
    `log_stream()`, for the fabric to read until it names its address.
    Subclasses say which argv (`command`), how readiness shows (`wait_ready`)
    and what the fabric must do differently for them (the class methods).
    """

    # Who the switch is, in a failure report ("... process (pid N) was killed ...").
    WHAT: ClassVar[str] = "the switch"
    # The file in the fabric's log folder that receives what the process prints.
    CONSOLE_LOG: ClassVar[str] = SWITCH_LOG
    # The log line that names the P4Runtime address (group 1); None: the switch names none.
    READY: ClassVar[re.Pattern[str] | None] = None
    # Whether the packet loop takes a core of its own and the hosts' receive work the others.
    PINS_LOOP: ClassVar[bool] = False

    def __init__(
        self,
        name: str,
        lab: NetnsLab | None = None,
        device_id: int = 1,
        grpc_address: str = "127.0.0.1:9559",
        launch: Callable[..., subprocess.Popen[str]] | None = None,
        log_file: str | None = None,
        **params: Any,
    ) -> None:
        self.lab = lab
        self.device_id = device_id
        self.grpc_address = grpc_address
        self.launch = launch
        self.log_file = log_file
        self.process: subprocess.Popen[str] | None = None
        # The address the switch answers P4Runtime on, once it does (the fabric says).
        self.p4runtime_address: str | None = None
        # {chip port: interface} of the cables that are interfaces (bmv2's veth pairs).
        self.cable_interfaces: dict[int, str] = {}
        params.setdefault("inNamespace", False)
        super().__init__(name, **params)

    # --- what the fabric asks before the network exists ------------------------

    @classmethod
    def params(cls, plan: SwitchPlan) -> dict[str, Any]:
        """The keywords Mininet builds this switch with, for a fabric's plan."""
        return {
            "lab": plan.lab,
            "device_id": plan.device_id,
            "grpc_address": plan.grpc_address,
            "launch": partial(plan.lab.popen, None),
        }

    @classmethod
    def device_config(cls, given: bytes | str | Path | None) -> bytes:
        """The device config pushed with the pipeline: any bytes, or a file's (none: empty)."""
        if isinstance(given, bytes) or given is None:
            return given or b""
        try:
            return read_capped_bytes(given, "device config")
        except OSError as err:
            raise UserInputError(f"cannot read --device-config {given}: {err.strerror}") from None

    @classmethod
    def entry_wred(cls, settings: ControlPlaneSettings) -> WredSettings:
        """The WRED entries' thresholds for the scaled `settings`: cells, as the TM counts."""
        return settings.wred

    @classmethod
    def queue_commands_for(
        cls, topo: Topology, chip: ChipMap, settings: ControlPlaneSettings, scale: float
    ) -> tuple[str, ...]:
        """Queue settings sent outside P4Runtime: none (the TM config carries them)."""
        return ()

    @classmethod
    def notes(cls, wred: WredSettings, queue_commands: Sequence[str]) -> tuple[str, ...]:
        """What a description of the fabric adds for this target (none)."""
        return ()

    # --- Mininet's node ------------------------------------------------------------

    def startShell(self, mnopts: str | None = None) -> None:  # noqa: N802 (Mininet's name)
        start_recorded_shell(self.lab, partial(super().startShell, mnopts), self)
        if self.lab is not None:
            self.lab.processes.append(self.shell)

    def port_interfaces(self) -> dict[int, str]:
        """{chip port: interface} of the ports Mininet cabled (server ports)."""
        return {port: intf.name for intf, port in self.ports.items() if intf.name != "lo"}

    def command(self) -> list[str] | None:
        """The switch process's argv; None: no process (the switch runs in this one)."""
        return None

    def output_streams(self) -> dict[str, Any]:
        """Popen's stdout/stderr: the log is on stderr (`cassini switch serve`)."""
        return {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}

    def logs_to_stderr(self) -> bool:
        """Whether `log_file` receives the process's stderr (True) or the process
        writes it itself (bmv2's --log-file)."""
        return True

    def log_stream(self) -> IO[str] | None:
        """The running process's log (the pipe `output_streams` asked for)."""
        if self.process is None:
            return None
        return self.process.stderr or self.process.stdout

    def start(self, controllers: Sequence[Any] = ()) -> None:
        for ifname in self.port_interfaces().values():
            with contextlib.suppress(OSError):  # IPv6 may be off altogether
                Path(f"/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6").write_text("1")
            subprocess.run(
                ["ethtool", "-K", ifname, *[w for o in OFFLOADS for w in (o, "off")]],
                check=True,
                capture_output=True,
            )
        argv = self.command()
        if argv is None:
            return
        streams = self.output_streams()
        if self.log_file is not None and self.logs_to_stderr():
            # Nobody reads a pipe (e.g. under `mn`): the log goes to its file.
            streams["stderr"] = open(self.log_file, "w")  # noqa: SIM115 (the process owns it)
        start = self.launch or subprocess.Popen
        self.process = start(argv, **streams, text=True, start_new_session=True)

    def stop_serving(self) -> None:
        """Stop a switch that runs in this process before the network's links go
        (Mininet stops links before switches); a process stops with the node."""

    def stop(self, deleteIntfs: bool = True) -> None:  # noqa: N803 (Mininet's name)
        process = self.process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(3.0)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(3.0)
        self.process = None
        super().stop(deleteIntfs)

    def dpctl(self, *args: str) -> str:
        """Mininet's `dpctl` (the CLI's `dpctl dump-flows`): the P4 tables' entries, read
        over P4Runtime, one line each; `dump-flows TABLE` one table's. Anything else, or
        a switch not answering, is one line saying so."""
        from controlplane.session import ConnectionFailed

        from .table_dump import dump_flows

        if not args or args[0] != "dump-flows" or len(args) > 2:
            return (
                f"dpctl {' '.join(args)}: does not apply to a P4 switch; "
                "`dpctl dump-flows [TABLE]` lists its table entries\n"
            )
        if self.p4runtime_address is None:
            return "dpctl dump-flows: the switch does not answer P4Runtime (not started)\n"
        table = args[1] if len(args) == 2 else None
        try:
            lines = dump_flows(self.p4runtime_address, self.device_id, table)
        except (ConnectionFailed, UserInputError) as err:
            return f"dpctl dump-flows: {err}\n"
        return "".join(f"{line}\n" for line in lines)

    def set_ports_enabled(self, ports: dict[int, str], enabled: bool) -> None:
        """Take chip `ports` ({port: name as gNMI names it}) down or up: a loopback cable
        failed or restored (`CassiniNet.config_logical_link`)."""
        raise UserInputError(f"{self.WHAT} cannot take a port down")

    # --- what the fabric asks of the running switch ----------------------------

    def wait_ready(self, log: SwitchLog, timeout: float) -> str:
        """Until the switch answers P4Runtime (`log` follows its process): the address."""
        raise NotImplementedError

    def failure(self, log: SwitchLog) -> str | None:
        """None while the switch's process runs (or it has none); once it has ended,
        which process and why, with its last log lines."""
        process = self.process
        if process is None or process.poll() is None:
            return None
        log.settle()  # the reader sees EOF right after the exit: quote the last words
        return describe_exit(
            f"{self.WHAT} process", process.pid, process.returncode, list(log.tail)
        )


class SoftSwitch(ChipSwitch):
    """`cassini switch serve` on the chip's server ports; loopback cables stay inside it."""

    WHAT = "the software switch"
    READY = READY_PATTERN
    PINS_LOOP = True

    def __init__(
        self,
        name: str,
        tm_config: str | None = None,
        topology_file: str | None = None,
        seed: int = 0,
        nice: int = 0,
        python: str | None = None,
        loop_cpu: int | None = None,
        **params: Any,
    ) -> None:
        import sys

        self.tm_config = tm_config
        self.topology_file = topology_file
        self.seed = seed
        self.nice = nice
        self.loop_cpu = loop_cpu
        self.python = python or sys.executable
        super().__init__(name, **params)

    @classmethod
    def params(cls, plan: SwitchPlan) -> dict[str, Any]:
        """The TM config as a file in the lab's folder, the seed, niceness and loop core."""
        tm_file = plan.lab.tempdir("switch") / "tm.json"
        tm_file.write_text(json.dumps(tm_config_to_dict(plan.tm), indent=1))
        topology_file = None
        if plan.topology is not None:
            topology_file = str(plan.lab.tempdir("switch") / "topology.json")
            save_topology_file(plan.topology, topology_file)
        return super().params(plan) | {
            "tm_config": str(tm_file),
            "topology_file": topology_file,
            "seed": plan.seed,
            "nice": plan.nice,
            "loop_cpu": plan.loop_cpu,
        }

    def command(self) -> list[str]:
        argv = ["nice", "-n", str(self.nice)] if self.nice else []
        argv += [self.python, "-m", "emulation", "switch", "serve"]
        argv += ["--device-id", str(self.device_id)]
        for port, ifname in sorted(self.port_interfaces().items()):
            argv += ["-i", f"{port}@{ifname}"]
        argv += ["--grpc-server-addr", self.grpc_address]
        if self.tm_config:
            argv += ["--tm-config", self.tm_config]
        if self.topology_file:
            argv += ["--topology", self.topology_file]
        if self.loop_cpu is not None:
            argv += ["--loop-cpu", str(self.loop_cpu)]
        return [*argv, "--seed", str(self.seed)]

    def wait_ready(self, log: SwitchLog, timeout: float) -> str:
        """The address its readiness line names (the log is read from its pipe).

        A switch that refuses its flags (a busy --grpc-server-addr) says why in one
        `cassini: error:` line and exits: that line is the error (UserInputError), not
        the log; the reader sees the end of the pipe before the exit, so wait for it."""
        address = log.ready_address(timeout)
        if address is not None:
            return address
        process = self.process
        if process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(EXIT_WAIT_S)
            log.settle()
        refused = user_error(log.tail)
        if refused is not None:
            raise UserInputError(refused)
        failure = self.failure(log)
        raise RuntimeError(failure or f"{self.WHAT} did not become ready:\n{log.text()}")

    def set_ports_enabled(self, ports: dict[int, str], enabled: bool) -> None:
        """gNMI's config/enabled of each port (the packet loop drops what is sent to a
        down port, counted with its tail drops)."""
        from emulation.softswitch.gnmi_config import set_enabled

        if self.p4runtime_address is None:
            raise UserInputError(f"{self.WHAT} does not answer gNMI (not started)")
        names = gnmi_names(ports, self.topology_file is not None)
        set_enabled(self.p4runtime_address, names, enabled)

    def wait_ready_in_file(self, timeout: float = 30.0) -> str:
        """The address the readiness line names, once `log_file` holds it (a switch no
        one reads a pipe from, e.g. under `mn`); RuntimeError if the process ends."""
        assert self.process is not None and self.log_file is not None
        process, path = self.process, Path(self.log_file)
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = path.read_text(errors="replace") if path.exists() else ""
            match = READY_PATTERN.search(text)
            if match:
                return match.group(1)
            if process.poll() is not None:
                raise RuntimeError(
                    describe_exit(self.WHAT, process.pid, process.returncode, text.splitlines())
                )
            time.sleep(0.05)
        raise RuntimeError(f"{self.WHAT} did not become ready in {timeout:g} s:\n{text}")


def gnmi_names(ports: dict[int, str], named: bool) -> list[str]:
    """The names the switch's gNMI knows `ports` by: theirs when it was given the topology
    (`topologies.port_names`), else `port<N>`.

    >>> gnmi_names({27: "tor1-eth6"}, True), gnmi_names({27: "tor1-eth6"}, False)
    (['tor1-eth6'], ['port27'])
    """
    return [name if named else port_name(port) for port, name in sorted(ports.items())]


class InProcessSwitch(ChipSwitch):
    """The software switch in the caller's process (`SoftwareSwitch`) on the chip's server
    ports; its packet loop is still a process of its own. Nothing is watched: it dies
    only with its caller."""

    WHAT = "the software switch"

    def __init__(
        self,
        name: str,
        tm: TmConfig | None = None,
        seed: int = 0,
        interface_names: dict[int, str] | None = None,
        **params: Any,
    ) -> None:
        self.tm = tm
        self.seed = seed
        self.interface_names = interface_names
        self.switch: SoftwareSwitch | None = None
        super().__init__(name, **params)

    @classmethod
    def params(cls, plan: SwitchPlan) -> dict[str, Any]:
        names = None
        if plan.topology is not None:
            names = interface_names(map_to_chip(plan.topology))
        return super().params(plan) | {"tm": plan.tm, "seed": plan.seed, "interface_names": names}

    def start(self, controllers: Sequence[Any] = ()) -> None:
        super().start(controllers)  # the ports' offloads off; no process
        self.switch = SoftwareSwitch(
            self.device_id,
            self.port_interfaces(),
            self.grpc_address,
            self.tm,
            self.seed,
            interface_names=self.interface_names,
        ).start()

    def wait_ready(self, log: SwitchLog, timeout: float) -> str:
        """The address its P4Runtime service listens on (it is up once started)."""
        assert self.switch is not None and self.switch.grpc_address is not None
        return self.switch.grpc_address

    def set_ports_enabled(self, ports: dict[int, str], enabled: bool) -> None:
        if self.switch is None:
            raise UserInputError(f"{self.WHAT} is not running")
        for name in gnmi_names(ports, self.interface_names is not None):
            self.switch.set_enabled(name, enabled)

    def stop_serving(self) -> None:
        switch, self.switch = self.switch, None
        if switch is not None:
            switch.stop()

    def stop(self, deleteIntfs: bool = True) -> None:  # noqa: N803 (Mininet's name)
        self.stop_serving()
        super().stop(deleteIntfs)
