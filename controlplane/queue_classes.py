"""Which queue class (strict priority, 7 first) does a packet wait in, and which entries say so?

The P4 programs pick a packet's queue class in ingress (p4src/cassini.p4: bmv2's
standard_metadata.priority with --priority-queues, Tofino's qid and
ingress_cos): `queue_class_by_flow` by the 5-tuple of TCP/UDP over option-less
IPv4, else `queue_class` by the IPv4 DSCP, else class 0. A policy (Crux's
compressed ranks, EchelonFlow's stages) states its wish as a DSCP -> class map
and a flow -> class map; this turns them into the table entries, which their
installer writes (run-time tables, `program.RUNTIME_TABLES`: programming the
topology leaves them alone).

>>> [(e.table, dict(e.match), dict(e.params)) for e in queue_class_entries({46: 7}, {})]
[('CassiniIngress.queue_class', {'dscp': 46}, {'queue_class': 7})]
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from topologies.errors import UserInputError

from .bmv2 import BMV2_MAX_QDEPTH, cells_to_packets
from .entries import TableEntry
from .p4names import QUEUE_CLASS_ACTION, QUEUE_CLASS_BY_FLOW_TABLE, QUEUE_CLASS_TABLE

# A 3-bit class (set_queue_class's parameter): Tofino's and bmv2's 8 queues a port.
QUEUE_CLASSES = 8
DSCP_VALUES = 64
PROTOCOLS = {"tcp": 6, "udp": 17}


@dataclass(frozen=True)
class Flow:
    """A TCP or UDP flow as the queue_class_by_flow key sees it."""

    src: str
    dst: str
    protocol: str  # "tcp" or "udp": the program parses ports of these only
    src_port: int
    dst_port: int


def queue_class_entries(
    by_dscp: Mapping[int, int], by_flow: Mapping[Flow, int]
) -> list[TableEntry]:
    """The queue_class entries (one per DSCP) and queue_class_by_flow entries (one per flow)."""
    entries: list[TableEntry] = []
    for dscp, queue_class in sorted(by_dscp.items()):
        if isinstance(dscp, bool) or not isinstance(dscp, int) or not 0 <= dscp < DSCP_VALUES:
            raise UserInputError(f"DSCP {dscp!r} must be 0..{DSCP_VALUES - 1}")
        entries.append(
            TableEntry(
                QUEUE_CLASS_TABLE,
                {"dscp": dscp},
                QUEUE_CLASS_ACTION,
                {"queue_class": _class(queue_class, f"DSCP {dscp}")},
            )
        )
    for flow, queue_class in by_flow.items():
        what = f"flow {flow.src}:{flow.src_port} -> {flow.dst}:{flow.dst_port} {flow.protocol}"
        protocol = PROTOCOLS.get(str(flow.protocol).lower())
        if protocol is None:
            raise UserInputError(f"{what}: protocol must be tcp or udp")
        for port in (flow.src_port, flow.dst_port):
            if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < 65536:
                raise UserInputError(f"{what}: port {port!r} is not a TCP/UDP port")
        entries.append(
            TableEntry(
                QUEUE_CLASS_BY_FLOW_TABLE,
                {
                    "src_addr": _ipv4(flow.src, what),
                    "dst_addr": _ipv4(flow.dst, what),
                    "protocol": protocol,
                    "src_port": flow.src_port,
                    "dst_port": flow.dst_port,
                },
                QUEUE_CLASS_ACTION,
                {"queue_class": _class(queue_class, what)},
            )
        )
    return entries


def _class(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < QUEUE_CLASSES:
        raise UserInputError(f"{what}: queue class {value!r} must be 0..{QUEUE_CLASSES - 1}")
    return value


def _ipv4(address: str, what: str) -> int:
    try:
        return int(ipaddress.IPv4Address(address))
    except ValueError:
        raise UserInputError(f"{what}: {address!r} is not an IPv4 address") from None


def bmv2_class_queue_commands(
    ports: Iterable[int],
    class_cells: Mapping[int, int],
    cell_bytes: int,
    packet_bytes: int,
) -> list[str]:
    """simple_switch_CLI lines giving each queue class its own depth on every port.

    With bmv2 started with `--priority-queues 8`, `set_queue_depth <packets>
    <port> <priority>` sets one priority queue of a port (bmv2's sswitch_CLI);
    the port's own lines (`controlplane.bmv2.queue_commands`) still set every
    queue's depth and the port's rate. `class_cells`: class -> queue limit in
    cells (the TM settings file's `classes`), converted to packets as bmv2
    counts them.

    >>> bmv2_class_queue_commands([3, 1], {7: 800}, 80, 1500)
    ['set_queue_depth 43 1 7', 'set_queue_depth 43 3 7']
    """
    lines = []
    for port in sorted(ports):
        for queue_class, cells in sorted(class_cells.items()):
            _class(queue_class, "class_cells")
            depth = min(BMV2_MAX_QDEPTH, cells_to_packets(cells, cell_bytes, packet_bytes))
            lines.append(f"set_queue_depth {depth} {port} {queue_class}")
    return lines
