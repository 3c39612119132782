"""Is this P4Runtime entity valid for the pipeline, and what does it do to the dataplane?

Pure functions between P4Runtime protobufs, the pushed P4Info (as a
`P4InfoIndex`) and the dataplane `Change`s they lead to. The gRPC service only calls these and
turns `EntryError` into gRPC statuses, so every rule of the spec lives here and
is testable without a socket.

Canonical form: the store keeps each entry as P4Runtime would return it
(bytestrings in their shortest form, match fields and params sorted by id), so a
Read returns what was written up to the encoding of the numbers (spec 8.4,
read-write symmetry).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from google.rpc import code_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2

from controlplane.p4info import CounterInfo, P4InfoIndex, TableInfo, index_p4info
from controlplane.p4names import FORWARD_ACTION, FORWARD_TABLE, WRED_ACTION, WRED_TABLE
from emulation.target.state import (
    COUNTER_CELLS,
    CounterChange,
    ForwardChange,
    WredChange,
    WredProfile,
)
from topologies.errors import UserInputError, did_you_mean

# Match kinds that make a table need a non-zero priority (spec 9.1).
_PRIORITY_KINDS = ("TERNARY", "RANGE", "OPTIONAL")
# FieldMatch oneof member for each P4Info match type.
_ONEOF_OF_KIND = {
    "EXACT": "exact",
    "LPM": "lpm",
    "TERNARY": "ternary",
    "RANGE": "range",
    "OPTIONAL": "optional",
}

# Object kinds of a P4Info this target has no implementation for.
_UNSUPPORTED_KINDS = (
    "action_profiles",
    "direct_counters",
    "meters",
    "direct_meters",
    "value_sets",
    "registers",
    "digests",
    "externs",
)


class EntryError(Exception):
    """A P4Runtime error: a google.rpc code (code_pb2) and a message naming the culprit."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"EntryError({code_pb2.Code.Name(self.code)}, {self.message!r})"


def _invalid(message: str) -> EntryError:
    return EntryError(code_pb2.INVALID_ARGUMENT, message)


# --- the pipeline -------------------------------------------------------------


def check_pipeline(p4info: Any, reference: P4InfoIndex | None) -> P4InfoIndex:
    """Index a pushed P4Info, refusing what this target cannot realize.

    With a reference (the Cassini P4Info), the pushed P4Info must declare the
    same tables, actions and counters by name, with the same match fields,
    parameters and widths; ids may differ (entries are translated by name).
    Without one, any P4Info made only of tables, actions and counters is
    accepted and its entries are stored but only Cassini-named tables reach
    the packet path.
    """
    for kind in _UNSUPPORTED_KINDS:
        objects = getattr(p4info, kind)
        if len(objects):
            names = ", ".join(o.preamble.name for o in objects)
            raise _invalid(
                f"P4Info has {kind} ({names}), which this software target does not support"
            )
    if reference is not None and len(p4info.controller_packet_metadata):
        names = ", ".join(o.preamble.name for o in p4info.controller_packet_metadata)
        raise _invalid(
            f"P4Info has controller_packet_metadata ({names}): the Cassini pipeline has no CPU port"
        )
    _check_unique_ids(p4info)
    index = index_p4info(p4info)
    for table in index.tables:
        for action_id in table.action_ids:
            _known(index.action_by_id, action_id, f"table {table.name} refers to action id")
        if table.const_default_action_id not in (0, *table.action_ids):
            raise _invalid(
                f"table {table.name}: const default action id {table.const_default_action_id} "
                "is not one of its actions"
            )
    for counter in index.counters:
        if counter.size > COUNTER_CELLS:
            raise _invalid(
                f"counter {counter.name} has {counter.size} cells; this target has {COUNTER_CELLS}"
            )
    for raw_table in p4info.tables:
        name = raw_table.preamble.name
        if raw_table.implementation_id:
            raise _invalid(
                f"table {name} uses an action profile, which this target does not support"
            )
        if len(raw_table.direct_resource_ids):
            raise _invalid(f"table {name} has direct resources, which this target does not support")
        if raw_table.idle_timeout_behavior != p4info_pb2.Table.NO_TIMEOUT:
            raise _invalid(
                f"table {name} asks for idle timeouts, which this target does not support"
            )
        if raw_table.is_const_table:
            raise _invalid(f"table {name} is a const table, which this target does not support")
    if reference is not None:
        _check_same_program(index, reference)
    return index


