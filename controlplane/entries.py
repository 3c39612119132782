"""What is one table entry or counter sample, independent of the wire format?

Small frozen, hashable values the compiler, the reconciler and the telemetry
work on; `to_proto`/`from_proto` are the only places that touch P4Runtime
messages, and they go through the P4Info for every id and bit width.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from controlplane.proto.p4.v1 import p4runtime_pb2
from topologies.errors import UserInputError

from .p4info import P4InfoIndex, decode_value, encode_value, mac_to_int


class FrozenMap(Mapping[str, int]):
    """An immutable, hashable name -> int mapping (match fields, action parameters)."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, int] | None = None) -> None:
        self._items: tuple[tuple[str, int], ...] = tuple(sorted((items or {}).items()))

    def __getitem__(self, key: str) -> int:
        for name, value in self._items:
            if name == key:
                return value
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (name for name, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenMap):
            return self._items == other._items
        if isinstance(other, Mapping):
            return dict(self._items) == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        return "{" + ", ".join(f"{k!r}: {v!r}" for k, v in self._items) + "}"


def _as_int(name: str, value: int | str) -> int:
    """Match values may be given as ints or as text ('aa:bb:..' MACs, '0x1f', '42')."""
    if isinstance(value, bool):
        raise UserInputError(f"{name}: expected an integer or a MAC address, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        text = value.strip()
        if ":" in text or "-" in text:
            return mac_to_int(text)
        try:
            return int(text, 0)
        except ValueError:
            raise UserInputError(f"{name}: not a number or MAC address: {value!r}") from None
    raise UserInputError(f"{name}: expected an integer or a MAC address, got {value!r}")


@dataclass(frozen=True, init=False)
class TableEntry:
    """One match-action entry, named as in the P4Info (full names or aliases).

    >>> e = TableEntry("logical_forward", {"ingress_port": 1, "dst_mac": "00:00:00:00:00:02"},
    ...                "set_egress_port", {"port": 3})
    >>> e.match["dst_mac"]
    2
    """

    table: str
    match: FrozenMap
    action: str
    params: FrozenMap

    def __init__(
        self,
        table: str,
        match: Mapping[str, int | str],
        action: str,
        params: Mapping[str, int] | None = None,
    ) -> None:
        object.__setattr__(self, "table", table)
        object.__setattr__(
            self, "match", FrozenMap({k: _as_int(f"{table}.{k}", v) for k, v in match.items()})
        )
        object.__setattr__(self, "action", action)
        object.__setattr__(
            self,
            "params",
            FrozenMap({k: _as_int(f"{action}({k})", v) for k, v in (params or {}).items()}),
        )

    def key(self) -> tuple[str, FrozenMap]:
        """What identifies the entry on the device: table + match (P4Runtime spec 9.1)."""
        return (self.table, self.match)

    def canonical(self, index: P4InfoIndex) -> TableEntry:
        """The same entry with full P4Info names, so aliases and full names compare equal."""
        return TableEntry(
            index.table(self.table).name, self.match, index.action(self.action).name, self.params
        )

    def to_proto(self, index: P4InfoIndex) -> Any:
        """The p4.v1.TableEntry, checked against the P4Info (names, widths, completeness)."""
        table = index.table(self.table)
        action = index.action(self.action)
        given = set(self.match)
        for name in given:
            table.match_field(name)  # unknown field -> UserInputError with suggestions
        msg = p4runtime_pb2.TableEntry(table_id=table.id)
        for mf in table.match_fields:
            if mf.name not in given:
                raise UserInputError(f"{table.name}: match field '{mf.name}' is missing")
            if mf.match_type != "EXACT":
                raise UserInputError(
                    f"{table.name}.{mf.name}: only EXACT matches are supported, not {mf.match_type}"
                )
            fm = msg.match.add(field_id=mf.id)
            fm.exact.value = encode_value(
                self.match[mf.name], mf.bitwidth, f"{table.name}.{mf.name}"
            )
        if action.id not in table.action_ids or action.id in table.default_only_action_ids:
            allowed = [
                index.action_by_id(a).name
                for a in table.action_ids
                if a not in table.default_only_action_ids
            ]
            raise UserInputError(
                f"action '{action.name}' cannot be used in entries of {table.name} "
                f"(allowed: {', '.join(allowed)})"
            )
        for name in self.params:
            action.param(name)
        msg.action.action.action_id = action.id
        for param in action.params:
            if param.name not in self.params:
                raise UserInputError(f"{action.name}: parameter '{param.name}' is missing")
            msg.action.action.params.add(
                param_id=param.id,
                value=encode_value(
                    self.params[param.name], param.bitwidth, f"{action.name}({param.name})"
                ),
            )
        return msg

    @classmethod
    def from_proto(cls, index: P4InfoIndex, msg: Any) -> TableEntry:
        """The entry a device returned in a ReadResponse."""
        table = index.table_by_id(msg.table_id)
        match: dict[str, int] = {}
        for fm in msg.match:
            mf = table.match_field_by_id(fm.field_id)
            if fm.WhichOneof("field_match_type") != "exact":
                raise UserInputError(f"{table.name}.{mf.name}: unsupported match kind from device")
            match[mf.name] = decode_value(fm.exact.value)
        action = index.action_by_id(msg.action.action.action_id)
        params = {
            action.param_by_id(p.param_id).name: decode_value(p.value)
            for p in msg.action.action.params
        }
        return cls(table.name, match, action.name, params)


class UpdateType(Enum):
    INSERT = p4runtime_pb2.Update.INSERT
    MODIFY = p4runtime_pb2.Update.MODIFY
    DELETE = p4runtime_pb2.Update.DELETE


@dataclass(frozen=True)
class Update:
    """One change of a Write: insert, modify or delete a table entry."""

    type: UpdateType
    entry: TableEntry

    def to_proto(self, index: P4InfoIndex) -> Any:
        update = p4runtime_pb2.Update(type=self.type.value)
        update.entity.table_entry.CopyFrom(self.entry.to_proto(index))
        return update


@dataclass(frozen=True)
class CounterSample:
    """One counter cell as read from a device."""

    counter: str  # full P4Info name, e.g. "CassiniEgress.ecn_marked"
    index: int
    packets: int
    bytes: int
