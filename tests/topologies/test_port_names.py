"""The chip ports' names for controllers: one per port, stable, and saying which
logical switch and which of its ports each one is."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from topologies.chip_mapping import map_to_chip
from topologies.io import load_topology_file, save_topology_file
from topologies.library import load_topology
from topologies.port_names import interface_names, port_name

NAME = re.compile(r"(?P<switch>.+)-eth(?P<k>[1-9][0-9]*)")


@pytest.mark.parametrize("spec", ["cassini-testbed", "cassini-testbed-2gpu", "fat-tree:4"])
def test_every_port_is_named_after_its_switch_and_its_place_there(spec: str) -> None:
    chip = map_to_chip(load_topology(spec))
    names = interface_names(chip)
    assert set(names) == set(chip.ports())
    assert len(set(names.values())) == len(names)  # one name per port
    for port, name in names.items():
        found = NAME.fullmatch(name)
        assert found is not None, name
        switch = found["switch"]
        assert switch == chip.switch_of_port[port]
        # Port k of a switch is its k-th chip port in ascending order.
        assert chip.ports_of_switch(switch)[int(found["k"]) - 1] == port


def test_testbed_names_by_hand() -> None:
    names = interface_names(map_to_chip(load_topology("cassini-testbed")))
    # tor1: servers s01-s04 on chip ports 1-4, uplinks on 25 (agg1) and 27 (agg2).
    assert [names[p] for p in (1, 2, 3, 4, 25, 27)] == [f"tor1-eth{k}" for k in range(1, 7)]
    # The other end of tor1's first uplink cable, and core1's first port.
    assert (names[26], names[50]) == ("agg1-eth1", "core1-eth1")


def test_names_survive_a_topology_file_round_trip(tmp_path: Path) -> None:
    """The fabric hands its topology to `switch serve` as a file: same names there."""
    topo = load_topology("cassini-testbed")
    path = tmp_path / "topology.json"
    save_topology_file(topo, path)
    again = interface_names(map_to_chip(load_topology_file(path)))
    assert again == interface_names(map_to_chip(topo))


def test_a_port_without_a_name_is_named_by_its_number() -> None:
    assert port_name(3, {3: "tor1-eth3"}) == "tor1-eth3"
    assert port_name(3, {}) == "port3"
    assert port_name(510) == "port510"
