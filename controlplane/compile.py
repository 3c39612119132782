"""Which table entries should a device hold for a topology and its chip map?

Pure functions: the routing and the port assignment come from
topologies.chip_mapping, the thresholds from controlplane.settings; this
module only names them the way the P4Info does.
"""

from __future__ import annotations

from collections.abc import Iterable

from topologies.chip_mapping import ChipMap, ForwardingEntry, forwarding_entries
from topologies.model import Topology
from topologies.routing import Router

from .entries import TableEntry
from .p4names import FORWARD_ACTION, FORWARD_TABLE, WRED_ACTION, WRED_TABLE
from .settings import WredSettings

__all__ = [  # the P4 names stay importable from here (benchmarks use them)
    "FORWARD_ACTION",
    "FORWARD_TABLE",
    "WRED_ACTION",
    "WRED_TABLE",
    "desired_entries",
    "forwarding_table_entries",
    "forwarding_to_table_entries",
    "wred_entries",
]


def forwarding_to_table_entries(entries: Iterable[ForwardingEntry]) -> list[TableEntry]:
    """logical_forward entries of chip_mapping's <ingress_port, dst_mac> -> egress_port rules."""
    return [
        TableEntry(
            FORWARD_TABLE,
            {"ingress_port": e.ingress_port, "dst_mac": e.dst_mac},
            FORWARD_ACTION,
            {"port": e.egress_port},
        )
        for e in entries
    ]


def forwarding_table_entries(
    topo: Topology, chip: ChipMap, router: Router | None = None
) -> list[TableEntry]:
    """Every logical_forward entry of every logical switch on the chip."""
    return forwarding_to_table_entries(forwarding_entries(topo, chip, router))


def wred_entries(chip: ChipMap, wred: WredSettings) -> list[TableEntry]:
    """One wred_profile entry per used chip port: every logical link direction is marked.

    Server-facing ports get a profile too: the last hop into a server is where
    incast queues build.
    """
    return [
        TableEntry(
            WRED_TABLE,
            {"egress_port": port},
            WRED_ACTION,
            {
                "min_cells": wred.min_cells,
                "max_cells": wred.max_cells,
                "max_prob": wred.max_prob_percent,
            },
        )
        for port in chip.ports()
    ]


def desired_entries(
    topo: Topology, chip: ChipMap, wred: WredSettings, router: Router | None = None
) -> list[TableEntry]:
    """Everything `cassini program` installs: forwarding first, then WRED."""
    return forwarding_table_entries(topo, chip, router) + wred_entries(chip, wred)