def _check_unique_ids(p4info: Any) -> None:
    seen: dict[int, str] = {}
    for kind in ("tables", "actions", "counters"):
        for obj in getattr(p4info, kind):
            object_id = obj.preamble.id
            if object_id == 0:
                raise _invalid(f"{kind[:-1]} {obj.preamble.name} has id 0 (reserved)")
            if object_id in seen:
                raise _invalid(
                    f"id {object_id} is used by both {seen[object_id]} and {obj.preamble.name}"
                )
            seen[object_id] = obj.preamble.name


def _check_same_program(pushed: P4InfoIndex, reference: P4InfoIndex) -> None:
    """Refuse a P4Info that is not the Cassini pipeline, naming the first difference."""
    for kind in ("table", "action", "counter"):
        ours = {o.name: o for o in getattr(reference, kind + "s")}
        theirs = {o.name: o for o in getattr(pushed, kind + "s")}
        for name in theirs:
            if name not in ours:
                hint = did_you_mean(name, list(ours), f"{kind} in the Cassini pipeline")
                raise _invalid(f"unsupported {kind} {name!r} in P4Info: {hint}")
        for name in ours:
            if name not in theirs:
                raise _invalid(f"P4Info lacks {kind} {name} of the Cassini pipeline")
    for table in pushed.tables:
        ref = reference.table(table.name)
        ref_fields = {m.name: (m.bitwidth, m.match_type) for m in ref.match_fields}
        got_fields = {m.name: (m.bitwidth, m.match_type) for m in table.match_fields}
        if got_fields != ref_fields:
            raise _invalid(
                f"table {table.name}: match fields {_describe(got_fields)} differ from the "
                f"Cassini pipeline's {_describe(ref_fields)}"
            )
        ref_actions = {reference.action_by_id(a).name for a in ref.action_ids}
        got_actions = {pushed.action_by_id(a).name for a in table.action_ids}
        if got_actions != ref_actions:
            raise _invalid(
                f"table {table.name}: actions {sorted(got_actions)} differ from the Cassini "
                f"pipeline's {sorted(ref_actions)}"
            )
        ref_default = _action_name(reference, ref.const_default_action_id)
        got_default = _action_name(pushed, table.const_default_action_id)
        if got_default != ref_default:
            raise _invalid(
                f"table {table.name}: const default action {got_default or 'none'} differs from "
                f"the Cassini pipeline's {ref_default or 'none'}"
            )
    for action in pushed.actions:
        ref_action = reference.action(action.name)
        ref_params = {p.name: p.bitwidth for p in ref_action.params}
        got_params = {p.name: p.bitwidth for p in action.params}
        if got_params != ref_params:
            raise _invalid(
                f"action {action.name}: parameters {_describe(got_params)} differ from the "
                f"Cassini pipeline's {_describe(ref_params)}"
            )


def _action_name(index: P4InfoIndex, action_id: int) -> str:
    return index.action_by_id(action_id).name if action_id else ""


def _describe(fields: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in sorted(fields.items())) + "}"


# --- bytestrings ----------------------------------------------------------------


