"""Logical switches on one chip: ports, loopback pairs and forwarding entries."""

from __future__ import annotations

from collections.abc import Callable
from itertools import permutations

import pytest

from topologies.chip_mapping import (
    CPU_PORT,
    ForwardingEntry,
    ForwardingWalkError,
    forwarding_entries,
    forwarding_table,
    map_to_chip,
    walk,
)
from topologies.errors import UserInputError
from topologies.generators import cassini_testbed, cassini_testbed_2gpu, fat_tree, leaf_spine
from topologies.model import Topology
from topologies.routing import Router


def test_testbed_chip_counts_and_numbering() -> None:
    topo = cassini_testbed()
    chip = map_to_chip(topo)
    assert chip.ports() == tuple(range(1, 73))
    assert len(chip.loopback_pairs) == 24
    assert [chip.server_port[s] for s in topo.server_names()] == list(range(1, 25))
    # first switch link is tor1-agg1: ports 25 (tor1 side) and 26 (agg1 side)
    assert chip.link_ports[("tor1", "agg1")] == 25 and chip.link_ports[("agg1", "tor1")] == 26
    assert chip.loopback_pairs[0] == (25, 26)
    assert chip.peer_port(25) == 26 and chip.peer_port(26) == 25 and chip.peer_port(1) is None
    assert chip.node_behind_port(1) == "s01" and chip.node_behind_port(25) == "agg1"
    assert chip.switch_of_port[1] == "tor1" and chip.switch_of_port[26] == "agg1"
    assert chip.ports_of_switch("tor1") == (1, 2, 3, 4, 25, 27)
    assert len(chip.ports_of_switch("core1")) == 4
    assert sum(len(chip.ports_of_switch(s.name)) for s in topo.switches) == 72
    assert chip.port_toward("tor1", "s02") == 2 and chip.port_toward("agg1", "tor1") == 26
    with pytest.raises(UserInputError, match="no port facing"):
        chip.port_toward("tor1", "s05")
    with pytest.raises(UserInputError, match="chip port 99"):
        chip.node_behind_port(99)


def test_loopback_pairs_join_two_switches_that_are_linked() -> None:
    topo = fat_tree(4)
    chip = map_to_chip(topo)
    cables = {frozenset((ln.a, ln.b)) for ln in topo.links}
    for a, b in chip.loopback_pairs:
        sa, sb = chip.switch_of_port[a], chip.switch_of_port[b]
        assert sa != sb and frozenset((sa, sb)) in cables
        assert chip.node_behind_port(a) == sb and chip.node_behind_port(b) == sa


def test_software_numbering_skips_cpu_port_and_rejects_overflow() -> None:
    topo = leaf_spine(8, 8, 24)  # 192 servers + 2 * 64 = 320 ports
    chip = map_to_chip(topo)
    assert CPU_PORT not in chip.ports() and len(chip.ports()) == 320
    assert max(chip.ports()) == 321
    with pytest.raises(UserInputError, match="needs 512 chip ports"):
        map_to_chip(leaf_spine(16, 8, 16))


def test_explicit_dev_ports() -> None:
    topo = cassini_testbed_2gpu()
    dev_ports = [128 + 4 * i for i in range(18)]
    chip = map_to_chip(topo, dev_ports)
    assert sorted(chip.ports()) == sorted(dev_ports)
    assert chip.server_port["s01"] == 128
    assert chip.loopback_pairs[0] == (128 + 4 * 6, 128 + 4 * 7)
    with pytest.raises(UserInputError, match="needs 18 chip ports.*only 17 given"):
        map_to_chip(topo, dev_ports[:17])
    with pytest.raises(UserInputError, match="port 128 is listed twice"):
        map_to_chip(topo, [128, *dev_ports[:17]])
    with pytest.raises(UserInputError, match="chip port 600"):
        map_to_chip(topo, [600, *dev_ports])


TOPOLOGIES: list[Callable[[], Topology]] = [
    cassini_testbed,
    cassini_testbed_2gpu,
    lambda: fat_tree(4),
    lambda: leaf_spine(3, 2, 3),
]


@pytest.mark.parametrize("make", TOPOLOGIES, ids=["testbed", "testbed-2gpu", "fat-tree-4", "ls"])
def test_every_server_reaches_every_other_inside_logical_switches(
    make: Callable[[], Topology],
) -> None:
    topo = make()
    chip = map_to_chip(topo)
    router = Router(topo)
    entries = forwarding_entries(topo, chip, router)
    for e in entries:
        assert chip.switch_of_port[e.ingress_port] == e.switch
        assert chip.switch_of_port[e.egress_port] == e.switch
        assert e.egress_port != e.ingress_port
    table = forwarding_table(entries)
    assert len(table) == len(entries)  # one rule per (ingress, dst_mac)
    for src, dst in permutations(topo.server_names(), 2):
        hops = walk(topo, chip, table, src, dst)
        # the chip forwards exactly on the router's path (one source of truth)
        assert [sw for sw, _, _ in hops] == list(router.path(src, dst)[1:-1])
        assert hops[0][1] == chip.server_port[src] and hops[-1][2] == chip.server_port[dst]
        for (_, _, egress), (_, ingress, _) in zip(hops, hops[1:], strict=False):
            assert chip.peer_port(egress) == ingress


def test_entry_counts_for_testbed() -> None:
    topo = cassini_testbed()
    chip = map_to_chip(topo)
    entries = forwarding_entries(topo, chip)
    # a server port: 23 other servers; a switch port: every server except those
    # whose only next hop is back out of that port (no hairpins)
    by_port: dict[int, int] = {}
    for e in entries:
        by_port[e.ingress_port] = by_port.get(e.ingress_port, 0) + 1
    assert all(by_port[chip.server_port[s]] == 23 for s in topo.server_names())
    # agg1's port facing tor1: tor1's own 4 servers would hairpin back to tor1
    assert by_port[chip.link_ports[("agg1", "tor1")]] == 20
    # tor1's port facing agg1: its 4 servers go down, the rest up via agg2
    assert by_port[chip.link_ports[("tor1", "agg1")]] == 24
    assert by_port[chip.link_ports[("core1", "agg1")]] == 24
    assert set(by_port) == set(chip.ports())
    assert entries == forwarding_entries(topo, map_to_chip(topo))  # deterministic


def test_walk_catches_broken_entries() -> None:
    topo = cassini_testbed_2gpu()
    chip = map_to_chip(topo)
    entries = list(forwarding_entries(topo, chip))
    dst_mac = topo.server("s03").mac
    first = chip.server_port["s01"]
    without = [e for e in entries if not (e.ingress_port == first and e.dst_mac == dst_mac)]
    with pytest.raises(ForwardingWalkError, match="no rule for port 1"):
        walk(topo, chip, without, "s01", "s03")
    leak = [
        ForwardingEntry("tor1", first, dst_mac, chip.server_port["s03"])
        if (e.ingress_port == first and e.dst_mac == dst_mac)
        else e
        for e in entries
    ]
    with pytest.raises(ForwardingWalkError, match="forwards to port 3 of tor2"):
        walk(topo, chip, leak, "s01", "s03")
    wrong = [
        ForwardingEntry("tor1", first, dst_mac, chip.server_port["s02"])
        if (e.ingress_port == first and e.dst_mac == dst_mac)
        else e
        for e in entries
    ]
    with pytest.raises(ForwardingWalkError, match="delivered to s02"):
        walk(topo, chip, wrong, "s01", "s03")
