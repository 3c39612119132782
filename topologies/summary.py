"""What does a topology hold, tier by tier and port by port? As plain data.

`describe_topology` is everything `cassini topo show` prints; `builtin_summaries`
what `cassini topo list` prints.
"""

from __future__ import annotations

from typing import Any

from .chip_mapping import map_to_chip
from .errors import UserInputError
from .library import builtin_names, load_topology
from .model import Topology
from .tiers import node_ranks, oversubscription

GENERATORS = ("leaf-spine:LEAVES:SPINES:SERVERS_PER_LEAF", "fat-tree:K")


def describe_topology(topo: Topology) -> dict[str, Any]:
    """Counts, tiers, servers, switches, links and the chip's ports of `topo`.

    What `cassini topo show` prints; a topology that does not fit one chip
    says why under "chip".

    >>> from topologies.generators import cassini_testbed
    >>> info = describe_topology(cassini_testbed())
    >>> info["counts"]["switches"], info["oversubscription"], info["switches"][0]["chip_ports"][:3]
    (13, {'tor': 2.0, 'agg': 1.0}, [1, 2, 3])
    """
    ranks = node_ranks(topo)
    tier_of = {s.name: s.tier for s in topo.switches}
    try:
        chip = map_to_chip(topo)
        chip_error = ""
    except UserInputError as err:
        chip, chip_error = None, str(err)

    degree: dict[str, list[str]] = {s.name: [] for s in topo.switches}
    tor_of: dict[str, str] = {}
    for link in topo.links:
        for here, there in link.directions():
            if here in degree:
                degree[here].append(there)
            if ranks[here] == 0:
                tor_of[here] = there

    def link_ports(a: str, b: str) -> list[int]:
        if chip is None:
            return []
        if ranks[a] == 0:
            return [chip.server_port[a]]
        if ranks[b] == 0:
            return [chip.server_port[b]]
        return [chip.link_ports[(a, b)], chip.link_ports[(b, a)]]

    servers = [
        {
            "name": s.name,
            "gpus": s.gpus,
            "nic_gbps": s.nic_gbps,
            "mac": s.mac,
            "ip": s.ip,
            "switch": tor_of[s.name],
            "chip_port": chip.server_port[s.name] if chip else None,
        }
        for s in topo.servers
    ]
    switches = []
    for sw in topo.switches:
        up = [n for n in degree[sw.name] if ranks[n] > ranks[sw.name]]
        down = [n for n in degree[sw.name] if ranks[n] < ranks[sw.name]]
        switches.append(
            {
                "name": sw.name,
                "tier": sw.tier,
                "port_count": len(degree[sw.name]),
                "downlinks": len(down),
                "uplinks": len(up),
                "chip_ports": list(chip.ports_of_switch(sw.name)) if chip else [],
            }
        )
    links = [
        {
            "a": ln.a,
            "b": ln.b,
            "gbps": ln.gbps,
            "delay_us": ln.delay_us,
            "kind": f"{_tier(ln.a, tier_of)}-{_tier(ln.b, tier_of)}",
            "chip_ports": link_ports(ln.a, ln.b),
        }
        for ln in topo.links
    ]
    loopbacks = [list(p) for p in chip.loopback_pairs] if chip else []
    return {
        "name": topo.name,
        "description": topo.description,
        "counts": {
            "servers": len(topo.servers),
            "gpus": topo.total_gpus(),
            "switches": len(topo.switches),
            "links": len(topo.links),
            "chip_ports": len(chip.ports()) if chip else None,
            "loopback_pairs": len(loopbacks) if chip else None,
        },
        "oversubscription": oversubscription(topo),
        "servers": servers,
        "switches": switches,
        "links": links,
        "chip": {"ports": list(chip.ports()) if chip else [], "loopback_pairs": loopbacks}
        if chip
        else {"error": chip_error},
    }


def builtin_summaries() -> list[dict[str, Any]]:
    """Name and counts of every built-in topology."""
    rows = []
    for name in builtin_names():
        topo = load_topology(name)
        rows.append(
            {
                "name": name,
                "servers": len(topo.servers),
                "gpus": topo.total_gpus(),
                "switches": len(topo.switches),
                "links": len(topo.links),
            }
        )
    return rows


def _tier(node: str, tier_of: dict[str, str]) -> str:
    return tier_of.get(node, "server")
