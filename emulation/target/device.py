"""What one software switch holds for P4Runtime: clients, pipeline and entries.

The gRPC layer (p4runtime_service.py) is a thin shell around `Device`; all
decisions (who is primary, what a Write does, what a Read returns) are made
here under one lock, so concurrent RPCs see each Write either done or not yet
started (spec 10.4).
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2

from controlplane.p4info import P4InfoIndex
from emulation.target import entries as E
from emulation.target.entries import EntryError
from emulation.target.state import Change, ClearTables, Dataplane
from topologies.errors import UserInputError

log = logging.getLogger(__name__)

_Update = p4runtime_pb2.Update
_SetAction = p4runtime_pb2.SetForwardingPipelineConfigRequest
_GetType = p4runtime_pb2.GetForwardingPipelineConfigRequest


# (our choice) Updates one Write may carry: a 100k-update Write held the device
# for 52 s. Above it, RESOURCE_EXHAUSTED; the project's client sends 500 at a time.
MAX_UPDATES_PER_WRITE = 10_000
# Failures of one Write logged at INFO; the rest at DEBUG (the summary line counts them all).
LOGGED_FAILURES = 5
# Restores one stored entry (or default) as it was before an update of a Write.
_Undo = Callable[[], object]


@dataclass(frozen=True)
class StreamEnd:
    """Put in a session's outbox to end its stream: normally (code None) or with an error."""

    code: int | None = None
    message: str = ""


@dataclass(eq=False)
class Session:
    """One StreamChannel: its place in the election and the queue of messages to send it."""

    outbox: queue.Queue[Any] = field(default_factory=queue.Queue)
    role: str | None = None  # None until its first MasterArbitrationUpdate is accepted
    role_message: Any = None  # the Role as the client sent it, echoed in notifications
    election_id: int | None = None  # None: unset, never primary (spec 15.3.1)
    peer: str = ""

    def send(self, message: Any) -> None:
        self.outbox.put(message)

    def end(self, code: int | None = None, message: str = "") -> None:
        self.outbox.put(StreamEnd(code, message))


@dataclass
class Pipeline:
    """A forwarding pipeline config and the entries written against it."""

    config: Any  # p4runtime_pb2.ForwardingPipelineConfig
    index: P4InfoIndex
    entries: dict[int, dict[E.EntryKey, Any]] = field(default_factory=dict)
    defaults: dict[int, Any] = field(default_factory=dict)

    @classmethod
    def new(cls, config: Any, index: P4InfoIndex) -> Pipeline:
        pipeline = cls(config=config, index=index)
        for table in index.tables:
            pipeline.entries[table.id] = {}
            pipeline.defaults[table.id] = E.initial_default_entry(index, table)
        return pipeline


def election_int(message: Any) -> int:
    """The 128-bit election id of a p4.v1.Uint128."""
    return (message.high << 64) | message.low


def _role_key(name: str, role_id: int = 0) -> str:
    """Roles are told apart by name; the deprecated numeric id maps to a name."""
    return name if name or not role_id else f"id:{role_id}"


def _fmt_election(election_id: int | None) -> str:
    if election_id is None:
        return "unset"
    return f"({election_id >> 64},{election_id & ((1 << 64) - 1)})"


