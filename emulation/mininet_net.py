"""How does a topology become a Mininet network whose one switch is the chip?

Mininet's shape, with the project's parts: `CassiniTopo` is plain data (one
host per server with the topology's MAC and IP, one switch `chip`, one link
per server port); `CassiniHost` is a Mininet `Host` whose namespace is also
given a name (`ip netns attach`), so `ip netns exec`, `ip -n` and the
fabric's packet sockets reach it; `SoftSwitch` is a Mininet `Switch` that
runs `cassini switch serve` with the emulation profile's TM config (the
loopback cables stay inside it), `Bmv2Switch` one that runs
`simple_switch_grpc`. Nothing here programs entries: the fabric
(`emulation.fabric.EmulatedFabric`) does that with
`controlplane.program.program_topology`, as `cassini program` does.

Every namespace, interface and process is recorded in the lab's run file
(`emulation.run_files`) before it exists, so `cassini clean` removes what a killed
run left. Mininet's global cleanup (`mn -c`) is never called: it kills
processes by machine-wide names.

From Python (the fabric builds and programs the network):

    with EmulatedFabric(load_topology("cassini-testbed"), 0.001) as fabric:
        print(fabric.net["s01"].cmd("ping -c1", fabric.net["s24"].IP()))
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import IO, Any

from mininet.node import Host, Switch
from mininet.topo import Topo

from topologies.addressing import SERVER_PREFIX_LEN
from topologies.chip_mapping import ChipMap
from topologies.errors import UserInputError, did_you_mean
from topologies.model import Topology

from .netns import BMV2_PROCESS, OFFLOADS, NetnsLab, _signals_deferred
from .softswitch.tm_config import MTU_FRAME_BYTES

CHIP = "chip"  # the Mininet name of the one switch holding every logical switch
BMV2_BINARY = BMV2_PROCESS  # the name cassini clean looks for
BMV2_CLI = "simple_switch_CLI"
BMV2_CPU_PORT = 255
# (our choice) bmv2 logs every table hit at debug and trace (its default level);
# info keeps its log to start-up, pipeline and errors, and its packet rate up.
BMV2_LOG_LEVEL = "info"


def host_ifname(prefix: str, index: int) -> str:
    """The server end of server `index`'s cable (inside its namespace)."""
    return f"{prefix}h{index}"


def switch_ifname(prefix: str, port: int) -> str:
    """The chip end of chip port `port` (root namespace)."""
    return f"{prefix}p{port}"


class CassiniTopo(Topo):
    """The servers of `topo` as Mininet hosts, each cabled to its chip port of one switch.

    Switch-to-switch links are not Mininet links: they are loopback cables
    inside the chip (the software switch) or veth pairs of the chip's own
    (bmv2), which the switch class makes.
    """

    def build(
        self,
        topology: Topology,
        chip: ChipMap,
        prefix: str = "cas",
        host_params: dict[str, Any] | None = None,
        nic_mbit: Mapping[str, float] | None = None,
        wire_overhead: int = 24,
        **switch_params: Any,
    ) -> None:
        """`host_params` go to every host (`mn` has no partial: cls, lab, neighbours);
        `nic_mbit` is each server's emulated NIC rate (`EmulationProfile.nic_mbit`),
        `wire_overhead` the bytes per frame the switch's TM charges on top."""
        self.addSwitch(CHIP, dpid="1", **switch_params)
        for index, server in enumerate(topology.servers, start=1):
            port = chip.server_port[server.name]
            ip = f"{server.ip}/{SERVER_PREFIX_LEN}" if server.ip else None
            self.addHost(
                server.name,
                ip=ip,
                mac=server.mac,
                namespace=prefix + server.name,
                nic_mbit=(nic_mbit or {}).get(server.name),
                wire_overhead=wire_overhead,
                **(host_params or {}),
            )
            self.addLink(
                server.name,
                CHIP,
                port2=port,
                intfName1=host_ifname(prefix, index),
                intfName2=switch_ifname(prefix, port),
                addr1=server.mac,
            )


