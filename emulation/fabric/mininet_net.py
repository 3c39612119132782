"""How does a topology become a Mininet network whose one switch is the chip?

Mininet's shape, with the project's parts: `CassiniTopo` is plain data (one
host per server with the topology's MAC and IP, one switch `chip`, one link
per server port); `CassiniHost` is a Mininet `Host` whose namespace is also
given a name (`ip netns attach`), so `ip netns exec`, `ip -n` and the
fabric's packet sockets reach it. The switch is one of
`emulation.fabric.mininet_switches` (the software switch, or bmv2's
`simple_switch_grpc`). Nothing here programs entries: the fabric
(`emulation.fabric.emulated.EmulatedFabric`) does that with
`controlplane.program.program_topology`, as `cassini program` does.

Every namespace, interface and process is recorded in the lab's run file
(`emulation.housekeeping.run_files`) before it exists, so `cassini clean` removes what a killed
run left. Mininet's global cleanup (`mn -c`) is never called: it kills
processes by machine-wide names.

From Python (the fabric builds and programs the network):

    with EmulatedFabric(load_topology("cassini-testbed"), FabricOptions(scale=0.001)) as fabric:
        print(fabric.net["s01"].cmd("ping -c1", fabric.net["s24"].IP()))
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any

from mininet.log import output
from mininet.net import Mininet
from mininet.node import Host
from mininet.topo import Topo

from emulation.housekeeping.signals import signals_deferred
from emulation.softswitch.tm_config import MTU_FRAME_BYTES
from topologies.addressing import SERVER_PREFIX_LEN
from topologies.chip_mapping import ChipMap
from topologies.errors import UserInputError
from topologies.model import Topology

from .mininet_iperf import run_iperf
from .mininet_logical import (
    LogicalLink,
    LogicalSwitch,
    host_ifname,
    logical_link,
    logical_switches,
)
from .netns import OFFLOADS, NetnsLab

CHIP = "chip"  # the Mininet name of the one switch holding every logical switch


def switch_ifname(prefix: str, port: int) -> str:
    """The chip end of chip port `port`: `<prefix>p<port>`, by its chip port.

    It lives in the root namespace with the switch process, where every fabric on
    the machine puts its ports, so the run's prefix keeps two fabrics' ports
    apart and lets `cassini clean` find them; gNMI names the port `tor1-eth1`
    (`topologies.port_names`), which does not fit Linux's 15 characters beside
    a prefix (our choice: the chip port's number instead).

    >>> switch_ifname("cas3fa1", 7)
    'cas3fa1p7'
    """
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
        self.cassini_topology, self.cassini_chip = topology, chip  # for its logical switches
        self.addSwitch(CHIP, dpid="1", **switch_params)
        for server in topology.servers:
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
                intfName1=host_ifname(server.name),
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

    >>> nic_qdisc("s01-eth0", 50.0, 24)
    'qdisc replace dev s01-eth0 root stab overhead 24 tbf rate 50000kbit burst 3028 latency 100ms'
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

    >>> one_frame_per_packet("s01-eth0")
    'link set dev s01-eth0 gso_max_segs 1'
    """
    return f"link set dev {ifname} gso_max_segs 1"


def start_recorded_shell(lab: NetnsLab | None, start: Callable[[], None], node: Any) -> None:
    """Start a node's shell with signals held until its pid is in the run file, so a
    SIGTERM in between cannot leave an unrecorded process behind."""
    with signals_deferred():
        start()
        if lab is not None:
            lab.claim().add_process(node.pid)


class CassiniHost(Host):
    """A Mininet host whose namespace also has a name, recorded in `lab` before it exists.

    Offloads are turned off and IPv6 is disabled on every interface (a
    user-space switch must see real frames, and nothing the tests did not
    send); `net.ipv4.tcp_ecn=1` so TCP negotiates ECN. `neighbours`
    ((ip, mac) of the other servers) become static ARP entries at config
    time, for networks that `static_arp` is not run on (`.venv/bin/mn --custom`).
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
        start_recorded_shell(self.lab, partial(super().startShell, mnopts), self)
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


def static_arp(hosts: Sequence[Host], only: Sequence[Host] | None = None) -> None:
    """Permanent ARP entries for every other host, one `ip -batch` per host (of `only`
    when given: a host whose entries went with its interface).

    (our choice) The chip forwards unicast destination MACs only (no broadcast
    rule), so ARP could not resolve; static entries also keep the counters
    free of anything but the traffic a test sends.
    """
    for host in hosts if only is None else only:
        others = [(o.IP(), o.MAC()) for o in hosts if o is not host and o.IP()]
        lines = neighbour_lines(others, host.defaultIntf())
        if lines:
            namespace = getattr(host, "namespace", None)
            argv = ["ip", "-n", namespace] if namespace else ["mnexec", "-a", str(host.pid), "ip"]
            _ip_batch(argv, lines)


class CassiniNet(Mininet):
    """Mininet's network, with the verbs that did not fit the fabric made to fit.

    `iperf` (the CLI's `iperf` and `iperfudp`) runs `emulation.fabric.mininet_iperf.run_iperf`:
    bounded in time, touching only the two processes it starts, where Mininet's
    hung and ran `killall -9 iperf` machine-wide. `configLinkStatus` (`link s01
    chip down`/`up`) gives a host back its static ARP entries when its cable comes
    up: the kernel drops even permanent neighbours with the interface, and the
    chip answers no ARP, so the host stayed cut off.

    The logical switches are nodes too (`emulation.fabric.mininet_logical`): `nodes`
    lists them, `net["tor1"]` names its chip ports and links, and
    `configLinkStatus("tor1", "agg2", "down")` (`link tor1 agg2 down`) fails
    the loopback cable between them on the chip, both ends, until `up`.
    What the traffic does then is what the routing says: the chip's entries
    are static (one egress per ingress port and destination, from
    `topologies.routing.Router`; no control plane reacts to a link's state),
    so the pairs whose path crosses the link stop, their frames dropped at
    the down port and counted, the others go on, and on `up` they resume on
    the same path.
    """

    logical: dict[str, LogicalSwitch]

    def build(self) -> None:
        super().build()
        topo = self.topo
        self.logical = {}
        if isinstance(topo, CassiniTopo):
            self.logical = logical_switches(topo.cassini_topology, topo.cassini_chip)
            self.nameToNode.update(self.logical)

    def __iter__(self) -> Iterator[str]:
        yield from super().__iter__()
        yield from getattr(self, "logical", {})

    def iperf(  # noqa: PLR0913 (Mininet's signature)
        self,
        hosts: Sequence[Host] | None = None,
        l4Type: str = "TCP",  # noqa: N803 (Mininet's names)
        udpBw: str = "10M",  # noqa: N803
        fmt: str | None = None,
        seconds: float = 5,
        port: int = 5001,
    ) -> list[str]:
        client, server = hosts or (self.hosts[0], self.hosts[-1])
        output(f"*** Iperf: testing {l4Type} bandwidth between {client} and {server}\n")
        result = run_iperf(client, server, l4Type, udpBw, fmt, seconds, port)
        output(f"*** Results: {result}\n")
        return result

    def configLinkStatus(self, src: str, dst: str, status: str) -> None:  # noqa: N802
        logical = getattr(self, "logical", {})
        if src in logical or dst in logical:
            self.config_logical_link(src, dst, status)
            return
        super().configLinkStatus(src, dst, status)
        if status != "up":
            return
        ends = [self.nameToNode.get(name) for name in (src, dst)]
        came_up = [node for node in ends if node in self.hosts]
        if came_up:
            static_arp(self.hosts, came_up)

    def config_logical_link(self, a: str, b: str, status: str) -> LogicalLink:
        """Fail (`down`) or restore (`up`) the loopback cable between logical switches
        `a` and `b`, both ends, on the chip; the link. UserInputError for anything
        that is not such a link, naming what is."""
        if status not in ("up", "down"):
            raise UserInputError(f"link {a} {b} {status}: the status is up or down")
        for name in (a, b):
            if name not in self.logical:
                raise UserInputError(
                    f"link {a} {b}: {name} is not a logical switch (a server's cable is "
                    f"`link SERVER {CHIP} down|up`; switches: {', '.join(sorted(self.logical))})"
                )
        link = logical_link(self.logical, a, b)
        chip = self.nameToNode[CHIP]
        chip.set_ports_enabled(link.ports(), status == "up")
        output(
            f"*** {link.name_a} (chip port {link.port_a}) <-> {link.name_b} "
            f"(chip port {link.port_b}): {status}\n"
        )
        return link
