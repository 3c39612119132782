"""What does a ReadRequest return, and how is it built without holding the device?

Under the device lock, `take_snapshot` checks every entity the request names
(the first bad one fails the whole Read), counts what it returns, refusing
more than a cap before anything is built (100 wildcards over 1,000 entries
built 100,000 entities in 40 s with Writes blocked), and keeps references to
the stored entries and copies of the counters it names. A Write replaces
stored entries and never changes one in place, so the references stay the
state of that instant after the lock is gone. The entities are built from the
snapshot outside the lock, a ReadResponse at a time (`read_responses`), each
under a `BuildGate` that bounds how many Reads build at once and stops them
when the server stops.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
from google.rpc import code_pb2

from controlplane.p4info import CounterInfo, P4InfoIndex
from controlplane.proto.p4.v1 import p4runtime_pb2
from emulation.softswitch.counter_entries import (
    COUNTER_ENTITY_MAX_BYTES,
    counter_entity_fields,
    counter_rows,
    counters_of_read,
)
from emulation.softswitch.entry_validation import match_key_for_read, table_of
from emulation.softswitch.errors import EntryError
from emulation.softswitch.pipeline_config import InstalledPipeline

# A ReadResponse holds at most this many entities and about this many bytes,
# well under the 64 MiB message limit of both sides.
READ_CHUNK = 1000
READ_CHUNK_BYTES = 4 << 20


@dataclass(frozen=True)
class TableRows:
    """Stored table entries a Read returns (references: a Write replaces, never mutates)."""

    entries: tuple[Any, ...]


@dataclass(frozen=True)
class CounterCells:
    """The cells of a CounterEntry read, from counter arrays copied at the snapshot."""

    rows: tuple[tuple[CounterInfo, range | tuple[int]], ...]  # counter_entries.counter_rows
    cells: Mapping[str, np.ndarray]


@dataclass(frozen=True)
class ReadSnapshot:
    """What one ReadRequest returns, taken at one instant, not yet built."""

    parts: tuple[TableRows | CounterCells, ...]
    count: int  # entities it builds

    def entities(self) -> Iterator[Any]:
        """The Entity messages, built one at a time."""
        for item in self.response_items():
            yield p4runtime_pb2.Entity(**item) if isinstance(item, dict) else item

    def response_items(self) -> Iterator[Any]:
        """What `read_responses` puts in ReadResponses: an Entity message per table entry,
        the Entity's fields (a dict, cheaper to build) per counter cell."""
        for part in self.parts:
            if isinstance(part, TableRows):
                for entry in part.entries:
                    entity = p4runtime_pb2.Entity()
                    entity.table_entry.CopyFrom(entry)
                    yield entity
            else:
                yield from counter_entity_fields(part.rows, part.cells)


def take_snapshot(
    pipeline: InstalledPipeline,
    request: Any,
    counters: Callable[[list[str]], dict[str, np.ndarray]],
    max_entities: int,
) -> ReadSnapshot:
    """The snapshot of a ReadRequest (call it under the device lock); EntryError for a bad
    entity or, RESOURCE_EXHAUSTED, for more than `max_entities` entities."""
    resolved: dict[int, list[CounterInfo]] = {}  # counter_id -> its counters, this Read's
    cells = _counter_cells(pipeline.index, request, counters, resolved)
    parts: list[TableRows | CounterCells] = []
    count = 0
    for i, entity in enumerate(request.entities):
        kind = entity.WhichOneof("entity")
        try:
            if kind == "table_entry":
                rows = TableRows(tuple(_read_table(pipeline, entity.table_entry)))
                parts.append(rows)
                count += len(rows.entries)
            elif kind == "counter_entry":
                query = entity.counter_entry
                cell_rows = tuple(counter_rows(resolved[query.counter_id], query))
                count += sum(len(wanted) for _, wanted in cell_rows)
                parts.append(CounterCells(cell_rows, cells))
            elif kind is None:
                raise EntryError(code_pb2.INVALID_ARGUMENT, "entity is unset")
            elif kind == "register_entry" and entity.register_entry.register_id in {
                r.preamble.id for r in pipeline.index.p4info.registers
            }:
                # (our choice) The Cassini max_qdepth register's reader is the packet
                # loop's own 10 ms sampler, which resets it (sample_ring.py).
                raise EntryError(
                    code_pb2.UNIMPLEMENTED,
                    "register reads are not served: this target samples its max_qdepth "
                    "register every 10 ms into its sample ring (emulation.softswitch."
                    "sample_ring), whose reader resets it",
                )
            else:
                # Other kinds (registers, meters, profiles, ...) do not exist in a
                # pipeline this target accepts: a wildcard read finds nothing,
                # a read naming an id names something that is not there.
                _check_absent_kind(kind, getattr(entity, kind))
        except EntryError as err:
            # (our choice) like bmv2, the first bad request fails the whole Read.
            raise EntryError(err.code, f"entity {i}: {err.message}") from None
        if count > max_entities:
            raise EntryError(
                code_pb2.RESOURCE_EXHAUSTED,
                f"this Read asks for more than {max_entities} entities (entities 0-{i} "
                f"already {count}); narrow it (name the table or counter, a match key or "
                "an index) or split it into several Reads",
            )
    return ReadSnapshot(tuple(parts), count)