# (our choice) Two full frames of burst: a NIC sends one frame at a time, and
# the token bucket needs one frame of slack for its timer; the queue may hold
# 100 ms at the NIC rate (TCP's small-queue limit keeps it far shorter).
NIC_BURST_BYTES = 2 * MTU_FRAME_BYTES
NIC_QUEUE_MS = 100


def nic_qdisc(ifname: str, mbit: float, wire_overhead: int) -> str:
    """The `tc` line that makes a host's cable end send no faster than its NIC.

    Without it a veth sends as fast as the CPU allows, so one flow alone fills
    the switch port's queue and gets marked; on the testbed the sender's NIC,
    at the port's rate, is the bottleneck and the switch queue stays empty.
    Each frame is charged the same wire overhead (preamble, FCS, gap) as the
    switch's traffic manager charges, or the host would send a few per cent
    faster than a port drains.

    >>> nic_qdisc("cash1", 50.0, 24)
    'qdisc replace dev cash1 root stab overhead 24 tbf rate 50000kbit burst 3028 latency 100ms'
    """
    return (
        f"qdisc replace dev {ifname} root stab overhead {wire_overhead} tbf "
        f"rate {round(mbit * 1e3)}kbit burst {NIC_BURST_BYTES} latency {NIC_QUEUE_MS}ms"
    )


def one_frame_per_packet(ifname: str) -> str:
    """The `ip` line that makes TCP hand the host's cable end one frame per packet.

    TCP builds segmentation-offload packets of up to 64 KB whatever the device
    offers, and the token bucket cuts them into frames itself, charging each
    frame its bare length without the wire overhead of `nic_qdisc`'s size table:
    the host then sent 50.3 Mbit/s of wire time into a 50 Mbit/s port (measured
    in 100 ms windows), so one flow alone built a queue at its first hop and was
    marked. With one segment per packet every frame is charged in full.

    >>> one_frame_per_packet("cash1")
    'link set dev cash1 gso_max_segs 1'
    """
    return f"link set dev {ifname} gso_max_segs 1"


def _start_recorded_shell(lab: NetnsLab | None, start: Callable[[], None], node: Any) -> None:
    """Start a node's shell with signals held until its pid is in the run file, so a
    SIGTERM in between cannot leave an unrecorded process behind."""
    with _signals_deferred():
        start()
        if lab is not None:
            lab.claim().add_process(node.pid)


class CassiniHost(Host):
    """A Mininet host whose namespace also has a name, recorded in `lab` before it exists.

    Offloads are turned off and IPv6 is disabled on every interface (a
    user-space switch must see real frames, and nothing the tests did not
    send); `net.ipv4.tcp_ecn=1` so TCP negotiates ECN. `neighbours`
    ((ip, mac) of the other servers) become static ARP entries at config
    time, for networks that `static_arp` is not run on (`mn --custom`).
    """

    def __init__(
        self,
        name: str,
        lab: NetnsLab | None = None,
        namespace: str | None = None,
        neighbours: Sequence[tuple[str, str]] = (),
        nic_mbit: float | None = None,
        wire_overhead: int = 24,
        rps_cpus: str | None = None,
        **params: Any,
    ) -> None:
        self.lab = lab
        self.rps_cpus = rps_cpus  # receive steering of the host's veths (cpu_split.py)
        self.namespace = namespace or name
        self.neighbours = tuple(neighbours)
        self.nic_mbit = nic_mbit
        self.wire_overhead = wire_overhead  # bytes per frame, as the switch's TM charges
        if lab is not None:
            lab.claim().add("namespaces", self.namespace)
            lab.namespaces.append(self.namespace)
        params["inNamespace"] = True
        super().__init__(name, **params)

    def startShell(self, mnopts: str | None = None) -> None:  # noqa: N802 (Mininet's name)
        _start_recorded_shell(self.lab, partial(super().startShell, mnopts), self)
        subprocess.run(
            ["ip", "netns", "attach", self.namespace, str(self.pid)],
            check=True,
            capture_output=True,
            text=True,
        )
        self.cmd("ip link set lo up; sysctl -qw net.ipv4.tcp_ecn=1")

    def config(self, **params: Any) -> Any:
        result = super().config(**params)
        for intf in self.intfList():
            if intf.name == "lo":
                continue
            name = intf.name
            self.cmd(f"sysctl -qw net.ipv6.conf.{name}.disable_ipv6=1")
            self.cmd("ethtool -K " + name + "".join(f" {o} off" for o in OFFLOADS))
            if self.nic_mbit is not None:
                _ip_batch(["ip", "-n", self.namespace], [one_frame_per_packet(name)])
                _ip_batch(
                    ["tc", "-n", self.namespace],
                    [nic_qdisc(name, self.nic_mbit, self.wire_overhead)],
                )
            if self.rps_cpus is not None:
                steer_receive(self.namespace, name, self.rps_cpus)
        mine = self.IP()
        lines = neighbour_lines([n for n in self.neighbours if n[0] != mine], self.defaultIntf())
        if lines:
            _ip_batch(["ip", "-n", self.namespace], lines)
        return result

    def terminate(self) -> None:
        super().terminate()
        subprocess.run(["ip", "netns", "delete", self.namespace], capture_output=True)


