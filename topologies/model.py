"""The cluster as plain data: servers, logical switches and links.

Everything above this layer (routing, chip mapping, the scheduler, the control
plane) reads a `Topology`; nothing here talks to a device or knows about jobs.
Link capacities live here and only here (one source of truth).
"""

from __future__ import annotations

from dataclasses import dataclass

# A directed link is the ordered pair (from_node, to_node). Traffic of a job is a
# set of directed links; a full-duplex cable is two independent directed links.
DirectedLink = tuple[str, str]


@dataclass(frozen=True)
class Server:
    """A training server: one NIC attached to exactly one ToR/leaf switch."""

    name: str
    gpus: int = 1
    nic_gbps: float = 50.0
    mac: str = ""
    ip: str = ""


@dataclass(frozen=True)
class Switch:
    """A logical switch. `tier` is 'tor', 'agg', 'core', 'leaf', 'spine' or 'edge'."""

    name: str
    tier: str


@dataclass(frozen=True)
class Link:
    """A bidirectional link (cable) between two nodes; each direction has `gbps`."""

    a: str
    b: str
    gbps: float
    delay_us: float = 1.0

    def directions(self) -> tuple[DirectedLink, DirectedLink]:
        return (self.a, self.b), (self.b, self.a)


@dataclass(frozen=True)
class Topology:
    """A cluster. Node names are unique across servers and switches."""

    name: str
    servers: tuple[Server, ...]
    switches: tuple[Switch, ...]
    links: tuple[Link, ...]
    description: str = ""
    # Optional explicit chip dev_ports (e.g. a Tofino's front panel), in the
    # order `chip_mapping.map_to_chip` hands them out; empty = number 1, 2, ...
    chip_ports: tuple[int, ...] = ()

    def node_names(self) -> list[str]:
        return [s.name for s in self.servers] + [s.name for s in self.switches]

    def server(self, name: str) -> Server:
        for s in self.servers:
            if s.name == name:
                return s
        raise KeyError(name)

    def switch(self, name: str) -> Switch:
        for s in self.switches:
            if s.name == name:
                return s
        raise KeyError(name)

    def server_names(self) -> list[str]:
        return [s.name for s in self.servers]

    def total_gpus(self) -> int:
        return sum(s.gpus for s in self.servers)

    def nic_gbps(self) -> float:
        """The line rate job profiles are derived at: the slowest server NIC.

        Profiles are per model, not per server, so a mixed cluster is profiled
        at the rate every worker can reach.
        """
        return min(s.nic_gbps for s in self.servers)

    def capacity_gbps(self) -> dict[DirectedLink, float]:
        """Capacity of every directed link, the one place the scheduler reads it."""
        caps: dict[DirectedLink, float] = {}
        for link in self.links:
            for d in link.directions():
                caps[d] = link.gbps
        return caps