def _counter_cells(
    index: P4InfoIndex,
    request: Any,
    counters: Callable[[list[str]], dict[str, np.ndarray]],
    resolved: dict[int, list[CounterInfo]],
) -> dict[str, np.ndarray]:
    """Every counter a Read names, read from the packet path at one instant; fills
    `resolved` (counter_id -> its counters: a poll names the same four 72 times)."""
    for i, entity in enumerate(request.entities):
        if entity.WhichOneof("entity") == "counter_entry":
            query = entity.counter_entry
            if query.counter_id not in resolved:
                try:
                    resolved[query.counter_id] = counters_of_read(index, query)
                except EntryError as err:
                    raise EntryError(err.code, f"entity {i}: {err.message}") from None
    names = {c.name for found in resolved.values() for c in found}
    return counters(sorted(names)) if names else {}


def _read_table(pipeline: InstalledPipeline, query: Any) -> Iterable[Any]:
    index = pipeline.index
    if query.table_id == 0:
        tables = [t.id for t in index.tables]
    else:
        tables = [table_of(index, query.table_id).id]
    if query.is_default_action:
        return [pipeline.defaults[t] for t in tables]
    if query.table_id and len(query.match):
        table = table_of(index, query.table_id)
        key = match_key_for_read(table, query)
        found = pipeline.entries[table.id].get(key)
        return [found] if found is not None else []
    result = []
    for t in tables:
        for entry in pipeline.entries[t].values():
            if query.priority and entry.priority != query.priority:
                continue
            result.append(entry)
    return result


# The id field of each entity kind the pipeline has none of (0 means every one).
_ID_FIELDS = {
    "register_entry": "register_id",
    "meter_entry": "meter_id",
    "action_profile_member": "action_profile_id",
    "action_profile_group": "action_profile_id",
    "value_set_entry": "value_set_id",
    "digest_entry": "digest_id",
    "extern_entry": "extern_id",
}


def _check_absent_kind(kind: str, query: Any) -> None:
    """NOT_FOUND for a read of a specific object of a kind the pipeline has none of."""
    field_name = _ID_FIELDS.get(kind)
    object_id = getattr(query, field_name, 0) if field_name else 0
    if object_id:
        raise EntryError(
            code_pb2.NOT_FOUND,
            f"no {kind.replace('_entry', '').replace('_', ' ')} with id {object_id} "
            "in the pipeline (it has none)",
        )


class Stopping(Exception):
    """The server is stopping: a Read being built ends between two responses."""


class BuildGate:
    """Lets at most `builders` Reads build a response at once, and none once `stopping`."""

    def __init__(self, builders: int, stopping: threading.Event) -> None:
        self._builders = threading.Semaphore(builders)
        self.stopping = stopping

    @contextmanager
    def building(self) -> Iterator[None]:
        with self._builders:
            if self.stopping.is_set():
                raise Stopping
            yield


def _entity_bytes(entity: Any) -> int:
    """An entity's serialised size; for a counter's fields (a dict), a bound of it."""
    return COUNTER_ENTITY_MAX_BYTES if isinstance(entity, dict) else int(entity.ByteSize())


def read_responses(entities: Iterable[Any], gate: BuildGate) -> Iterator[Any]:
    """ReadResponses of at most READ_CHUNK entities and about READ_CHUNK_BYTES each,
    each built under `gate` (one empty response when there is nothing to return).
    An entity is a message or its fields (a dict, `ReadSnapshot.response_items`)."""
    source = iter(entities)
    carried: Any = None  # the entity that did not fit the previous response
    more = True
    while more:
        chunk: list[Any] = []
        size = 0
        with gate.building():
            if carried is not None:
                chunk.append(carried)
                size, carried = _entity_bytes(carried), None
            for entity in source:
                entity_bytes = _entity_bytes(entity)
                if chunk and (len(chunk) >= READ_CHUNK or size + entity_bytes > READ_CHUNK_BYTES):
                    carried = entity
                    break
                chunk.append(entity)
                size += entity_bytes
            else:
                more = False
            response = p4runtime_pb2.ReadResponse(entities=chunk)
        yield response
