"""Where each logical switch lives on one switch chip, and what it forwards.

Every logical port is a physical chip port. A server cable takes one port; a
switch-to-switch link takes two ports joined by a loopback cable. A port
belongs to a logical switch only through the forwarding entries
<ingress_port, dst_mac> -> egress_port: a packet entering a port of switch X
is only ever sent out of a port of X, which `walk` checks hop by hop.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from .addressing import normalize_mac
from .errors import UserInputError
from .model import DirectedLink, Topology
from .routing import Router
from .tiers import oversubscription

__all__ = [
    "CPU_PORT",
    "MAX_SOFTWARE_PORT",
    "ChipMap",
    "ForwardingEntry",
    "ForwardingWalkError",
    "forwarding_entries",
    "forwarding_table",
    "map_to_chip",
    "oversubscription",
    "walk",
]

# bmv2 is started with --cpu-port 255 and drops to port 511 (bit<9> all ones),
# so software targets number ports 1..510 and skip 255.
CPU_PORT = 255
MAX_SOFTWARE_PORT = 510
MAX_DEV_PORT = 511


@dataclass(frozen=True)
class ChipMap:
    """Logical switches laid onto chip ports.

    `link_ports[(a, b)]` is a's port facing b; `loopback_pairs` holds the two
    ports of each switch-to-switch cable; `neighbor_of_port[p]` is the node a
    packet leaving p reaches (server or the peer logical switch).
    """

    server_port: Mapping[str, int]
    link_ports: Mapping[DirectedLink, int]
    loopback_pairs: tuple[tuple[int, int], ...]
    switch_of_port: Mapping[int, str]
    neighbor_of_port: Mapping[int, str]
    peer_of_port: Mapping[int, int]

    def ports(self) -> tuple[int, ...]:
        """Every used chip port, ascending."""
        return tuple(sorted(self.switch_of_port))

    def ports_of_switch(self, name: str) -> tuple[int, ...]:
        """The chip ports that make up logical switch `name`, ascending."""
        return tuple(sorted(p for p, sw in self.switch_of_port.items() if sw == name))

    def peer_port(self, port: int) -> int | None:
        """The port at the other end of the loopback cable; None for server ports."""
        return self.peer_of_port.get(port)

    def node_behind_port(self, port: int) -> str:
        """The node (server or logical switch) on the far side of `port`."""
        try:
            return self.neighbor_of_port[port]
        except KeyError:
            raise UserInputError(f"chip port {port} is not used by this topology") from None

    def port_toward(self, switch: str, neighbor: str) -> int:
        """The port of `switch` that faces `neighbor` (a server or a switch)."""
        port = self.link_ports.get((switch, neighbor))
        if port is None:
            port = self.server_port.get(neighbor)
            if port is None or self.switch_of_port[port] != switch:
                raise UserInputError(f"switch {switch} has no port facing {neighbor}")
        return port


@dataclass(frozen=True)
class ForwardingEntry:
    """One <ingress_port, dst_mac> -> egress_port rule of logical switch `switch`."""

    switch: str
    ingress_port: int
    dst_mac: str
    egress_port: int


class ForwardingWalkError(RuntimeError):
    """Forwarding entries that lose, loop or leak a packet: a bug, not user input."""


def map_to_chip(topo: Topology, numbering: Sequence[int] | None = None) -> ChipMap:
    """Hand out chip ports: servers first, then each switch link's two ends, in topology order.

    `numbering` lists the dev_ports to use (a Tofino's front panel); without it
    `topo.chip_ports` is used, and without those ports are numbered 1, 2, ...
    skipping the CPU port 255.

    >>> from topologies.generators import cassini_testbed
    >>> chip = map_to_chip(cassini_testbed())
    >>> len(chip.ports()), len(chip.loopback_pairs), chip.server_port["s01"]
    (72, 24, 1)
    """
    servers = set(topo.server_names())
    switch_links = [ln for ln in topo.links if ln.a not in servers and ln.b not in servers]
    needed = len(topo.servers) + 2 * len(switch_links)
    ports = _port_numbers(topo, numbering, needed)

    server_port: dict[str, int] = {}
    switch_of_port: dict[int, str] = {}
    neighbor_of_port: dict[int, str] = {}
    tor_of = {}
    for link in topo.links:
        if link.a in servers:
            tor_of[link.a] = link.b
        elif link.b in servers:
            tor_of[link.b] = link.a
    cursor = iter(ports)
    for server in topo.servers:
        port = next(cursor)
        server_port[server.name] = port
        switch_of_port[port] = tor_of[server.name]
        neighbor_of_port[port] = server.name

    link_ports: dict[DirectedLink, int] = {}
    pairs: list[tuple[int, int]] = []
    peer: dict[int, int] = {}
    for link in switch_links:
        port_a, port_b = next(cursor), next(cursor)
        link_ports[(link.a, link.b)] = port_a
        link_ports[(link.b, link.a)] = port_b
        switch_of_port[port_a], neighbor_of_port[port_a] = link.a, link.b
        switch_of_port[port_b], neighbor_of_port[port_b] = link.b, link.a
        pairs.append((port_a, port_b))
        peer[port_a], peer[port_b] = port_b, port_a

    return ChipMap(
        server_port=MappingProxyType(server_port),
        link_ports=MappingProxyType(link_ports),
        loopback_pairs=tuple(pairs),
        switch_of_port=MappingProxyType(switch_of_port),
        neighbor_of_port=MappingProxyType(neighbor_of_port),
        peer_of_port=MappingProxyType(peer),
    )


def forwarding_entries(
    topo: Topology, chip: ChipMap, router: Router | None = None
) -> tuple[ForwardingEntry, ...]:
    """Every rule of every logical switch: for each of its ports and each server MAC.

    The egress is the next hop `Router.next_hop` picks for a packet that came
    from the node behind the ingress port, so the chip forwards every pair on
    exactly `Router.path(src, dst)`. No rule for the server on the ingress port
    itself, nor where the only next hop is back out the ingress port.
    """
    router = router or Router(topo)
    missing = [s.name for s in topo.servers if not s.mac]
    if missing:
        raise UserInputError(f"servers without a MAC cannot be forwarded to: {', '.join(missing)}")
    entries: list[ForwardingEntry] = []
    for ingress in chip.ports():
        switch = chip.switch_of_port[ingress]
        came_from = chip.neighbor_of_port[ingress]
        for server in topo.servers:
            if server.name == came_from:
                continue
            nxt = router.next_hop(switch, came_from, server.name)
            if nxt is None:
                continue
            egress = chip.port_toward(switch, nxt)
            entries.append(ForwardingEntry(switch, ingress, normalize_mac(server.mac), egress))
    return tuple(entries)


def forwarding_table(
    entries: Iterable[ForwardingEntry],
) -> Mapping[tuple[int, str], ForwardingEntry]:
    """Entries keyed the way the data plane looks them up: (ingress_port, dst_mac)."""
    return MappingProxyType({(e.ingress_port, normalize_mac(e.dst_mac)): e for e in entries})


def walk(
    topo: Topology,
    chip: ChipMap,
    entries: Iterable[ForwardingEntry] | Mapping[tuple[int, str], ForwardingEntry],
    src_server: str,
    dst_server: str,
) -> list[tuple[str, int, int]]:
    """Follow the rules from src's cable to dst's: [(switch, ingress, egress), ...].

    Raises ForwardingWalkError if a packet is dropped (no rule), leaves its
    logical switch, reaches the wrong server or loops. Pass `forwarding_table`'s
    result instead of the entries to walk many pairs without re-indexing.
    """
    table = entries if isinstance(entries, Mapping) else forwarding_table(entries)
    dst_mac = normalize_mac(topo.server(dst_server).mac)
    port = chip.server_port[src_server]
    hops: list[tuple[str, int, int]] = []
    seen: set[int] = set()
    while True:
        if port in seen:
            raise ForwardingWalkError(f"{src_server}->{dst_server}: loop at port {port}: {hops}")
        seen.add(port)
        switch = chip.switch_of_port[port]
        entry = table.get((port, dst_mac))
        if entry is None:
            raise ForwardingWalkError(
                f"{src_server}->{dst_server}: no rule for port {port} on {switch}: {hops}"
            )
        egress = entry.egress_port
        if chip.switch_of_port.get(egress) != switch or entry.switch != switch:
            raise ForwardingWalkError(
                f"{src_server}->{dst_server}: port {port} of {switch} forwards to port "
                f"{egress} of {chip.switch_of_port.get(egress)}"
            )
        hops.append((switch, port, egress))
        peer = chip.peer_port(egress)
        if peer is None:
            reached = chip.node_behind_port(egress)
            if reached != dst_server:
                raise ForwardingWalkError(
                    f"{src_server}->{dst_server}: delivered to {reached}: {hops}"
                )
            return hops
        port = peer


def _port_numbers(topo: Topology, numbering: Sequence[int] | None, needed: int) -> list[int]:
    explicit = list(numbering) if numbering is not None else list(topo.chip_ports)
    if explicit:
        if len(explicit) < needed:
            raise UserInputError(
                f"topology '{topo.name}' needs {needed} chip ports "
                f"({len(topo.servers)} servers + 2 per switch link), only {len(explicit)} given"
            )
        if len(set(explicit)) != len(explicit):
            dup = next(p for p in explicit if explicit.count(p) > 1)
            raise UserInputError(f"chip port {dup} is listed twice")
        bad = [p for p in explicit if not 0 <= p <= MAX_DEV_PORT]
        if bad:
            raise UserInputError(f"chip port {bad[0]} does not fit bit<9> (0..{MAX_DEV_PORT})")
        return explicit[:needed]
    ports = [p for p in range(1, MAX_SOFTWARE_PORT + 1) if p != CPU_PORT]
    if needed > len(ports):
        raise UserInputError(
            f"topology '{topo.name}' needs {needed} chip ports but one chip has "
            f"{len(ports)} (1..{MAX_SOFTWARE_PORT} without CPU port {CPU_PORT})"
        )
    return ports[:needed]