def neighbour_lines(neighbours: Sequence[tuple[str, str]], dev: Any) -> list[str]:
    """`ip -batch` lines: a permanent ARP entry per (ip, mac) on `dev`.

    >>> neighbour_lines([("10.0.0.2", "02:00:00:00:00:02")], "h1")
    ['neigh replace 10.0.0.2 lladdr 02:00:00:00:00:02 dev h1 nud permanent']
    """
    return [f"neigh replace {ip} lladdr {mac} dev {dev} nud permanent" for ip, mac in neighbours]


def steer_receive(namespace: str, ifname: str, rps_cpus: str) -> None:
    """Receive steering (RPS) of one interface in a named namespace to `rps_cpus` (a hex
    mask); `ip netns exec` mounts the namespace's own /sys, where the interface is."""
    path = f"/sys/class/net/{ifname}/queues/rx-0/rps_cpus"
    subprocess.run(
        ["ip", "netns", "exec", namespace, "sh", "-c", f"echo {rps_cpus} > {path}"],
        check=True,
        capture_output=True,
        text=True,
    )


def _ip_batch(argv: Sequence[str], lines: Sequence[str]) -> None:
    subprocess.run(
        [*argv, "-batch", "-"],
        input="\n".join(lines) + "\n",
        text=True,
        check=True,
        capture_output=True,
    )


def static_arp(hosts: Sequence[Host]) -> None:
    """Permanent ARP entries for every other host, one `ip -batch` per host.

    (our choice) The chip forwards unicast destination MACs only (no broadcast
    rule), so ARP could not resolve; static entries also keep the counters
    free of anything but the traffic a test sends.
    """
    for host in hosts:
        others = [(o.IP(), o.MAC()) for o in hosts if o is not host and o.IP()]
        lines = neighbour_lines(others, host.defaultIntf())
        if lines:
            namespace = getattr(host, "namespace", None)
            argv = ["ip", "-n", namespace] if namespace else ["mnexec", "-a", str(host.pid), "ip"]
            _ip_batch(argv, lines)


class ChipSwitch(Switch):
    """The chip as one Mininet switch in the root namespace: a process on its ports.

    `launch(argv, **popen_kwargs)` starts the process (the fabric passes its
    lab's `popen`, which records the pid); the process's stderr is
    `self.process.stderr`, for the fabric to read until it names its
    address. Subclasses say which argv (`command`).
    """

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
        params.setdefault("inNamespace", False)
        super().__init__(name, **params)

    def startShell(self, mnopts: str | None = None) -> None:  # noqa: N802 (Mininet's name)
        _start_recorded_shell(self.lab, partial(super().startShell, mnopts), self)
        if self.lab is not None:
            self.lab.processes.append(self.shell)

    def port_interfaces(self) -> dict[int, str]:
        """{chip port: interface} of the ports Mininet cabled (server ports)."""
        return {port: intf.name for intf, port in self.ports.items() if intf.name != "lo"}

    def command(self) -> list[str] | None:
        """The switch process's argv; None: no process (the caller runs the switch itself)."""
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


