"""How is a PROTO-encoded gNMI Get of every interface built in a few milliseconds?

A Get of the testbed's 72 interfaces answers 1,800 leaves; building one
`gnmi.Update` per leaf in Python (a Path of 3-5 elements with keys, then the
value) was 26% of the switch service's Python time under a 10 Hz poll (issue
24). The paths of a running switch never change (its interfaces and their
leaves are fixed once it serves them), so `PathCache` keeps each leaf's Path,
serialised once, and `proto_notification` writes every update as bytes:
the cached Path and the leaf's value, appended to the Notification in one
parse. The message a client receives is the one `gnmi_tree.notification`
builds (tests/softswitch/test_gnmi_get_encoding.py compares them); JSON
encodings still go through `gnmi_tree`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pygnmi.spec.v080 import gnmi_pb2

from .gnmi_tree import Elem, Keyed, Match, notification, set_path

_LENGTH_DELIMITED, _VARINT = 2, 0


def _tag(message: Any, field: str, wire_type: int) -> bytes:
    """A field's tag byte(s), from the message's descriptor (one source of truth)."""
    return _varint(message.DESCRIPTOR.fields_by_name[field].number << 3 | wire_type)


_ONE_BYTE = tuple(bytes((i,)) for i in range(0x80))  # the varints of 0-127


def _varint(value: int) -> bytes:
    """Protobuf's base-128 varint of a non-negative integer below 2**64."""
    if value < 0x80:
        return _ONE_BYTE[value]
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_NOTIFICATION_UPDATE = _tag(gnmi_pb2.Notification, "update", _LENGTH_DELIMITED)
_UPDATE_PATH = _tag(gnmi_pb2.Update, "path", _LENGTH_DELIMITED)
_UPDATE_VAL = _tag(gnmi_pb2.Update, "val", _LENGTH_DELIMITED)
_UINT_VAL = _tag(gnmi_pb2.TypedValue, "uint_val", _VARINT)
_STRING_VAL = _tag(gnmi_pb2.TypedValue, "string_val", _LENGTH_DELIMITED)
_UINT64_LIMIT = 1 << 64


class PathCache:
    """The serialised `Update.path` field of each concrete leaf path, made on first use.

    Held by one gNMI service; at most `limit` paths (a switch's tree is a
    fixed few thousand leaves; past the limit a path is encoded every time,
    so a tree that grew would cost time, never memory)."""

    def __init__(self, limit: int = 1 << 16) -> None:
        self.limit = limit
        self._fields: dict[tuple[Elem, ...], bytes] = {}

    def __len__(self) -> int:
        return len(self._fields)

    def path_field(self, path: tuple[Elem, ...]) -> bytes:
        """`path` as the bytes of an Update's path field (tag, length, Path)."""
        found = self._fields.get(path)
        if found is None:
            message = gnmi_pb2.Path()
            set_path(message, path)
            data = message.SerializeToString()
            found = _UPDATE_PATH + _varint(len(data)) + data
            if len(self._fields) < self.limit:
                self._fields[path] = found
        return found


def leaf_items(matches: Sequence[Match]) -> Iterator[tuple[tuple[Elem, ...], Any]]:
    """(concrete path, value) of every leaf under `matches`, in `gnmi_tree.leaves`' order."""
    stack: list[tuple[tuple[Elem, ...], Any]] = [(m.path, m.value) for m in reversed(matches)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):
            stack.extend((path + ((name, ()),), child) for name, child in reversed(value.items()))
        elif isinstance(value, Keyed):
            name = path[-1][0]
            base = path[:-1]
            stack.extend(
                (base + ((name, ((value.key, key),)),), entry)
                for key, entry in sorted(value.entries.items(), reverse=True)
            )
        else:
            yield path, value


def _value_field(value: Any) -> bytes:
    """An Update's val field: string_val for text, uint_val for a count."""
    if isinstance(value, str):
        text = value.encode()
        typed = _STRING_VAL + _varint(len(text)) + text
    else:
        count = int(value)
        if not 0 <= count < _UINT64_LIMIT:
            raise ValueError(f"a uint64 leaf cannot hold {count}")
        typed = _UINT_VAL + _varint(count)
    return _UPDATE_VAL + _varint(len(typed)) + typed


def proto_notification(
    matches: Sequence[Match],
    timestamp_ns: int,
    prefix: Any,
    paths: PathCache,
) -> Any:
    """`gnmi_tree.notification(matches, PROTO, timestamp_ns, prefix)`, one typed leaf per
    update, with the updates written as bytes from `paths`."""
    notice = notification([], gnmi_pb2.PROTO, timestamp_ns, prefix)
    parts = []
    for path, value in leaf_items(matches):
        update = paths.path_field(path) + _value_field(value)
        parts.append(_NOTIFICATION_UPDATE + _varint(len(update)) + update)
    notice.MergeFromString(b"".join(parts))
    return notice
