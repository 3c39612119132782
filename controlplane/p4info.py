"""Which P4 objects does the pipeline have, and how are their values encoded?

The P4Info (p4src/cassini.p4info.txtpb, shipped in the wheel as package
data of `p4src`, next to the P4 sources it describes) is the one source of truth for
table, action, parameter and counter names, ids and bit widths. This module
wraps it in small frozen dataclasses so no raw protobuf leaks into the rest of
the control plane or the software target, and answers a wrong name with the
names that exist.

It also holds the P4Runtime byte encoding (spec section 8.4: canonical binary
strings are big-endian, minimal length, zero is one zero byte).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from google.protobuf import text_format

from controlplane.proto.p4.config.v1 import p4info_pb2
from topologies.datafile import read_capped_bytes
from topologies.errors import UserInputError, did_you_mean

# The P4 programs and their P4Info are package data, found through the import
# system, so an installed wheel finds them as a source checkout does.
P4_DIR: Traversable = resources.files("p4src")
DEFAULT_P4INFO: Traversable = P4_DIR / "cassini.p4info.txtpb"

# Names of the P4Info enum values, kept next to the protobuf and checked against
# it at import so the two cannot drift (finsy's habit).
MATCH_TYPES = {2: "EXACT", 3: "LPM", 4: "TERNARY", 5: "RANGE", 6: "OPTIONAL"}
COUNTER_UNITS = {0: "UNSPECIFIED", 1: "BYTES", 2: "PACKETS", 3: "BOTH"}
for _number, _name in MATCH_TYPES.items():
    assert p4info_pb2.MatchField.MatchType.Value(_name) == _number, _name
for _number, _name in COUNTER_UNITS.items():
    assert p4info_pb2.CounterSpec.Unit.Value(_name) == _number, _name


@dataclass(frozen=True)
class MatchFieldInfo:
    id: int
    name: str
    bitwidth: int
    match_type: str  # "EXACT", "LPM", "TERNARY", "RANGE" or "OPTIONAL"


@dataclass(frozen=True)
class ParamInfo:
    id: int
    name: str
    bitwidth: int


@dataclass(frozen=True)
class TableInfo:
    id: int
    name: str
    alias: str
    match_fields: tuple[MatchFieldInfo, ...]
    action_ids: tuple[int, ...]
    const_default_action_id: int
    size: int
    # Actions that may only be the default action (@defaultonly), never an entry's.
    default_only_action_ids: tuple[int, ...] = ()

    def match_field(self, name: str) -> MatchFieldInfo:
        for mf in self.match_fields:
            if mf.name == name:
                return mf
        raise UserInputError(
            did_you_mean(name, [m.name for m in self.match_fields], f"match field of {self.name}")
        )

    def match_field_by_id(self, field_id: int) -> MatchFieldInfo:
        for mf in self.match_fields:
            if mf.id == field_id:
                return mf
        raise UserInputError(f"table {self.name} has no match field with id {field_id}")


@dataclass(frozen=True)
class ActionInfo:
    id: int
    name: str
    alias: str
    params: tuple[ParamInfo, ...]

    def param(self, name: str) -> ParamInfo:
        for p in self.params:
            if p.name == name:
                return p
        raise UserInputError(
            did_you_mean(name, [p.name for p in self.params], f"parameter of action {self.name}")
        )

    def param_by_id(self, param_id: int) -> ParamInfo:
        for p in self.params:
            if p.id == param_id:
                return p
        raise UserInputError(f"action {self.name} has no parameter with id {param_id}")


@dataclass(frozen=True)
class CounterInfo:
    id: int
    name: str
    alias: str
    unit: str  # "BYTES", "PACKETS" or "BOTH"
    size: int


@dataclass(frozen=True)
class P4InfoIndex:
    """Lookups by full name, alias or id over one P4Info."""

    p4info: Any  # p4info_pb2.P4Info; typed Any so callers need no protobuf stubs
    tables: tuple[TableInfo, ...]
    actions: tuple[ActionInfo, ...]
    counters: tuple[CounterInfo, ...]
    _by_name: dict[tuple[str, str], Any] = field(repr=False, compare=False, hash=False)
    _by_id: dict[int, Any] = field(repr=False, compare=False, hash=False)

    def _lookup(self, kind: str, name: str) -> Any:
        found = self._by_name.get((kind, name))
        if found is None:
            known = [o.name for o in getattr(self, kind + "s")]
            raise UserInputError(did_you_mean(name, known, kind))
        return found

    def _lookup_id(self, kind: type, what: str, object_id: int) -> Any:
        found = self._by_id.get(object_id)
        if not isinstance(found, kind):
            raise UserInputError(f"no {what} with id {object_id} in the P4Info")
        return found

    def table(self, name: str) -> TableInfo:
        result: TableInfo = self._lookup("table", name)
        return result

    def action(self, name: str) -> ActionInfo:
        result: ActionInfo = self._lookup("action", name)
        return result

    def counter(self, name: str) -> CounterInfo:
        result: CounterInfo = self._lookup("counter", name)
        return result

    def table_by_id(self, table_id: int) -> TableInfo:
        result: TableInfo = self._lookup_id(TableInfo, "table", table_id)
        return result

    def action_by_id(self, action_id: int) -> ActionInfo:
        result: ActionInfo = self._lookup_id(ActionInfo, "action", action_id)
        return result

    def counter_by_id(self, counter_id: int) -> CounterInfo:
        result: CounterInfo = self._lookup_id(CounterInfo, "counter", counter_id)
        return result


def index_p4info(p4info: Any) -> P4InfoIndex:
    """Build the lookups of a parsed P4Info message."""
    tables = tuple(
        TableInfo(
            id=t.preamble.id,
            name=t.preamble.name,
            alias=t.preamble.alias,
            match_fields=tuple(
                MatchFieldInfo(
                    mf.id, mf.name, mf.bitwidth, MATCH_TYPES.get(mf.match_type, "UNSPECIFIED")
                )
                for mf in t.match_fields
            ),
            action_ids=tuple(ref.id for ref in t.action_refs),
            const_default_action_id=t.const_default_action_id,
            size=t.size,
            default_only_action_ids=tuple(
                ref.id for ref in t.action_refs if ref.scope == p4info_pb2.ActionRef.DEFAULT_ONLY
            ),
        )
        for t in p4info.tables
    )
    actions = tuple(
        ActionInfo(
            id=a.preamble.id,
            name=a.preamble.name,
            alias=a.preamble.alias,
            params=tuple(ParamInfo(p.id, p.name, p.bitwidth) for p in a.params),
        )
        for a in p4info.actions
    )
    counters = tuple(
        CounterInfo(
            id=c.preamble.id,
            name=c.preamble.name,
            alias=c.preamble.alias,
            unit=COUNTER_UNITS.get(c.spec.unit, "UNSPECIFIED"),
            size=c.size,
        )
        for c in p4info.counters
    )
    by_name: dict[tuple[str, str], Any] = {}
    by_id: dict[int, Any] = {}
    for kind, objects in (("table", tables), ("action", actions), ("counter", counters)):
        for obj in objects:
            by_name[(kind, obj.name)] = obj
            if obj.alias:
                by_name.setdefault((kind, obj.alias), obj)
            by_id[obj.id] = obj
    return P4InfoIndex(p4info, tables, actions, counters, by_name, by_id)


# P4Runtime spec section 6.3 ("P4Ids"): an object's id carries its kind in its most
# significant byte, so a target can tell a register id from a counter id. The
# P4Info's repeated fields, each with the prefix its ids must carry.
ID_PREFIXES = {
    "tables": p4info_pb2.P4Ids.TABLE,
    "actions": p4info_pb2.P4Ids.ACTION,
    "action_profiles": p4info_pb2.P4Ids.ACTION_PROFILE,
    "counters": p4info_pb2.P4Ids.COUNTER,
    "direct_counters": p4info_pb2.P4Ids.DIRECT_COUNTER,
    "meters": p4info_pb2.P4Ids.METER,
    "direct_meters": p4info_pb2.P4Ids.DIRECT_METER,
    "controller_packet_metadata": p4info_pb2.P4Ids.CONTROLLER_HEADER,
    "value_sets": p4info_pb2.P4Ids.VALUE_SET,
    "registers": p4info_pb2.P4Ids.REGISTER,
    "digests": p4info_pb2.P4Ids.DIGEST,
}


def id_prefix_errors(p4info: Any) -> list[str]:
    """Every object whose id does not carry its kind's prefix (spec section 6.3).

    A controller that pushes such a P4Info hands the target, say, a register
    under an id no target reads as a register (p4c gives 0x16...).

    >>> bad = p4info_pb2.P4Info()
    >>> _ = bad.registers.add(preamble=p4info_pb2.Preamble(id=0x10000001, name="r"))
    >>> id_prefix_errors(bad)
    ['registers r: id 0x10000001 has prefix 0x10, not REGISTER (0x16)']
    """
    errors = []
    for kind, prefix in ID_PREFIXES.items():
        for obj in getattr(p4info, kind):
            if obj.preamble.id >> 24 != prefix:
                errors.append(
                    f"{kind} {obj.preamble.name}: id {obj.preamble.id:#010x} has prefix "
                    f"{obj.preamble.id >> 24:#04x}, not {p4info_pb2.P4Ids.Prefix.Name(prefix)} "
                    f"({prefix:#04x})"
                )
    return errors


def load_p4info(path: str | Path | None = None) -> P4InfoIndex:
    """Read a P4Info (text format, or binary when the name ends in .bin/.pb).

    Without a path, the one shipped with the package (DEFAULT_P4INFO). An id
    without its kind's prefix is refused: the controller would push it as is.
    """
    p4info_path: Traversable = Path(path) if path is not None else DEFAULT_P4INFO
    try:
        data = read_capped_bytes(path, "P4Info") if path is not None else p4info_path.read_bytes()
    except OSError as err:
        raise UserInputError(f"cannot read P4Info file {p4info_path}: {err.strerror}") from err
    message = p4info_pb2.P4Info()
    try:
        if p4info_path.name.endswith((".bin", ".pb")):
            message.ParseFromString(data)
        else:
            text_format.Parse(data.decode("utf-8"), message)
    except (text_format.ParseError, UnicodeDecodeError) as err:
        raise UserInputError(f"{p4info_path}: not a valid P4Info: {err}") from err
    except Exception as err:  # protobuf's DecodeError lives in an internal module
        raise UserInputError(f"{p4info_path}: not a valid P4Info: {err}") from err
    errors = id_prefix_errors(message)
    if errors:
        raise UserInputError(f"{p4info_path}: {errors[0]} (P4Runtime spec section 6.3)")
    return index_p4info(message)


# --- P4Runtime byte encoding -------------------------------------------------


def encode_value(value: int, bitwidth: int, what: str = "value") -> bytes:
    """Canonical P4Runtime bytestring of an unsigned value of `bitwidth` bits.

    >>> encode_value(0, 9), encode_value(300, 9)
    (b'\\x00', b'\\x01,')
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserInputError(f"{what}: expected an integer, got {value!r}")
    if value < 0 or value >= (1 << bitwidth):
        raise UserInputError(
            f"{what}: {value} does not fit in bit<{bitwidth}> (0..{(1 << bitwidth) - 1})"
        )
    if value == 0:
        return b"\x00"
    return value.to_bytes((value.bit_length() + 7) // 8, "big")


def decode_value(data: bytes) -> int:
    """Integer of a big-endian bytestring (canonical or zero-padded)."""
    return int.from_bytes(data, "big")


def mac_to_int(mac: str) -> int:
    """48-bit integer of 'aa:bb:cc:dd:ee:ff' (also accepts '-' separators)."""
    parts = mac.replace("-", ":").split(":")
    if len(parts) != 6:
        raise UserInputError(f"not a MAC address: {mac!r} (expected aa:bb:cc:dd:ee:ff)")
    try:
        octets = [int(p, 16) for p in parts]
    except ValueError as err:
        raise UserInputError(f"not a MAC address: {mac!r} (expected aa:bb:cc:dd:ee:ff)") from err
    if any(not 0 <= o <= 255 or len(p) > 2 for o, p in zip(octets, parts, strict=True)):
        raise UserInputError(f"not a MAC address: {mac!r} (expected aa:bb:cc:dd:ee:ff)")
    return int.from_bytes(bytes(octets), "big")


def bytes_to_mac(data: bytes) -> str:
    """'aa:bb:cc:dd:ee:ff' of a MAC bytestring; accepts canonical (short) encodings."""
    value = decode_value(data)
    if value >= 1 << 48:
        raise UserInputError(f"{data.hex()} is longer than a MAC address")
    return ":".join(f"{b:02x}" for b in value.to_bytes(6, "big"))