def canonical_bytes(value: bytes, bitwidth: int, what: str) -> bytes:
    """Shortest form of an unsigned bytestring, refusing values wider than `bitwidth`.

    Leading zero bytes are accepted (spec 8.4 lets clients pad); an empty
    string or a value that needs more bits is refused. INVALID_ARGUMENT (our
    choice, as the match-format rules and bmv2 do; spec 1.4 names OUT_OF_RANGE
    for the bytestring rule alone).
    """
    if not value:
        raise _invalid(f"{what}: empty bytestring")
    number = int.from_bytes(value, "big")
    if number.bit_length() > bitwidth:
        raise _invalid(
            f"{what}: value 0x{value.hex()} does not fit in bit<{bitwidth}> "
            f"(max 0x{(1 << bitwidth) - 1:x})"
        )
    if number == 0:
        return b"\x00"
    return number.to_bytes((number.bit_length() + 7) // 8, "big")


# --- table entries ----------------------------------------------------------------

# (sorted match tuple, priority): identifies an entry within its table.
EntryKey = tuple[tuple[tuple[Any, ...], ...], int]


# (our choice) The opaque metadata bytes a table entry may carry: with 1 MiB per
# entry, a wildcard Read of a few thousand entries no longer fitted any message.
MAX_METADATA_BYTES = 4096


@dataclass(frozen=True)
class ValidEntry:
    """A checked table entry: its table, key and the canonical message."""

    table: TableInfo
    key: EntryKey
    entry: Any  # p4runtime_pb2.TableEntry, canonical


def table_of(index: P4InfoIndex, table_id: int) -> TableInfo:
    """The table of an id, or INVALID_ARGUMENT naming the id."""
    found: TableInfo = _known(index.table_by_id, table_id, "unknown table id")
    return found


def entry_key(table: TableInfo, entry: Any) -> tuple[EntryKey, list[Any]]:
    """The key of an entry's match and priority, and its canonical FieldMatch list."""
    fields = {mf.id: mf for mf in table.match_fields}
    seen: set[int] = set()
    canonical: list[Any] = []
    parts: list[tuple[Any, ...]] = []
    for match in entry.match:
        mf = fields.get(match.field_id)
        if mf is None:
            raise _invalid(f"table {table.name} has no match field with id {match.field_id}")
        if match.field_id in seen:
            raise _invalid(f"table {table.name}: match field {mf.name} given twice")
        seen.add(match.field_id)
        given = match.WhichOneof("field_match_type")
        expected = _ONEOF_OF_KIND.get(mf.match_type)
        if expected is None:
            raise EntryError(
                code_pb2.UNIMPLEMENTED,
                f"table {table.name}: match type {mf.match_type} of {mf.name} is not supported",
            )
        if given != expected:
            raise _invalid(
                f"table {table.name}: match field {mf.name} is {mf.match_type}, got a {given or 'empty'} match"
            )
        what = f"table {table.name} match field {mf.name}"
        out = p4runtime_pb2.FieldMatch(field_id=match.field_id)
        if given == "exact":
            value = canonical_bytes(match.exact.value, mf.bitwidth, what)
            out.exact.value = value
            parts.append((match.field_id, value))
        elif given == "optional":
            value = canonical_bytes(match.optional.value, mf.bitwidth, what)
            out.optional.value = value
            parts.append((match.field_id, value))
        elif given == "lpm":
            prefix = match.lpm.prefix_len
            if not 0 < prefix <= mf.bitwidth:
                raise _invalid(
                    f"{what}: prefix_len {prefix} not in 1..{mf.bitwidth} (omit the field for don't-care)"
                )
            value = canonical_bytes(match.lpm.value, mf.bitwidth, what)
            host_bits = int.from_bytes(value, "big") & ((1 << (mf.bitwidth - prefix)) - 1)
            if host_bits:
                raise _invalid(f"{what}: bits beyond the /{prefix} prefix must be 0")
            out.lpm.value, out.lpm.prefix_len = value, prefix
            parts.append((match.field_id, value, prefix))
        elif given == "ternary":
            value = canonical_bytes(match.ternary.value, mf.bitwidth, what)
            mask = canonical_bytes(match.ternary.mask, mf.bitwidth, what + " mask")
            v, m = int.from_bytes(value, "big"), int.from_bytes(mask, "big")
            if m == 0:
                raise _invalid(f"{what}: mask 0 is a don't-care; omit the field instead")
            if v & ~m:
                raise _invalid(f"{what}: value has bits set outside the mask")
            out.ternary.value, out.ternary.mask = value, mask
            parts.append((match.field_id, value, mask))
        else:  # range
            low = canonical_bytes(match.range.low, mf.bitwidth, what + " low")
            high = canonical_bytes(match.range.high, mf.bitwidth, what + " high")
            lo, hi = int.from_bytes(low, "big"), int.from_bytes(high, "big")
            if lo > hi:
                raise _invalid(f"{what}: low {lo} > high {hi}")
            if lo == 0 and hi == (1 << mf.bitwidth) - 1:
                raise _invalid(f"{what}: full range is a don't-care; omit the field instead")
            out.range.low, out.range.high = low, high
            parts.append((match.field_id, low, high))
        canonical.append(out)
    for mf in table.match_fields:
        if mf.match_type == "EXACT" and mf.id not in seen:
            raise _invalid(f"table {table.name}: exact match field {mf.name} is missing")
    needs_priority = any(mf.match_type in _PRIORITY_KINDS for mf in table.match_fields)
    if needs_priority and entry.priority <= 0:
        raise _invalid(
            f"table {table.name} has ternary/range/optional fields: priority must be > 0"
        )
    if not needs_priority and entry.priority != 0:
        raise _invalid(
            f"table {table.name} has only exact/lpm fields: priority must be 0, got {entry.priority}"
        )
    canonical.sort(key=lambda m: m.field_id)
    parts.sort(key=lambda p: p[0])
    return (tuple(parts), entry.priority), canonical


def canonical_action(index: P4InfoIndex, table: TableInfo, action: Any, *, default: bool) -> Any:
    """Check an Action against the table and the action's params; return it canonical."""
    if action.action_id not in table.action_ids:
        try:
            found = index.action_by_id(action.action_id)
        except UserInputError:
            found = None
        if found is not None:
            raise _invalid(f"action {found.name} is not an action of table {table.name}")
        allowed = [index.action_by_id(a).name for a in table.action_ids]
        raise _invalid(
            f"unknown action id {action.action_id} for table {table.name} (allowed: {', '.join(allowed)})"
        )
    info = index.action_by_id(action.action_id)
    if not default and action.action_id in table.default_only_action_ids:
        raise EntryError(
            code_pb2.PERMISSION_DENIED,
            f"action {info.name} is @defaultonly in table {table.name}: it cannot be an entry's action",
        )
    params = {p.id: p for p in info.params}
    out = p4runtime_pb2.Action(action_id=action.action_id)
    seen: set[int] = set()
    for param in action.params:
        spec = params.get(param.param_id)
        if spec is None:
            raise _invalid(f"action {info.name} has no parameter with id {param.param_id}")
        if param.param_id in seen:
            raise _invalid(f"action {info.name}: parameter {spec.name} given twice")
        seen.add(param.param_id)
        value = canonical_bytes(
            param.value, spec.bitwidth, f"action {info.name} parameter {spec.name}"
        )
        out.params.add(param_id=param.param_id, value=value)
    missing = [p.name for p in info.params if p.id not in seen]
    if missing:
        raise _invalid(f"action {info.name}: missing parameter(s) {', '.join(missing)}")
    out.params.sort(key=lambda p: p.param_id)
    return out


def validate_table_entry(index: P4InfoIndex, entry: Any, update_type: int) -> ValidEntry:
    """Check a (non-default) table entry of an INSERT, MODIFY or DELETE."""
    table = table_of(index, entry.table_id)
    if entry.is_const:
        raise _invalid(f"table {table.name}: is_const must be false in a write")
    if not table.match_fields:
        raise _invalid(f"table {table.name} is keyless: only its default entry can be written")
    key, match = entry_key(table, entry)
    canonical = p4runtime_pb2.TableEntry(table_id=entry.table_id, priority=entry.priority)
    canonical.match.extend(match)
    if update_type == p4runtime_pb2.Update.DELETE:
        # Spec 9.1: a DELETE is identified by its key; other fields are ignored.
        return ValidEntry(table, key, canonical)
    _check_no_direct_resources(table, entry)
    which = entry.action.WhichOneof("type") if entry.HasField("action") else None
    if which is None:
        if update_type == p4runtime_pb2.Update.INSERT:
            raise _invalid(f"table {table.name}: an INSERT needs an action")
    elif which != "action":
        raise _invalid(f"table {table.name} is a direct table: {which} is not allowed")
    else:
        canonical.action.action.CopyFrom(
            canonical_action(index, table, entry.action.action, default=False)
        )
    if len(entry.metadata) > MAX_METADATA_BYTES:
        raise EntryError(
            code_pb2.RESOURCE_EXHAUSTED,
            f"table {table.name}: metadata of {len(entry.metadata)} bytes; this target keeps "
            f"at most {MAX_METADATA_BYTES} per entry",
        )
    canonical.controller_metadata = entry.controller_metadata
    canonical.metadata = entry.metadata
    return ValidEntry(table, key, canonical)


def validate_default_entry(
    index: P4InfoIndex, entry: Any, update_type: int
) -> tuple[TableInfo, Any]:
    """Check a write of a table's default entry (spec 9.1.3); return the entry to store, or None to reset."""
    table = table_of(index, entry.table_id)
    if update_type != p4runtime_pb2.Update.MODIFY:
        raise _invalid(
            f"table {table.name}: the default entry can only be modified, not inserted or deleted"
        )
    if len(entry.match) or entry.priority:
        raise _invalid(f"table {table.name}: a default entry has no match fields and priority 0")
    if table.const_default_action_id:
        const = index.action_by_id(table.const_default_action_id).name
        raise EntryError(
            code_pb2.PERMISSION_DENIED,
            f"table {table.name}: the default action {const} is const and cannot be modified",
        )
    _check_no_direct_resources(table, entry)
    if not entry.HasField("action"):
        return table, None
    if entry.action.WhichOneof("type") != "action":
        raise _invalid(f"table {table.name}: a default entry needs a direct action")
    action = canonical_action(index, table, entry.action.action, default=True)
    stored = p4runtime_pb2.TableEntry(table_id=entry.table_id, is_default_action=True)
    stored.action.action.CopyFrom(action)
    stored.controller_metadata = entry.controller_metadata
    stored.metadata = entry.metadata
    return table, stored


def _check_no_direct_resources(table: TableInfo, entry: Any) -> None:
    for name in ("meter_config", "counter_data", "meter_counter_data"):
        if entry.HasField(name):
            raise _invalid(f"table {table.name} has no direct resources: {name} must be unset")
    if entry.idle_timeout_ns:
        raise _invalid(
            f"table {table.name} does not support idle timeouts: idle_timeout_ns must be 0"
        )


def initial_default_entry(index: P4InfoIndex, table: TableInfo) -> Any:
    """The default entry a table starts with: its const default action, else NoAction (spec 9.1.3)."""
    entry = p4runtime_pb2.TableEntry(table_id=table.id, is_default_action=True)
    action_id = table.const_default_action_id
    if not action_id:
        no_action = [a for a in table.action_ids if index.action_by_id(a).name == "NoAction"]
        action_id = no_action[0] if no_action else 0
    if action_id:
        entry.action.action.action_id = action_id
    return entry


def match_key_for_read(table: TableInfo, entry: Any) -> EntryKey:
    """The key a Read names when it gives a match (validated like a write)."""
    key, _ = entry_key(table, entry)
    return key


# --- what the packet path sees ----------------------------------------------------


DataplaneEffect = ForwardChange | WredChange


def dataplane_effect(index: P4InfoIndex, entry: Any, *, deleted: bool) -> DataplaneEffect | None:
    """What an installed (or deleted) canonical entry means to the packet path; None if nothing."""
    table = index.table_by_id(entry.table_id)
    values = {table.match_field_by_id(m.field_id).name: m for m in entry.match}
    if table.name == FORWARD_TABLE:
        ingress = int.from_bytes(values["ingress_port"].exact.value, "big")
        mac = int.from_bytes(values["dst_mac"].exact.value, "big").to_bytes(6, "big")
        port = None if deleted else _param_value(index, entry, FORWARD_ACTION, "port")
        return ForwardChange(ingress, mac, port)
    if table.name == WRED_TABLE:
        egress = int.from_bytes(values["egress_port"].exact.value, "big")
        profile = None
        if not deleted and _action_name(index, entry.action.action.action_id) == WRED_ACTION:
            profile = WredProfile(
                min_cells=_param_value(index, entry, WRED_ACTION, "min_cells") or 0,
                max_cells=_param_value(index, entry, WRED_ACTION, "max_cells") or 0,
                max_prob_percent=_param_value(index, entry, WRED_ACTION, "max_prob") or 0,
            )
        return WredChange(egress, profile)
    return None


def _param_value(index: P4InfoIndex, entry: Any, action_name: str, param: str) -> int | None:
    """The value of `param` if the entry's action is `action_name`, else None (e.g. drop)."""
    action = index.action_by_id(entry.action.action.action_id)
    if action.name != action_name:
        return None
    param_id = action.param(param).id
    for p in entry.action.action.params:
        if p.param_id == param_id:
            return int.from_bytes(p.value, "big")
    return None


# --- counters ---------------------------------------------------------------------


def counters_of_read(index: P4InfoIndex, query: Any) -> list[CounterInfo]:
    """The counters a CounterEntry read names (all of them for counter_id 0)."""
    if query.counter_id == 0:
        return list(index.counters)
    return [_counter_of(index, query.counter_id)]


def counter_entries(
    index: P4InfoIndex, cells_of: Mapping[str, np.ndarray], query: Any
) -> list[Any]:
    """The CounterEntry messages a read of `query` returns (wildcards per spec 9.5),
    from counter arrays read at one instant (`cells_of`: name -> [cells, 2])."""
    out = []
    for counter in counters_of_read(index, query):
        cells = cells_of[counter.name][: counter.size]
        if query.counter_id and query.HasField("index"):
            indexes: Iterable[int] = [_checked_index(counter, query.index.index)]
        else:
            indexes = range(counter.size)
        for i in indexes:
            entry = p4runtime_pb2.CounterEntry(counter_id=counter.id)
            entry.index.index = i
            if counter.unit in ("PACKETS", "BOTH"):
                entry.data.packet_count = int(cells[i, 0])
            if counter.unit in ("BYTES", "BOTH"):
                entry.data.byte_count = int(cells[i, 1])
            if not entry.HasField("data"):
                entry.data.SetInParent()
            out.append(entry)
    return out


def counter_change(index: P4InfoIndex, entry: Any, update_type: int) -> CounterChange | None:
    """What a counter write sets: one cell (or every cell when index is unset); MODIFY only."""
    counter = _counter_of(index, entry.counter_id)
    if update_type != p4runtime_pb2.Update.MODIFY:
        raise _invalid(f"counter {counter.name}: counter entries can only be modified")
    if not entry.HasField("data"):
        return None  # spec 9.5: no data, no change
    cell = _checked_index(counter, entry.index.index) if entry.HasField("index") else None
    return CounterChange(
        counter.name, cell, counter.size, entry.data.packet_count, entry.data.byte_count
    )


def _counter_of(index: P4InfoIndex, counter_id: int) -> CounterInfo:
    found: CounterInfo = _known(index.counter_by_id, counter_id, "unknown counter id")
    return found


def _known(lookup: Callable[[int], Any], object_id: int, what: str) -> Any:
    """The P4Info object of an id, or INVALID_ARGUMENT '<what> <id>'."""
    try:
        return lookup(object_id)
    except UserInputError:
        raise _invalid(f"{what} {object_id}") from None


def _checked_index(counter: CounterInfo, i: int) -> int:
    if i < 0:
        raise _invalid(f"counter {counter.name}: negative index {i}")
    if i >= counter.size:
        raise EntryError(
            code_pb2.OUT_OF_RANGE, f"counter {counter.name}: index {i} >= size {counter.size}"
        )
    return i
