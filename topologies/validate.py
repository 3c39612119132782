"""Is this topology one the rest of the harness can run on?

Checks that would otherwise surface far away (a KeyError in the simulator, a
packet dropped on the chip) are caught here and reported with the element's
position in the file (`links[3]`, `servers[0]`) and its names.
"""

from __future__ import annotations

import math
from collections import deque

from .addressing import is_valid_ip, is_valid_mac, normalize_mac
from .errors import UserInputError, did_you_mean
from .model import Topology
from .names import check_name
from .tiers import KNOWN_TIERS


def validate(topo: Topology) -> None:
    """Raise UserInputError naming the first bad element; return None if sound.

    >>> from topologies.model import Link, Server, Switch, Topology
    >>> bad = Topology("t", (Server("s1"),), (Switch("tor1", "tor"),), (Link("s1", "tor2", 50),))
    >>> validate(bad)
    Traceback (most recent call last):
    ...
    topologies.errors.UserInputError: links[0] (s1 - tor2): no node named 'tor2'. Did you mean 'tor1'? (known: s1, tor1)
    """
    _check_nodes(topo)
    _check_links(topo)
    _check_server_attachment(topo)
    _check_connected(topo)
    _check_chip_ports(topo)


def _check_nodes(topo: Topology) -> None:
    if not topo.servers:
        raise UserInputError(f"topology '{topo.name}' has no servers")
    seen: dict[str, str] = {}
    entries = [(f"servers[{i}]", s.name) for i, s in enumerate(topo.servers)] + [
        (f"switches[{i}]", s.name) for i, s in enumerate(topo.switches)
    ]
    for where, name in entries:
        # Names become Mininet hosts, namespaces and file names: safe names only.
        check_name(name, "node name", f"{where}.name")
        if name in seen:
            raise UserInputError(f"{where}: duplicate node name '{name}' (also {seen[name]})")
        seen[name] = where
    for i, sw in enumerate(topo.switches):
        if sw.tier not in KNOWN_TIERS:
            raise UserInputError(
                f"switches[{i}] ({sw.name}): " + did_you_mean(sw.tier, KNOWN_TIERS, "tier")
            )
    macs: dict[str, str] = {}
    ips: dict[str, str] = {}
    for i, s in enumerate(topo.servers):
        where = f"servers[{i}] ({s.name})"
        if not isinstance(s.gpus, int) or s.gpus < 1:
            raise UserInputError(f"{where}.gpus: must be an integer >= 1, got {s.gpus!r}")
        if not _finite_positive(s.nic_gbps):
            raise UserInputError(f"{where}.nic_gbps: must be > 0, got {s.nic_gbps!r}")
        if s.mac:
            if not is_valid_mac(s.mac):
                raise UserInputError(
                    f"{where}.mac: not a unicast MAC like 02:00:00:00:00:01, got '{s.mac}'"
                )
            key = normalize_mac(s.mac)
            if key in macs:
                raise UserInputError(f"{where}.mac: {s.mac} already used by {macs[key]}")
            macs[key] = s.name
        if s.ip:
            if not is_valid_ip(s.ip):
                raise UserInputError(f"{where}.ip: not an IPv4 address, got '{s.ip}'")
            if s.ip in ips:
                raise UserInputError(f"{where}.ip: {s.ip} already used by {ips[s.ip]}")
            ips[s.ip] = s.name


def _check_links(topo: Topology) -> None:
    names = set(topo.node_names())
    servers = set(topo.server_names())
    seen: dict[frozenset[str], int] = {}
    for i, link in enumerate(topo.links):
        where = f"links[{i}] ({link.a} - {link.b})"
        for end in (link.a, link.b):
            if end not in names:
                raise UserInputError(f"{where}: " + did_you_mean(end, names, "node"))
        if link.a == link.b:
            raise UserInputError(f"{where}: a link must join two different nodes")
        if link.a in servers and link.b in servers:
            raise UserInputError(f"{where}: links two servers; a server must connect to a switch")
        if not _finite_positive(link.gbps):
            raise UserInputError(f"{where}.gbps: must be > 0, got {link.gbps!r}")
        if not (isinstance(link.delay_us, int | float) and math.isfinite(link.delay_us)) or (
            link.delay_us < 0
        ):
            raise UserInputError(f"{where}.delay_us: must be >= 0, got {link.delay_us!r}")
        key = frozenset((link.a, link.b))
        if key in seen:
            raise UserInputError(f"{where}: duplicate link (same nodes as links[{seen[key]}])")
        seen[key] = i


def _check_server_attachment(topo: Topology) -> None:
    attached: dict[str, list[str]] = {s.name: [] for s in topo.servers}
    for link in topo.links:
        if link.a in attached:
            attached[link.a].append(link.b)
        if link.b in attached:
            attached[link.b].append(link.a)
    for i, s in enumerate(topo.servers):
        switches = attached[s.name]
        if len(switches) != 1:
            got = ", ".join(switches) if switches else "none"
            raise UserInputError(
                f"servers[{i}] ({s.name}): must link to exactly one switch, links to {got}"
            )


def _check_connected(topo: Topology) -> None:
    adjacency: dict[str, list[str]] = {n: [] for n in topo.node_names()}
    for link in topo.links:
        adjacency[link.a].append(link.b)
        adjacency[link.b].append(link.a)
    start = topo.servers[0].name
    reached = {start}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in adjacency[node]:
            if nxt not in reached:
                reached.add(nxt)
                queue.append(nxt)
    for i, s in enumerate(topo.servers):
        if s.name not in reached:
            raise UserInputError(
                f"servers[{i}] ({s.name}): no path to server {start}; the fabric is split"
            )
    for i, sw in enumerate(topo.switches):
        if sw.name not in reached:
            raise UserInputError(f"switches[{i}] ({sw.name}): not connected to the servers' fabric")


def _check_chip_ports(topo: Topology) -> None:
    seen: set[int] = set()
    for i, port in enumerate(topo.chip_ports):
        if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port < 512:
            raise UserInputError(f"chip_ports[{i}]: must be an integer in 0..511, got {port!r}")
        if port in seen:
            raise UserInputError(f"chip_ports[{i}]: port {port} listed twice")
        seen.add(port)


def _finite_positive(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )
