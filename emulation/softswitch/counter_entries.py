"""Which counter cells does a P4Runtime read return, and what does a counter write set?

Reads are answered from counter arrays taken at one instant; writes become a
`CounterChange` for the packet path (MODIFY only, spec 9.5).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np
from google.rpc import code_pb2

from controlplane.p4info import CounterInfo, P4InfoIndex
from controlplane.proto.p4.v1 import p4runtime_pb2
from emulation.softswitch.errors import EntryError, invalid, known_object
from emulation.softswitch.state import CounterChange


def counters_of_read(index: P4InfoIndex, query: Any) -> list[CounterInfo]:
    """The counters a CounterEntry read names (all of them for counter_id 0)."""
    if query.counter_id == 0:
        return list(index.counters)
    return [_counter_of(index, query.counter_id)]


def counter_rows(
    counters: Iterable[CounterInfo], query: Any
) -> list[tuple[CounterInfo, range | tuple[int]]]:
    """The cells a read of `query` returns of each of `counters` (its resolved counters):
    the one `query` names, or all; EntryError for a bad index."""
    if query.counter_id and query.HasField("index"):
        return [(c, (_checked_index(c, query.index.index),)) for c in counters]
    return [(c, range(c.size)) for c in counters]


# An upper bound of one counter Entity's serialised size: counter_id (uint32), index
# (int64) and data (two int64) at their longest varints, with tags and lengths: 47.
COUNTER_ENTITY_MAX_BYTES = 64


def counter_entity_fields(
    rows: Iterable[tuple[CounterInfo, range | tuple[int]]], cells_of: Mapping[str, np.ndarray]
) -> Iterator[dict[str, Any]]:
    """The Entity messages (each a CounterEntry) of `rows` (from `counter_rows`), as the
    keyword arguments of `p4runtime_pb2.Entity`, from counter arrays read at one instant
    (`cells_of`: name -> [cells, 2]).

    Dicts, not messages: the compiled protobuf builds a ReadResponse of 288 entities
    from dicts in a third of the time that setting each field of each message takes,
    and the counter poll is what the fabric asks ten times a second (issue 24)."""
    for counter, wanted in rows:
        cells = cells_of[counter.name]
        # One cell converts one row: the whole array's tolist() per one-cell read was
        # 87% of the service's time when a poll named the job counters' cells.
        if len(wanted) == 1:
            values: Iterable[tuple[int, list[int]]] = [(wanted[0], cells[wanted[0]].tolist())]
        else:
            values = enumerate(cells[: counter.size].tolist())
        packets = counter.unit in ("PACKETS", "BOTH")
        octets = counter.unit in ("BYTES", "BOTH")
        counter_id = counter.id
        for i, (packet_count, byte_count) in values:
            data: dict[str, int] = {}
            if packets:
                data["packet_count"] = packet_count
            if octets:
                data["byte_count"] = byte_count
            yield {"counter_entry": {"counter_id": counter_id, "index": {"index": i}, "data": data}}


# (our choice) The most a counter write may set: refused above, not saturated, so a
# value read back is always one that was counted. 2**62 leaves 2**62 to count on
# (a year of bytes at 1 Tbit/s) before an int64 cell overflows.
MAX_COUNTER_SET = 2**62


def counter_change(index: P4InfoIndex, entry: Any, update_type: int) -> CounterChange | None:
    """What a counter write sets: one cell (or every cell when index is unset); MODIFY only."""
    counter = _counter_of(index, entry.counter_id)
    if update_type != p4runtime_pb2.Update.MODIFY:
        raise invalid(f"counter {counter.name}: counter entries can only be modified")
    if not entry.HasField("data"):
        return None  # spec 9.5: no data, no change
    cell = _checked_index(counter, entry.index.index) if entry.HasField("index") else None
    if entry.data.packet_count < 0 or entry.data.byte_count < 0:
        # int64 on the wire, but a count below zero is no count: P4Runtime and gNMI
        # would disagree, and ecn_marked <= port_tx would no longer hold.
        raise invalid(
            f"counter {counter.name}: packet_count and byte_count must be >= 0, got "
            f"{entry.data.packet_count} and {entry.data.byte_count}"
        )
    if max(entry.data.packet_count, entry.data.byte_count) > MAX_COUNTER_SET:
        # The packet loop adds to int64 cells: 2**63 - 1 read back negative after 3 frames.
        raise invalid(
            f"counter {counter.name}: packet_count and byte_count may be set to at most "
            f"{MAX_COUNTER_SET} (2**62), so that counting on cannot overflow int64; got "
            f"{entry.data.packet_count} and {entry.data.byte_count}"
        )
    return CounterChange(
        counter.name, cell, counter.size, entry.data.packet_count, entry.data.byte_count
    )


def _counter_of(index: P4InfoIndex, counter_id: int) -> CounterInfo:
    found: CounterInfo = known_object(index.counter_by_id, counter_id, "unknown counter id")
    return found


def _checked_index(counter: CounterInfo, i: int) -> int:
    if i < 0:
        raise invalid(f"counter {counter.name}: negative index {i}")
    if i >= counter.size:
        raise EntryError(
            code_pb2.OUT_OF_RANGE, f"counter {counter.name}: index {i} >= size {counter.size}"
        )
    return i
