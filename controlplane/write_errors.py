"""Which updates of a failed Write failed, and why, said once?

A failed Write's status is UNKNOWN (spec 12.5) and its trailer holds one
p4.v1.Error per update, or only those of the first updates when the target
cuts them to fit a client's metadata limit. The session
(`controlplane.session`) reads back the updates the details do not cover;
this module turns what it learns into `UpdateError`s and one `WriteError`
whose message says how many failed, by code, and the first failure's cause
once, instead of the RPC's status repeated for every batch. An INSERT the
details do not cover, absent on the device, into a table that holds its
P4Info `size`, failed because the table is full: RESOURCE_EXHAUSTED, as the
covered ones say, not the RPC's UNKNOWN.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import grpc
from google.rpc import code_pb2, status_pb2

from controlplane.proto.p4.v1 import p4runtime_pb2

from .entries import Update

__all__ = ["UpdateError", "WriteError", "failed_whole", "full_table", "update_errors"]

# One line of a WriteError quotes at most this much of a cause.
CAUSE_CHARS = 300


@dataclass(frozen=True)
class UpdateError:
    """Why one update of a batched Write failed (P4Runtime spec 12.3)."""

    index: int  # position in the sequence passed to `write`
    code: str  # google.rpc.Code name, e.g. "ALREADY_EXISTS"
    message: str
    update: Update

    def __str__(self) -> str:
        e = self.update.entry
        return (
            f"#{self.index} {self.update.type.name} {e.table} {dict(e.match)} -> "
            f"{e.action}{dict(e.params)}: {self.code}: {_cut(self.message)}"
        )


class WriteError(RuntimeError):
    """Some updates of a Write failed; `details` lists each one, the message says how
    many by code and names the first failure of each code, once, on one line.

    `rpc_message` keeps the RPC statuses (one per failed batch) for whoever wants them.
    """

    def __init__(
        self, details: Sequence[UpdateError], rpc_message: str = "", total: int | None = None
    ) -> None:
        self.details = tuple(sorted(details, key=lambda d: d.index))
        self.rpc_message = rpc_message
        super().__init__(write_error_summary(self.details, total))


def write_error_summary(details: Sequence[UpdateError], total: int | None = None) -> str:
    """'3 of 10 updates failed (2 ALREADY_EXISTS, 1 NOT_FOUND); the first, #1 ...:
    ALREADY_EXISTS: ...; the first NOT_FOUND, #7 ...: NOT_FOUND: ...'."""
    if not details:
        return "no update failed"
    codes = Counter(d.code for d in details)
    of = f" of {total}" if total is not None else ""
    head = f"{len(details)}{of} update(s) failed ({_tally(codes)}); the first, {details[0]}"
    others = []
    for code in codes:
        if code != details[0].code:
            first = next(d for d in details if d.code == code)
            others.append(f"the first {code}, {first}")
    return "; ".join([head, *others])


def _tally(codes: Counter[str]) -> str:
    return ", ".join(f"{n} {code}" for code, n in codes.most_common())


def _cut(message: str) -> str:
    one_line = " ".join(message.split())
    return one_line if len(one_line) <= CAUSE_CHARS else one_line[: CAUSE_CHARS - 3] + "..."


def code_name(code: int) -> str:
    """The google.rpc.Code name of `code`, or the number when it has none."""
    try:
        return str(code_pb2.Code.Name(code))
    except ValueError:
        return str(code)


def failed_whole(err: grpc.RpcError, updates: Sequence[Update], offset: int) -> list[UpdateError]:
    """Each of `updates` as failed with the RPC's status (no detail of its own)."""
    return [
        UpdateError(offset + i, err.code().name, err.details() or "", update)
        for i, update in enumerate(updates)
    ]


def full_table(table: str, size: int, held: int) -> str | None:
    """Why an INSERT absent after the Write failed, when `held` entries fill `size`
    (the P4Info's; 0 declares none): the device's own words for a full table."""
    if size and held >= size:
        return f"table {table} is full ({size} entries)"
    return None


def update_errors(
    err: grpc.RpcError, batch: Sequence[Update], offset: int
) -> tuple[list[UpdateError], int]:
    """Per-update errors from a failed Write's grpc-status-details-bin trailer (spec 12.3),
    and how many updates, from the first, its details cover: a target may send the details
    of a prefix only, to fit a client's metadata limit. (No errors, 0) when it has none,
    or when every update it covers is OK although the Write failed."""
    details: list[UpdateError] = []
    status = None
    for key, value in err.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            status = status_pb2.Status.FromString(value)
    if status is None or not 0 < len(status.details) <= len(batch):
        return [], 0
    for i, (any_msg, update) in enumerate(zip(status.details, batch, strict=False)):
        error = p4runtime_pb2.Error()
        if not any_msg.Unpack(error) or error.canonical_code == code_pb2.OK:
            continue
        details.append(
            UpdateError(offset + i, code_name(error.canonical_code), error.message, update)
        )
    covered = len(status.details)
    if not details and covered == len(batch):
        return [], 0
    return details, covered
