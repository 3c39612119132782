"""Is this P4Runtime table entry valid for the pipeline, and what is its canonical form?

Pure functions between P4Runtime protobufs and the pushed P4Info (as a
`P4InfoIndex`); the device calls them and stores what they return, so every
rule of the spec for table entries lives here and is testable without a socket.

Canonical form: the store keeps each entry as P4Runtime would return it
(bytestrings in their shortest form, match fields and params sorted by id), so a
Read returns what was written up to the encoding of the numbers (spec 8.4,
read-write symmetry).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from google.rpc import code_pb2

from controlplane.p4info import P4InfoIndex, TableInfo
from controlplane.proto.p4.v1 import p4runtime_pb2
from emulation.softswitch.errors import EntryError, invalid, known_object
from topologies.errors import UserInputError

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


# --- bytestrings ----------------------------------------------------------------


def canonical_bytes(value: bytes, bitwidth: int, what: str) -> bytes:
    """Shortest form of an unsigned bytestring, refusing values wider than `bitwidth`.

    Leading zero bytes are accepted (spec 8.4 lets clients pad); an empty
    string or a value that needs more bits is refused. INVALID_ARGUMENT (our
    choice, as the match-format rules and bmv2 do; spec 1.4 names OUT_OF_RANGE
    for the bytestring rule alone).
    """
    if not value:
        raise invalid(f"{what}: empty bytestring")
    number = int.from_bytes(value, "big")
    if number.bit_length() > bitwidth:
        raise invalid(
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
    found: TableInfo = known_object(index.table_by_id, table_id, "unknown table id")
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
            raise invalid(f"table {table.name} has no match field with id {match.field_id}")
        if match.field_id in seen:
            raise invalid(f"table {table.name}: match field {mf.name} given twice")
        seen.add(match.field_id)
        given = match.WhichOneof("field_match_type")
        expected = _ONEOF_OF_KIND.get(mf.match_type)
        if expected is None:
            raise EntryError(
                code_pb2.UNIMPLEMENTED,
                f"table {table.name}: match type {mf.match_type} of {mf.name} is not supported",
            )
        if given != expected:
            raise invalid(
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
                raise invalid(
                    f"{what}: prefix_len {prefix} not in 1..{mf.bitwidth} (omit the field for don't-care)"
                )
            value = canonical_bytes(match.lpm.value, mf.bitwidth, what)
            host_bits = int.from_bytes(value, "big") & ((1 << (mf.bitwidth - prefix)) - 1)
            if host_bits:
                raise invalid(f"{what}: bits beyond the /{prefix} prefix must be 0")
            out.lpm.value, out.lpm.prefix_len = value, prefix
            parts.append((match.field_id, value, prefix))
        elif given == "ternary":
            value = canonical_bytes(match.ternary.value, mf.bitwidth, what)
            mask = canonical_bytes(match.ternary.mask, mf.bitwidth, what + " mask")
            v, m = int.from_bytes(value, "big"), int.from_bytes(mask, "big")
            if m == 0:
                raise invalid(f"{what}: mask 0 is a don't-care; omit the field instead")
            if v & ~m:
                raise invalid(f"{what}: value has bits set outside the mask")
            out.ternary.value, out.ternary.mask = value, mask
            parts.append((match.field_id, value, mask))
        else:  # range
            low = canonical_bytes(match.range.low, mf.bitwidth, what + " low")
            high = canonical_bytes(match.range.high, mf.bitwidth, what + " high")
            lo, hi = int.from_bytes(low, "big"), int.from_bytes(high, "big")
            if lo > hi:
                raise invalid(f"{what}: low {lo} > high {hi}")
            if lo == 0 and hi == (1 << mf.bitwidth) - 1:
                raise invalid(f"{what}: full range is a don't-care; omit the field instead")
            out.range.low, out.range.high = low, high
            parts.append((match.field_id, low, high))
        canonical.append(out)
    for mf in table.match_fields:
        if mf.match_type == "EXACT" and mf.id not in seen:
            raise invalid(f"table {table.name}: exact match field {mf.name} is missing")
    needs_priority = any(mf.match_type in _PRIORITY_KINDS for mf in table.match_fields)
    if needs_priority and entry.priority <= 0:
        raise invalid(
            f"table {table.name} has ternary/range/optional fields: priority must be > 0"
        )
    if not needs_priority and entry.priority != 0:
        raise invalid(
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
            raise invalid(f"action {found.name} is not an action of table {table.name}")
        allowed = [index.action_by_id(a).name for a in table.action_ids]
        raise invalid(
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
            raise invalid(f"action {info.name} has no parameter with id {param.param_id}")
        if param.param_id in seen:
            raise invalid(f"action {info.name}: parameter {spec.name} given twice")
        seen.add(param.param_id)
        value = canonical_bytes(
            param.value, spec.bitwidth, f"action {info.name} parameter {spec.name}"
        )
        out.params.add(param_id=param.param_id, value=value)
    missing = [p.name for p in info.params if p.id not in seen]
    if missing:
        raise invalid(f"action {info.name}: missing parameter(s) {', '.join(missing)}")
    out.params.sort(key=lambda p: p.param_id)
    return out


def validate_table_entry(index: P4InfoIndex, entry: Any, update_type: int) -> ValidEntry:
    """Check a (non-default) table entry of an INSERT, MODIFY or DELETE."""
    table = table_of(index, entry.table_id)
    if entry.is_const:
        raise invalid(f"table {table.name}: is_const must be false in a write")
    if not table.match_fields:
        raise invalid(f"table {table.name} is keyless: only its default entry can be written")
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
            raise invalid(f"table {table.name}: an INSERT needs an action")
    elif which != "action":
        raise invalid(f"table {table.name} is a direct table: {which} is not allowed")
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
        raise invalid(
            f"table {table.name}: the default entry can only be modified, not inserted or deleted"
        )
    if len(entry.match) or entry.priority:
        raise invalid(f"table {table.name}: a default entry has no match fields and priority 0")
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
        raise invalid(f"table {table.name}: a default entry needs a direct action")
    action = canonical_action(index, table, entry.action.action, default=True)
    stored = p4runtime_pb2.TableEntry(table_id=entry.table_id, is_default_action=True)
    stored.action.action.CopyFrom(action)
    stored.controller_metadata = entry.controller_metadata
    stored.metadata = entry.metadata
    return table, stored


def _check_no_direct_resources(table: TableInfo, entry: Any) -> None:
    for name in ("meter_config", "counter_data", "meter_counter_data"):
        if entry.HasField(name):
            raise invalid(f"table {table.name} has no direct resources: {name} must be unset")
    if entry.idle_timeout_ns:
        raise invalid(
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