class Device:
    """One P4Runtime device: arbitration, pipeline, table entries, counters."""

    def __init__(
        self, device_id: int, dataplane: Dataplane, reference: P4InfoIndex | None
    ) -> None:
        self.device_id = device_id
        self.dataplane = dataplane
        # The P4Info a pushed pipeline must match; None accepts any supported P4Info.
        self.reference = reference
        self._lock = threading.RLock()
        self._sessions: list[Session] = []  # live (arbitrated) sessions
        self._highest: dict[str, int] = {}  # highest election id ever seen per role
        self._committed: Pipeline | None = None
        self._saved: Pipeline | None = None  # VERIFY_AND_SAVE'd, not yet committed
        self.packet_outs_dropped = 0

    # --- arbitration ------------------------------------------------------------

    def arbitrate(self, session: Session, update: Any) -> None:
        """Handle a MasterArbitrationUpdate (spec 5.4); raise EntryError to end the stream."""
        with self._lock:
            first = session.role is None
            if update.device_id != self.device_id:
                code = code_pb2.NOT_FOUND if first else code_pb2.FAILED_PRECONDITION
                raise EntryError(
                    code, f"unknown device id {update.device_id} (this is device {self.device_id})"
                )
            role = _role_key(update.role.name, update.role.id)
            if update.role.HasField("config"):
                # (our choice) no role-config scheme: every role has full pipeline access.
                raise EntryError(
                    code_pb2.INVALID_ARGUMENT, "role.config is not supported by this target"
                )
            if not first and role != session.role:
                raise EntryError(
                    code_pb2.FAILED_PRECONDITION,
                    f"stream is bound to role {session.role!r}; open a new stream for {role!r}",
                )
            election_id = (
                election_int(update.election_id) if update.HasField("election_id") else None
            )
            if election_id is not None:
                for other in self._sessions:
                    if (
                        other is not session
                        and other.role == role
                        and other.election_id == election_id
                    ):
                        raise EntryError(
                            code_pb2.INVALID_ARGUMENT,
                            f"election id {_fmt_election(election_id)} is already used by another "
                            f"live client of role {role!r}",
                        )
            before = self._primary(role)
            before_id = before.election_id if before else None
            session.role, session.role_message = role, update.role
            session.election_id = election_id
            if first:
                self._sessions.append(session)
            if election_id is not None:
                self._highest[role] = max(self._highest.get(role, election_id), election_id)
            after = self._primary(role)
            status = "primary" if after is session else "backup"
            log.info(
                "device %d: client %s role %r election id %s is %s",
                self.device_id,
                session.peer,
                role,
                _fmt_election(election_id),
                status,
            )
            if after is not before or (after is not None and after.election_id != before_id):
                self._notify_role(role)  # the primary changed: everyone hears (spec 5.5)
            else:
                session.send(self._arbitration_message(role, session))

    def remove_session(self, session: Session) -> None:
        """A stream ended: forget it; if it was primary, the next highest live client takes over."""
        with self._lock:
            if session not in self._sessions:
                return
            role = session.role or ""
            was_primary = self._primary(role) is session
            self._sessions.remove(session)
            log.info(
                "device %d: client %s role %r election id %s disconnected",
                self.device_id,
                session.peer,
                role,
                _fmt_election(session.election_id),
            )
            if was_primary:
                # (our choice) like bmv2/PI, the highest live election id becomes primary
                # at once; spec 1.3 would leave the role without one until a new update.
                new = self._primary(role)
                log.info(
                    "device %d: role %r primary is now %s",
                    self.device_id,
                    role,
                    _fmt_election(new.election_id) if new else "none",
                )
                self._notify_role(role)

    def end_all_sessions(self) -> None:
        """Close every stream (server shutdown)."""
        with self._lock:
            sessions = list(self._sessions)
        for session in sessions:
            session.end()

    def primary_election_id(self, role: str = "") -> int | None:
        with self._lock:
            primary = self._primary(role)
            return primary.election_id if primary else None

    def _primary(self, role: str) -> Session | None:
        candidates = [s for s in self._sessions if s.role == role and s.election_id is not None]
        return max(candidates, key=lambda s: s.election_id or 0, default=None)

    def _notify_role(self, role: str) -> None:
        for session in self._sessions:
            if session.role == role:
                session.send(self._arbitration_message(role, session))

    def _arbitration_message(self, role: str, to: Session) -> Any:
        """The advisory MasterArbitrationUpdate for one client (spec 5.5)."""
        response = p4runtime_pb2.StreamMessageResponse()
        arb = response.arbitration
        arb.device_id = self.device_id
        if to.role_message is not None and (to.role_message.name or to.role_message.id):
            arb.role.CopyFrom(to.role_message)
        primary = self._primary(role)
        shown = primary.election_id if primary else self._highest.get(role)
        if shown is not None:
            arb.election_id.high, arb.election_id.low = shown >> 64, shown & ((1 << 64) - 1)
        if primary is to:
            arb.status.code = code_pb2.OK
            arb.status.message = "this client is the primary"
        elif primary is not None:
            arb.status.code = code_pb2.ALREADY_EXISTS
            arb.status.message = "another client is the primary"
        else:
            arb.status.code = code_pb2.NOT_FOUND
            arb.status.message = "there is no primary client"
        return response

    def packet_out(self, session: Session, packet: Any) -> None:
        """PacketOut: only the primary may send one (spec 16.1); others get a StreamError.

        The Cassini pipeline has no CPU port: the primary's PacketOut is counted and dropped.
        """
        with self._lock:
            role = session.role
            if role is None or self._primary(role) is not session:
                why = "has not arbitrated" if role is None else "is not the primary"
                error = p4runtime_pb2.StreamMessageResponse()
                error.error.canonical_code = code_pb2.PERMISSION_DENIED
                error.error.message = f"PacketOut refused: this stream {why}"
                error.error.packet_out.packet_out.CopyFrom(packet)
                session.send(error)
                return
            self.packet_outs_dropped += 1
        log.debug(
            "device %d: dropped a PacketOut from %s (no CPU port)", self.device_id, session.peer
        )

    def _check_device(self, device_id: int) -> None:
        if device_id != self.device_id:
            raise EntryError(
                code_pb2.NOT_FOUND,
                f"unknown device id {device_id} (this is device {self.device_id})",
            )

    def _check_primary(self, role: str, request: Any) -> int:
        if role and role not in self._highest and all(s.role != role for s in self._sessions):
            raise EntryError(
                code_pb2.NOT_FOUND,
                f"unknown role {role!r}: no client has arbitrated for it on this device",
            )
        if not request.HasField("election_id"):
            raise EntryError(
                code_pb2.PERMISSION_DENIED, "election_id is unset: only the primary may write"
            )
        election_id = election_int(request.election_id)
        primary = self._primary(role)
        if primary is None or primary.election_id != election_id:
            shown = _fmt_election(primary.election_id) if primary else "none"
            raise EntryError(
                code_pb2.PERMISSION_DENIED,
                f"election id {_fmt_election(election_id)} is not the primary of role "
                f"{role!r} (primary: {shown})",
            )
        return election_id

    # --- pipeline -----------------------------------------------------------------

    def set_pipeline(self, request: Any) -> None:
        """SetForwardingPipelineConfig (spec 13)."""
        with self._lock:
            self._check_device(request.device_id)
            role = _role_key(request.role, request.role_id)
            election_id = self._check_primary(role, request)
            action = request.action
            if action not in _SetAction.Action.values():
                raise EntryError(
                    code_pb2.INVALID_ARGUMENT, f"unknown SetForwardingPipelineConfig action {action}"
                )
            name = _SetAction.Action.Name(action)
            if action == _SetAction.COMMIT:
                if request.HasField("config"):
                    raise EntryError(code_pb2.INVALID_ARGUMENT, "COMMIT takes no config")
                if self._saved is None:
                    raise EntryError(
                        code_pb2.NOT_FOUND, "no saved config to commit (VERIFY_AND_SAVE first)"
                    )
                self._committed, self._saved = self._saved, None
                self._rebuild_dataplane(self._committed, zero_counters=True)
                log.info("device %d: committed the saved pipeline", self.device_id)
                return
            if action == _SetAction.UNSPECIFIED:
                raise EntryError(
                    code_pb2.INVALID_ARGUMENT, "SetForwardingPipelineConfig action is unset"
                )
            if not request.HasField("config") or not request.config.HasField("p4info"):
                raise EntryError(code_pb2.INVALID_ARGUMENT, f"{name} needs a config with a P4Info")
            index = E.check_pipeline(request.config.p4info, self.reference)
            config = p4runtime_pb2.ForwardingPipelineConfig()
            config.CopyFrom(request.config)
            if action == _SetAction.VERIFY:
                log.info("device %d: verified a pipeline (%s)", self.device_id, _summary(index))
                return
            pipeline = Pipeline.new(config, index)
            if action == _SetAction.VERIFY_AND_SAVE:
                self._saved = pipeline
            elif action == _SetAction.VERIFY_AND_COMMIT:
                self._committed, self._saved = pipeline, None
                self._rebuild_dataplane(pipeline, zero_counters=True)
            elif action == _SetAction.RECONCILE_AND_COMMIT:
                if self._committed is not None:
                    _carry_entries(self._committed, pipeline)
                self._committed, self._saved = pipeline, None
                self._rebuild_dataplane(pipeline, zero_counters=False)
            else:
                raise EntryError(code_pb2.INVALID_ARGUMENT, f"unknown action {action}")
            log.info(
                "device %d: %s by election id %s: %s, device config %d bytes",
                self.device_id,
                name,
                _fmt_election(election_id),
                _summary(index),
                len(config.p4_device_config),
            )

    def get_pipeline(self, request: Any) -> Any:
        """GetForwardingPipelineConfig: the committed config, unset before any (spec 14)."""
        with self._lock:
            self._check_device(request.device_id)
            response = p4runtime_pb2.GetForwardingPipelineConfigResponse()
            if self._committed is None:
                return response
            stored = self._committed.config
            kind = request.response_type
            if kind == _GetType.ALL:
                response.config.CopyFrom(stored)
            else:
                if stored.HasField("cookie"):
                    response.config.cookie.CopyFrom(stored.cookie)
                else:
                    response.config.SetInParent()
                if kind == _GetType.P4INFO_AND_COOKIE:
                    response.config.p4info.CopyFrom(stored.p4info)
                elif kind == _GetType.DEVICE_CONFIG_AND_COOKIE:
                    response.config.p4_device_config = stored.p4_device_config
            return response

    def _current(self) -> Pipeline:
        """The pipeline Reads and Writes refer to: the saved one if any (spec 13), else committed."""
        pipeline = self._saved or self._committed
        if pipeline is None:
            raise EntryError(
                code_pb2.FAILED_PRECONDITION, "no forwarding pipeline config has been set"
            )
        return pipeline

    def _rebuild_dataplane(self, pipeline: Pipeline, *, zero_counters: bool) -> None:
        """Make the packet path see exactly the pipeline's entries (one batch)."""
        changes: list[Change] = [ClearTables(zero_counters)]
        for table_entries in pipeline.entries.values():
            for entry in table_entries.values():
                effect = E.dataplane_effect(pipeline.index, entry, deleted=False)
                if effect is not None:
                    changes.append(effect)
        self.dataplane.apply(changes)

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
            role = _role_key(request.role, request.role_id)
            election_id = self._check_primary(role, request)
            pipeline = self._current()
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
            live = pipeline is self._committed and self._saved is None
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
            log.info(
                "device %d: write by election id %s: %d updates, %d failed%s",
                self.device_id,
                _fmt_election(election_id),
                len(request.updates),
                sum(r is not None for r in results),
                " (rolled back)" if rollback and failed else "",
            )
            logged = 0
            for i, result in enumerate(results):
                if result is not None and result.code != code_pb2.ABORTED:
                    logged += 1
                    level = logging.INFO if logged <= LOGGED_FAILURES else logging.DEBUG
                    log.log(level, "device %d: update %d: %s", self.device_id, i, result.message)
            return results

    def _apply(
        self,
        pipeline: Pipeline,
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
            counter = E.counter_change(pipeline.index, update.entity.counter_entry, update.type)
            if counter is not None:
                changes.append(counter)
        elif kind is None:
            raise EntryError(code_pb2.INVALID_ARGUMENT, "update has no entity")
        else:
            raise EntryError(
                code_pb2.UNIMPLEMENTED, f"{kind} writes are not supported: the pipeline has none"
            )

    def _write_table(
        self, pipeline: Pipeline, update_type: int, entry: Any, undo: list[_Undo]
    ) -> E.DataplaneEffect | None:
        """Change the stored entries (recording how to undo it); return the packet-path effect."""
        index = pipeline.index
        if entry.is_default_action:
            table, stored = E.validate_default_entry(index, entry, update_type)
            defaults = pipeline.defaults
            undo.append(functools.partial(defaults.__setitem__, table.id, defaults[table.id]))
            defaults[table.id] = stored or E.initial_default_entry(index, table)
            return None
        valid = E.validate_table_entry(index, entry, update_type)
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
        return E.dataplane_effect(index, stored, deleted=update_type == _Update.DELETE)

    # --- read ------------------------------------------------------------------------

    def read(self, request: Any) -> list[Any]:
        """The entities a ReadRequest asks for, as one consistent snapshot."""
        with self._lock:
            self._check_device(request.device_id)
            pipeline = self._current()
            cells = self._counter_cells(pipeline.index, request)
            out: list[Any] = []
            for i, entity in enumerate(request.entities):
                kind = entity.WhichOneof("entity")
                try:
                    if kind == "table_entry":
                        for entry in self._read_table(pipeline, entity.table_entry):
                            e = p4runtime_pb2.Entity()
                            e.table_entry.CopyFrom(entry)
                            out.append(e)
                    elif kind == "counter_entry":
                        for counter in E.counter_entries(
                            pipeline.index, cells, entity.counter_entry
                        ):
                            e = p4runtime_pb2.Entity()
                            e.counter_entry.CopyFrom(counter)
                            out.append(e)
                    elif kind is None:
                        raise EntryError(code_pb2.INVALID_ARGUMENT, "entity is unset")
                    else:
                        # Other kinds (registers, meters, profiles, ...) do not exist in a
                        # pipeline this target accepts: a wildcard read finds nothing,
                        # a read naming an id names something that is not there.
                        _check_absent_kind(kind, getattr(entity, kind))
                except EntryError as err:
                    # (our choice) like bmv2, the first bad request fails the whole Read.
                    raise EntryError(err.code, f"entity {i}: {err.message}") from None
            return out

    def _counter_cells(self, index: P4InfoIndex, request: Any) -> dict[str, Any]:
        """Every counter a Read names, read from the packet path at one instant."""
        names: set[str] = set()
        for i, entity in enumerate(request.entities):
            if entity.WhichOneof("entity") == "counter_entry":
                try:
                    names.update(c.name for c in E.counters_of_read(index, entity.counter_entry))
                except EntryError as err:
                    raise EntryError(err.code, f"entity {i}: {err.message}") from None
        return self.dataplane.counters(sorted(names)) if names else {}

    def _read_table(self, pipeline: Pipeline, query: Any) -> Iterable[Any]:
        index = pipeline.index
        if query.table_id == 0:
            tables = [t.id for t in index.tables]
        else:
            tables = [E.table_of(index, query.table_id).id]
        if query.is_default_action:
            return [pipeline.defaults[t] for t in tables]
        if query.table_id and len(query.match):
            table = E.table_of(index, query.table_id)
            key = E.match_key_for_read(table, query)
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


def _summary(index: P4InfoIndex) -> str:
    return (
        f"{len(index.tables)} tables, {len(index.actions)} actions, {len(index.counters)} counters"
    )


def _show_key(valid: E.ValidEntry) -> str:
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


def _carry_entries(old: Pipeline, new: Pipeline) -> None:
    """RECONCILE_AND_COMMIT: move entries to the new P4Info by name, or refuse (spec 13)."""
    for table_entries in old.entries.values():
        for entry in table_entries.values():
            moved = _rename_ids(old.index, new.index, entry)
            valid = E.validate_table_entry(new.index, moved, _Update.INSERT)
            new.entries.setdefault(valid.table.id, {})[valid.key] = valid.entry
    for entry in old.defaults.values():
        moved = _rename_ids(old.index, new.index, entry)
        new.defaults[moved.table_id] = moved


def _rename_ids(old: P4InfoIndex, new: P4InfoIndex, entry: Any) -> Any:
    """The same entry with the new P4Info's ids, found by name."""
    try:
        old_table = old.table_by_id(entry.table_id)
        new_table = new.table(old_table.name)
        moved = p4runtime_pb2.TableEntry()
        moved.CopyFrom(entry)
        moved.table_id = new_table.id
        for match in moved.match:
            name = old_table.match_field_by_id(match.field_id).name
            match.field_id = new_table.match_field(name).id
        if moved.HasField("action") and moved.action.action.action_id:
            old_action = old.action_by_id(moved.action.action.action_id)
            new_action = new.action(old_action.name)
            moved.action.action.action_id = new_action.id
            for param in moved.action.action.params:
                name = old_action.param_by_id(param.param_id).name
                param.param_id = new_action.param(name).id
        return moved
    except UserInputError as err:
        raise EntryError(
            code_pb2.INVALID_ARGUMENT, f"cannot keep the installed entries: {err}"
        ) from None
