"""What is each chip port called, to a controller reading the switch?

A hardware switch names its interfaces after its front panel, the same on
every boot; controllers (gNMI readers, finsy's `Switch`) key ports by those
names. Ours come from the chip map (`chip_mapping.map_to_chip`), never from
the Linux interfaces of one run: port k of logical switch S (its chip ports
in ascending order, from 1) is `S-ethk`, Mininet's way of naming a node's
ports (our choice). The chip port itself is the interface's number
(gNMI `state/ifindex` and `state/id`). A port the topology does not use, or
a switch run without a topology, is `port<N>` for chip port N.

>>> from topologies.generators import cassini_testbed
>>> from topologies.chip_mapping import map_to_chip
>>> names = interface_names(map_to_chip(cassini_testbed()))
>>> names[1], names[25], names[26]
('tor1-eth1', 'tor1-eth5', 'agg1-eth1')
>>> port_name(7, names), port_name(99, names)
('tor2-eth3', 'port99')
"""

from __future__ import annotations

from collections.abc import Mapping

from .chip_mapping import ChipMap


def interface_names(chip: ChipMap) -> dict[int, str]:
    """{chip port: name} of every port the chip map uses (see the module docstring)."""
    names: dict[int, str] = {}
    for switch in sorted(set(chip.switch_of_port.values())):
        for k, port in enumerate(chip.ports_of_switch(switch), start=1):
            names[port] = f"{switch}-eth{k}"
    return names


def port_name(port: int, names: Mapping[int, str] | None = None) -> str:
    """The name of chip `port`: its entry in `names`, else `port<N>`."""
    if names is not None and port in names:
        return names[port]
    return f"port{port}"
