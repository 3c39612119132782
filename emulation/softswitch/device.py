"""What one software switch holds for P4Runtime: clients, pipeline and entries.

The gRPC layer (p4runtime_service.py) is a thin shell around `Device`; all
decisions (who is primary, what a Write does, what a Read returns) are made
here under one lock, so concurrent RPCs see each Write either done or not yet
started (spec 10.4). Who is primary is `arbitration`, which pipeline is
installed is `pipeline_config`; this module handles Write and Read. A Read
only takes its snapshot under the lock (`read_snapshot`): its messages are
built outside it, so a large Read does not hold Writes back.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import Any

from google.rpc import code_pb2

from controlplane.p4info import P4InfoIndex
from controlplane.proto.p4.v1 import p4runtime_pb2
from emulation.softswitch.arbitration import (
    Arbitration,
    Session,
    StreamEnd,
    election_int,
    fmt_election,
    role_key,
)
from emulation.softswitch.counter_entries import counter_change
from emulation.softswitch.dataplane_effects import DataplaneEffect, dataplane_effect
from emulation.softswitch.entry_validation import (
    ValidEntry,
    initial_default_entry,
    validate_default_entry,
    validate_table_entry,
)
from emulation.softswitch.errors import EntryError
from emulation.softswitch.log_limit import LogLimiter
from emulation.softswitch.pipeline_config import InstalledPipeline, PipelineConfigs
from emulation.softswitch.read_snapshot import ReadSnapshot, take_snapshot
from emulation.softswitch.service_limits import read_capacity
from emulation.softswitch.state import Change, Dataplane

log = logging.getLogger(__name__)

_Update = p4runtime_pb2.Update

# (our choice) Updates one Write may carry: a 100k-update Write held the device
# for 52 s. Above it, RESOURCE_EXHAUSTED; the project's client sends 500 at a time.
MAX_UPDATES_PER_WRITE = 10_000
# Failures of one Write logged at INFO; the rest at DEBUG (the summary line counts them all).
LOGGED_FAILURES = 5
# Restores one stored entry (or default) as it was before an update of a Write.
_Undo = Callable[[], object]

__all__ = [
    "MAX_UPDATES_PER_WRITE",
    "Device",
    "EntryError",
    "InstalledPipeline",
    "Session",
    "StreamEnd",
    "election_int",
]


class Device:
    """One P4Runtime device: arbitration, pipeline, table entries, counters."""

    def __init__(
        self,
        device_id: int,
        dataplane: Dataplane,
        reference: P4InfoIndex | None,
        max_sessions: int | None = None,
    ) -> None:
        self.device_id = device_id
        self.dataplane = dataplane
        self._lock = threading.RLock()
        # Lines clients cause (connects, refused requests) are rate-limited.
        self.log_limit = LogLimiter()
        self.arbitration = Arbitration(device_id, self.log_limit, max_sessions)
        self.pipelines = PipelineConfigs(device_id, dataplane, reference)
        self.packet_outs_dropped = 0

    @property
    def reference(self) -> P4InfoIndex | None:
        """The P4Info a pushed pipeline must match; None accepts any supported P4Info."""
        return self.pipelines.reference

    # --- arbitration (see arbitration.py) ------------------------------------------

    def arbitrate(self, session: Session, update: Any) -> None:
        """Handle a MasterArbitrationUpdate (spec 5.4); raise EntryError to end the stream."""
        with self._lock:
            self.arbitration.arbitrate(session, update)

    def remove_session(self, session: Session) -> None:
        """A stream ended: forget it; if it was primary, the next highest live client takes over."""
        with self._lock:
            self.arbitration.remove_session(session)

    def expire(self, session: Session) -> bool:
        """Close a stream that has not arbitrated in time (True), unless it just did (False)."""
        with self._lock:
            return self.arbitration.expire(session)

    def end_all_sessions(self) -> None:
        """Close every stream (server shutdown)."""
        with self._lock:
            sessions = list(self.arbitration.sessions)
        for session in sessions:
            session.end()

    def primary_election_id(self, role: str = "") -> int | None:
        with self._lock:
            return self.arbitration.primary_election_id(role)

    def packet_out(self, session: Session, packet: Any) -> None:
        """PacketOut: only the primary may send one (spec 16.1); others get a StreamError.

        The Cassini pipeline has no CPU port: the primary's PacketOut is counted and dropped.
        """
        with self._lock:
            role = session.role
            if role is None or self.arbitration.primary(role) is not session:
                why = "has not arbitrated" if role is None else "is not the primary"
                error = p4runtime_pb2.StreamMessageResponse()
                error.error.canonical_code = code_pb2.PERMISSION_DENIED
                error.error.message = f"PacketOut refused: this stream {why}"
                error.error.packet_out.packet_out.CopyFrom(packet)
                session.send(error)
                return
            self.packet_outs_dropped += 1
        self.log_limit.log(
            log,
            logging.DEBUG,
            "device %d: dropped a PacketOut from %s (no CPU port)",
            self.device_id,
            session.peer,
        )

    def _check_device(self, device_id: int) -> None:
        if device_id != self.device_id:
            raise EntryError(
                code_pb2.NOT_FOUND,
                f"unknown device id {device_id} (this is device {self.device_id})",
            )

    # --- pipeline (see pipeline_config.py) -----------------------------------------

    def set_pipeline(self, request: Any) -> None:
        """SetForwardingPipelineConfig (spec 13)."""
        with self._lock:
            self._check_device(request.device_id)
            role = role_key(request.role, request.role_id)
            election_id = self.arbitration.check_primary(role, request)
            self.pipelines.set(request, election_id)

    def get_pipeline(self, request: Any) -> Any:
        """GetForwardingPipelineConfig: the committed config, unset before any (spec 14)."""
        with self._lock:
            self._check_device(request.device_id)
            return self.pipelines.get(request)

    # --- write ---------------------------------------------------------------------

    def write(self, request: Any) -> list[EntryError | None]:
        """Apply a WriteRequest; return one error (or None) per update.

        The updates are checked and applied to the stored entries one by one,
        collecting what each does to the packet path; the packet path gets
        the collected changes as one batch at the end (never a rolled-back
        one), so it sees the Write either not at all or whole. RPC-wide
        problems (device, pipeline, primary, atomicity) raise instead.
        """
        with self._lock:
            # Spec order: device, then the writer's right to write, then the pipeline.
            self._check_device(request.device_id)
            role = role_key(request.role, request.role_id)
            election_id = self.arbitration.check_primary(role, request)
            pipeline = self.pipelines.current()
            atomicity = request.atomicity
            if atomicity not in p4runtime_pb2.WriteRequest.Atomicity.values():
                raise EntryError(code_pb2.INVALID_ARGUMENT, f"unknown atomicity {atomicity}")
            if len(request.updates) > MAX_UPDATES_PER_WRITE:
                raise EntryError(
                    code_pb2.RESOURCE_EXHAUSTED,
                    f"{len(request.updates)} updates in one Write; this target takes at most "
                    f"{MAX_UPDATES_PER_WRITE} (split the batch)",
                )
            # DATAPLANE_ATOMIC is ROLLBACK_ON_ERROR whose changes reach the packet
            # path as one step, which every batch here does.
            rollback = atomicity in (
                p4runtime_pb2.WriteRequest.ROLLBACK_ON_ERROR,
                p4runtime_pb2.WriteRequest.DATAPLANE_ATOMIC,
            )
            live = pipeline is self.pipelines.committed and self.pipelines.saved is None
            undo: list[_Undo] = []
            changes: list[Change] = []
            results: list[EntryError | None] = []
            for update in request.updates:
                try:
                    self._apply(pipeline, update, live, changes, undo)
                    results.append(None)
                except EntryError as err:
                    # A fresh error without the traceback: a failure costs its message only.
                    results.append(EntryError(err.code, err.message))
                    if rollback:
                        break
            failed = [i for i, r in enumerate(results) if r is not None]
            if rollback and failed:
                for restore in reversed(undo):
                    restore()
                first = failed[0]
                aborted = EntryError(
                    code_pb2.ABORTED,
                    f"not applied: update {first} failed and the batch was rolled back",
                )
                results = [
                    results[i] if i == first else aborted for i in range(len(request.updates))
                ]
            elif changes:
                self.dataplane.apply(changes)
            self.log_limit.log(
                log,
                logging.INFO,
                "device %d: write by election id %s: %d updates, %d failed%s",
                self.device_id,
                fmt_election(election_id),
                len(request.updates),
                sum(r is not None for r in results),
                " (rolled back)" if rollback and failed else "",
            )
            logged = 0
            for i, result in enumerate(results):
                if result is not None and result.code != code_pb2.ABORTED:
                    logged += 1
                    level = logging.INFO if logged <= LOGGED_FAILURES else logging.DEBUG
                    self.log_limit.log(
                        log, level, "device %d: update %d: %s", self.device_id, i, result.message
                    )
            return results

    def _apply(
        self,
        pipeline: InstalledPipeline,
        update: Any,
        live: bool,
        changes: list[Change],
        undo: list[_Undo],
    ) -> None:
        if update.type not in (_Update.INSERT, _Update.MODIFY, _Update.DELETE):
            raise EntryError(code_pb2.INVALID_ARGUMENT, "update type is unset")
        kind = update.entity.WhichOneof("entity")
        if kind == "table_entry":
            effect = self._write_table(pipeline, update.type, update.entity.table_entry, undo)
            if live and effect is not None:
                changes.append(effect)
        elif kind == "counter_entry":
            counter = counter_change(pipeline.index, update.entity.counter_entry, update.type)
            if counter is not None:
                changes.append(counter)
        elif kind is None:
            raise EntryError(code_pb2.INVALID_ARGUMENT, "update has no entity")
        else:
            raise EntryError(
                code_pb2.UNIMPLEMENTED, f"{kind} writes are not supported: the pipeline has none"
            )

    def _write_table(
        self, pipeline: InstalledPipeline, update_type: int, entry: Any, undo: list[_Undo]
    ) -> DataplaneEffect | None:
        """Change the stored entries (recording how to undo it); return the packet-path effect."""
        index = pipeline.index
        if entry.is_default_action:
            table, stored = validate_default_entry(index, entry, update_type)
            defaults = pipeline.defaults
            undo.append(functools.partial(defaults.__setitem__, table.id, defaults[table.id]))
            defaults[table.id] = stored or initial_default_entry(index, table)
            return None
        valid = validate_table_entry(index, entry, update_type)
        table_entries = pipeline.entries.setdefault(valid.table.id, {})
        existing = table_entries.get(valid.key)
        if update_type == _Update.INSERT:
            if existing is not None:
                raise EntryError(
                    code_pb2.ALREADY_EXISTS,
                    f"table {valid.table.name}: entry {_show_key(valid)} already exists",
                )
            if valid.table.size and len(table_entries) >= valid.table.size:
                raise EntryError(
                    code_pb2.RESOURCE_EXHAUSTED,
                    f"table {valid.table.name} is full ({valid.table.size} entries)",
                )
            table_entries[valid.key] = valid.entry
            undo.append(functools.partial(table_entries.pop, valid.key))
            stored = valid.entry
        elif existing is None:
            raise EntryError(
                code_pb2.NOT_FOUND, f"table {valid.table.name}: no entry {_show_key(valid)}"
            )
        elif update_type == _Update.MODIFY:
            if not valid.entry.HasField("action"):
                return None  # spec 9.1.2: MODIFY without an action is a no-op
            table_entries[valid.key] = valid.entry
            undo.append(functools.partial(table_entries.__setitem__, valid.key, existing))
            stored = valid.entry
        else:
            del table_entries[valid.key]
            undo.append(functools.partial(table_entries.__setitem__, valid.key, existing))
            stored = existing
        return dataplane_effect(index, stored, deleted=update_type == _Update.DELETE)

    # --- read ------------------------------------------------------------------------

    def read(self, request: Any, max_entities: int | None = None) -> ReadSnapshot:
        """What a ReadRequest returns, as one consistent snapshot: build its entities
        (`ReadSnapshot.entities`) after this returns, outside the lock. At most
        `max_entities`, by default the pipeline's `read_capacity` (every table full,
        every counter cell: one Read of everything always fits)."""
        with self._lock:
            self._check_device(request.device_id)
            pipeline = self.pipelines.current()
            cap = max_entities if max_entities is not None else read_capacity(pipeline.index)
            return take_snapshot(pipeline, request, self.dataplane.counters, cap)


def _show_key(valid: ValidEntry) -> str:
    parts = []
    for match in valid.entry.match:
        field_info = valid.table.match_field_by_id(match.field_id)
        which = match.WhichOneof("field_match_type")
        value = getattr(match, which)
        raw = value.value if which in ("exact", "optional", "lpm", "ternary") else value.low
        width = (field_info.bitwidth + 7) // 8
        parts.append(f"{field_info.name}=0x{int.from_bytes(raw, 'big'):0{2 * width}x}")
    if valid.entry.priority:
        parts.append(f"priority={valid.entry.priority}")
    return "{" + ", ".join(parts) + "}"