class SoftSwitch(ChipSwitch):
    """`cassini switch serve` on the chip's server ports; loopback cables stay inside it."""

    def __init__(
        self,
        name: str,
        tm_config: str | None = None,
        seed: int = 0,
        nice: int = 0,
        python: str | None = None,
        loop_cpu: int | None = None,
        **params: Any,
    ) -> None:
        import sys

        self.tm_config = tm_config
        self.seed = seed
        self.nice = nice
        self.loop_cpu = loop_cpu
        self.python = python or sys.executable
        super().__init__(name, **params)

    def command(self) -> list[str]:
        argv = ["nice", "-n", str(self.nice)] if self.nice else []
        argv += [self.python, "-m", "emulation", "switch", "serve"]
        argv += ["--device-id", str(self.device_id)]
        for port, ifname in sorted(self.port_interfaces().items()):
            argv += ["-i", f"{port}@{ifname}"]
        argv += ["--grpc-server-addr", self.grpc_address]
        if self.tm_config:
            argv += ["--tm-config", self.tm_config]
        if self.loop_cpu is not None:
            argv += ["--loop-cpu", str(self.loop_cpu)]
        return [*argv, "--seed", str(self.seed)]


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

    def __init__(
        self,
        name: str,
        cables: Sequence[tuple[int, int]] = (),
        prefix: str = "cas",
        thrift_port: int = 9090,
        queue_commands: Sequence[str] = (),
        log_level: str = BMV2_LOG_LEVEL,
        **params: Any,
    ) -> None:
        self.cables = tuple(cables)
        self.prefix = prefix
        self.thrift_port = thrift_port
        self.queue_commands = tuple(queue_commands)
        self.log_level = log_level
        self.cable_interfaces: dict[int, str] = {}
        super().__init__(name, **params)

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

    def all_interfaces(self) -> dict[int, str]:
        """{chip port: interface} of every port bmv2 is given: server ports and cable ends."""
        return {**self.port_interfaces(), **self.cable_interfaces}

    def command(self) -> list[str]:
        """simple_switch_grpc's argv as bmv2 documents it: general options, then `--`
        and the target's (`--grpc-server-addr`, `--cpu-port`)."""
        argv = [BMV2_BINARY, "--no-p4", "--device-id", str(self.device_id)]
        for port, ifname in sorted(self.all_interfaces().items()):
            argv += ["-i", f"{port}@{ifname}"]
        argv += ["--thrift-port", str(self.thrift_port), "--log-level", self.log_level]
        if self.log_file:
            argv += ["--log-file", self.log_file, "--log-flush"]
        return [
            *argv,
            "--",
            "--grpc-server-addr",
            self.grpc_address,
            "--cpu-port",
            str(BMV2_CPU_PORT),
        ]

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

    def cli_commands(self) -> str:
        """What `configure_queues` feeds simple_switch_CLI."""
        return "".join(line + "\n" for line in self.queue_commands)

    def configure_queues(self) -> None:
        """Send `queue_commands` to bmv2's Thrift server (after it is up)."""
        from controlplane.bmv2 import run_cli

        if self.queue_commands:
            run_cli(self.queue_commands, self.thrift_port, BMV2_CLI)

    def stop(self, deleteIntfs: bool = True) -> None:  # noqa: N803 (Mininet's name)
        super().stop(deleteIntfs)
        for ifname in self.cable_interfaces.values():
            if Path("/sys/class/net", ifname).exists():
                subprocess.run(["ip", "link", "delete", ifname], capture_output=True)


def bmv2_available() -> str | None:
    """None when bmv2 can run here, else why not (a test's skip reason)."""
    missing = [tool for tool in (BMV2_BINARY, BMV2_CLI) if shutil.which(tool) is None]
    if missing:
        return f"{' and '.join(missing)} not on PATH (bmv2 is not installed)"
    return None


TARGETS = {"softswitch": SoftSwitch, "bmv2": Bmv2Switch}


def check_target(name: str) -> str:
    """A target name `--target` accepts, or the error naming the known ones."""
    if name not in TARGETS:
        raise UserInputError("--target: " + did_you_mean(name, TARGETS, "target"))
    return name


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
