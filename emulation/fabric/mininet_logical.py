"""Which logical switches and links does the chip hold, as Mininet shows and fails them?

Every logical switch of the topology lives on the one chip (`CHIP`), on the
chip ports `topologies.chip_mapping.map_to_chip` gives it; a
switch-to-switch link is a loopback cable between two of those ports.
`LogicalSwitch` is what Mininet's CLI and Python API see of one: a name in
`nodes`, `net["tor1"]` naming its chip ports (`tor1-eth1`, as
`topologies.port_names` and gNMI name them) and its links. It runs no
commands: it is a set of ports of the chip's pipeline, not a process.

Mininet's `net` shows each of its ports with the far end (`ChipPort`): a
server's interface (`host_ifname`, named as Mininet names a host's) or the
peer port of a cable. `logical_link` finds the cable between two logical switches; failing it
(`link tor1 agg2 down`) takes both its ends down on the chip
(`emulation.fabric.mininet_switches.ChipSwitch.set_ports_enabled`).

>>> from topologies.generators import cassini_testbed
>>> from topologies.chip_mapping import map_to_chip
>>> switches = logical_switches(cassini_testbed(), map_to_chip(cassini_testbed()))
>>> switches["tor1"].links["agg2"]
LogicalLink(a='tor1', b='agg2', port_a=27, port_b=28, name_a='tor1-eth6', name_b='agg2-eth1')
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from emulation.housekeeping.prefixes import IFNAMSIZ
from topologies.chip_mapping import ChipMap
from topologies.errors import UserInputError
from topologies.model import Topology
from topologies.port_names import interface_names


def host_ifname(server: str) -> str:
    """The server end of its cable, as Mininet names a host's first interface.

    It is made inside the server's own namespace (Mininet creates a host's end
    of a link from the host's shell) and never exists in the root namespace,
    so two fabrics on one machine, each with an `s01-eth0`, cannot collide and
    `cassini clean` need not know it: it goes with the namespace.

    A server name too long for Linux's 15 characters gives plain `eth0` (alone
    in its namespace, it is still unique).

    >>> host_ifname("s01"), host_ifname("server-rack12-07")
    ('s01-eth0', 'eth0')
    """
    name = f"{server}-eth0"
    return name if len(name) <= IFNAMSIZ else "eth0"


@dataclass(frozen=True)
class LogicalLink:
    """A switch-to-switch link: the loopback cable between chip ports port_a (a's) and
    port_b (b's), with the ports' names."""

    a: str
    b: str
    port_a: int
    port_b: int
    name_a: str
    name_b: str

    def ports(self) -> dict[int, str]:
        """{chip port: name} of both ends."""
        return {self.port_a: self.name_a, self.port_b: self.name_b}


@dataclass(frozen=True)
class PortLink:
    """What Mininet's `net` command reads of a port's link: its two ends."""

    intf1: Any
    intf2: Any


@dataclass(frozen=True)
class ChipPort:
    """One port of a logical switch as Mininet's `net` shows it: its name and the far end
    (the server's interface, or the peer port of its loopback cable)."""

    name: str
    far_end: str

    @property
    def link(self) -> PortLink:
        return PortLink(self, self.far_end)

    def __str__(self) -> str:
        return self.name


@dataclass
class LogicalSwitch:
    """One logical switch as a Mininet node name: its chip ports and links (see the module).

    `ports` is {chip port: name}; `links` {neighbour: LogicalLink} for switch
    neighbours, `servers` {server: chip port} for its servers.
    """

    name: str
    ports: dict[int, str]
    links: dict[str, LogicalLink] = field(default_factory=dict)
    servers: dict[str, int] = field(default_factory=dict)
    waiting: bool = False  # Mininet's CLI asks every node whether a command runs

    def intfList(self) -> list[ChipPort]:  # noqa: N802 (Mininet's name)
        """Its chip ports, each with what is at its far end (no Linux interfaces)."""
        far = {port: host_ifname(server) for server, port in self.servers.items()}
        far |= {link.port_a: link.name_b for link in self.links.values()}
        return [ChipPort(self.ports[p], far.get(p, "")) for p in sorted(self.ports)]

    def intfNames(self) -> list[str]:  # noqa: N802 (Mininet's name)
        """The names of its chip ports (Mininet's `intfs` command)."""
        return [self.ports[p] for p in sorted(self.ports)]

    def sendCmd(self, *args: Any, **kwargs: Any) -> None:  # noqa: N802 (Mininet's name)
        raise UserInputError(
            f"{self.name} is a logical switch inside the chip and runs no commands "
            f"(its ports: {', '.join(self.intfNames())}); `link {self.name} NEIGHBOUR "
            "down|up` fails or restores one of its links"
        )

    def cmd(self, *args: Any, **kwargs: Any) -> str:
        self.sendCmd()
        return ""

    def __repr__(self) -> str:
        ports = " ".join(f"{name}:{port}" for port, name in sorted(self.ports.items()))
        return f"<LogicalSwitch {self.name}: chip ports {ports}>"


def logical_switches(topology: Topology, chip: ChipMap) -> dict[str, LogicalSwitch]:
    """{name: LogicalSwitch} of every logical switch `chip` lays onto the chip."""
    names = interface_names(chip)
    switches = {
        name: LogicalSwitch(name, {p: names[p] for p in chip.ports_of_switch(name)})
        for name in sorted(set(chip.switch_of_port.values()))
    }
    for (a, b), port_a in chip.link_ports.items():
        port_b = chip.link_ports[(b, a)]
        switches[a].links[b] = LogicalLink(a, b, port_a, port_b, names[port_a], names[port_b])
    for server, port in chip.server_port.items():
        switches[chip.switch_of_port[port]].servers[server] = port
    return switches


def logical_link(switches: dict[str, LogicalSwitch], a: str, b: str) -> LogicalLink:
    """The cable between logical switches `a` and `b`; UserInputError naming a's
    neighbours when there is none."""
    link = switches[a].links.get(b)
    if link is None:
        neighbours = ", ".join(sorted(switches[a].links)) or "none"
        raise UserInputError(f"no link between {a} and {b} ({a}'s switch neighbours: {neighbours})")
    return link
