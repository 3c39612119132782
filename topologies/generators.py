"""Topologies built from a few numbers: the paper's testbed, leaf-spine, fat-tree.

Every generator returns a validated `Topology` whose servers carry
deterministic MACs and IPs (see `addressing`), so two runs of the same
generator produce byte-identical forwarding entries.
"""

from __future__ import annotations

from collections.abc import Sequence

from .addressing import server_ip, server_mac
from .errors import UserInputError
from .model import Link, Server, Switch, Topology
from .validate import validate

DEFAULT_DELAY_US = 1.0


def make_servers(
    count: int, gpus: int = 1, nic_gbps: float = 50.0, prefix: str = "s"
) -> tuple[Server, ...]:
    """Servers s01..sNN (zero-padded to at least two digits) with derived addresses."""
    width = max(2, len(str(count)))
    return tuple(
        Server(
            name=f"{prefix}{i:0{width}d}",
            gpus=gpus,
            nic_gbps=nic_gbps,
            mac=server_mac(i),
            ip=server_ip(i),
        )
        for i in range(1, count + 1)
    )


def cassini_testbed() -> Topology:
    """The paper's testbed as laid out in the testbed design note.

    24 servers (1 GPU, 50 Gbps), 6 ToRs x 4 servers, 2 pods of 3 ToRs with two
    aggregation switches each, 3 cores; 13 switches, 48 links, 1 us per link.
    ToR tier: 4 x 50 down : 2 x 50 up = 2:1. Agg tier: 3 ToR links down and
    3 core links up, all 50 Gbps, so 1:1 (our choice: the 2:1 of the paper
    sits entirely at the ToRs).
    """
    servers = make_servers(24)
    tors = [Switch(f"tor{i}", "tor") for i in range(1, 7)]
    aggs = [Switch(f"agg{i}", "agg") for i in range(1, 5)]
    cores = [Switch(f"core{i}", "core") for i in range(1, 4)]
    links: list[Link] = []
    for i, server in enumerate(servers):
        links.append(Link(server.name, tors[i // 4].name, 50.0, DEFAULT_DELAY_US))
    for t, tor in enumerate(tors):
        pod = t // 3
        for agg in aggs[2 * pod : 2 * pod + 2]:
            links.append(Link(tor.name, agg.name, 50.0, DEFAULT_DELAY_US))
    for agg in aggs:
        for core in cores:
            links.append(Link(agg.name, core.name, 50.0, DEFAULT_DELAY_US))
    return _finish(
        "cassini-testbed",
        servers,
        [*tors, *aggs, *cores],
        links,
        "Cassini testbed: 24 x 1-GPU servers, 6 ToRs, 4 aggs in 2 pods, 3 cores; 2:1 at the ToRs.",
    )


def cassini_testbed_2gpu() -> Topology:
    """The paper's 6-server x 2-GPU variant.

    (our choice) 3 ToRs x 2 servers (50 Gbps NICs), each ToR with one 25 Gbps
    uplink to each of 2 aggregation switches: 100 down : 50 up keeps the 2:1
    ToR oversubscription of the main testbed while leaving two equal-cost paths
    between racks. 5 switches, 12 links, 18 chip ports, 6 loopback pairs.
    """
    servers = make_servers(6, gpus=2)
    tors = [Switch(f"tor{i}", "tor") for i in range(1, 4)]
    aggs = [Switch(f"agg{i}", "agg") for i in range(1, 3)]
    links: list[Link] = [
        Link(server.name, tors[i // 2].name, 50.0, DEFAULT_DELAY_US)
        for i, server in enumerate(servers)
    ]
    for tor in tors:
        for agg in aggs:
            links.append(Link(tor.name, agg.name, 25.0, DEFAULT_DELAY_US))
    return _finish(
        "cassini-testbed-2gpu",
        servers,
        [*tors, *aggs],
        links,
        "Cassini testbed, 2-GPU variant: 6 x 2-GPU servers, 3 ToRs, 2 aggs; 2:1 at the ToRs.",
    )


def leaf_spine(
    leaves: int,
    spines: int,
    servers_per_leaf: int,
    server_gbps: float = 50.0,
    uplink_gbps: float = 50.0,
    gpus_per_server: int = 1,
    name: str | None = None,
) -> Topology:
    """Two tiers: every leaf links to every spine once.

    >>> t = leaf_spine(2, 2, 3)
    >>> len(t.servers), len(t.switches), len(t.links)
    (6, 4, 10)
    """
    _positive("leaves", leaves)
    _positive("spines", spines)
    _positive("servers_per_leaf", servers_per_leaf)
    _positive("gpus_per_server", gpus_per_server)
    servers = make_servers(leaves * servers_per_leaf, gpus=gpus_per_server, nic_gbps=server_gbps)
    leaf_sw = [Switch(f"leaf{i}", "leaf") for i in range(1, leaves + 1)]
    spine_sw = [Switch(f"spine{i}", "spine") for i in range(1, spines + 1)]
    links = [
        Link(server.name, leaf_sw[i // servers_per_leaf].name, server_gbps, DEFAULT_DELAY_US)
        for i, server in enumerate(servers)
    ]
    for leaf in leaf_sw:
        for spine in spine_sw:
            links.append(Link(leaf.name, spine.name, uplink_gbps, DEFAULT_DELAY_US))
    topo_name = name or f"leaf-spine-{leaves}x{spines}x{servers_per_leaf}"
    return _finish(
        topo_name,
        servers,
        [*leaf_sw, *spine_sw],
        links,
        f"Leaf-spine: {leaves} leaves x {servers_per_leaf} servers, {spines} spines.",
    )


def fat_tree(k: int, gbps: float = 50.0) -> Topology:
    """The classic k-ary fat-tree: k pods, k^3/4 servers, (k/2)^2 cores, 1:1 everywhere.

    Pod p has k/2 edge and k/2 agg switches (full mesh between them); each edge
    serves k/2 servers; agg j of every pod links to cores j*k/2 .. j*k/2+k/2-1.

    >>> t = fat_tree(4)
    >>> len(t.servers), len(t.switches), len(t.links)
    (16, 20, 48)
    """
    if k < 2 or k % 2:
        raise UserInputError(f"fat-tree k must be an even integer >= 2, got {k}")
    half = k // 2
    servers = make_servers(k**3 // 4, nic_gbps=gbps)
    edges = [Switch(f"edge{i}", "edge") for i in range(1, k * half + 1)]
    aggs = [Switch(f"agg{i}", "agg") for i in range(1, k * half + 1)]
    cores = [Switch(f"core{i}", "core") for i in range(1, half * half + 1)]
    links = [
        Link(server.name, edges[i // half].name, gbps, DEFAULT_DELAY_US)
        for i, server in enumerate(servers)
    ]
    for pod in range(k):
        for e in range(half):
            for a in range(half):
                links.append(
                    Link(
                        edges[pod * half + e].name,
                        aggs[pod * half + a].name,
                        gbps,
                        DEFAULT_DELAY_US,
                    )
                )
    for pod in range(k):
        for a in range(half):
            for c in range(half):
                links.append(
                    Link(
                        aggs[pod * half + a].name, cores[a * half + c].name, gbps, DEFAULT_DELAY_US
                    )
                )
    return _finish(
        f"fat-tree-{k}",
        servers,
        [*edges, *aggs, *cores],
        links,
        f"Fat-tree k={k}: {k} pods, {len(servers)} servers, {len(cores)} cores.",
    )


def _positive(what: str, value: int) -> None:
    if value < 1:
        raise UserInputError(f"{what} must be a positive integer, got {value}")


def _finish(
    name: str,
    servers: Sequence[Server],
    switches: Sequence[Switch],
    links: Sequence[Link],
    description: str,
) -> Topology:
    topo = Topology(name, tuple(servers), tuple(switches), tuple(links), description)
    validate(topo)
    return topo
