"""How does a failed Write tell its client which updates failed?

Spec 12.5: the RPC's status is UNKNOWN, and its `grpc-status-details-bin`
trailer holds a google.rpc.Status with one p4.v1.Error per update, in the
order of the updates (OK for those that succeeded): clients such as
p4runtime-shell read them by position. The trailer must also fit a client's
metadata limit, or the client gets RESOURCE_EXHAUSTED and no details at all:
gRPC's default client refuses trailers past 16 KiB, and past 8 KiB some at
random (an OK detail alone is 35 bytes: a batch of 500 needs 17.7 KB). So
messages are cut to ERROR_MESSAGE_CHARS, only the first DETAILED_FAILURES
failures carry one, and when the details of every update do not fit in
TRAILER_BYTES, the longest prefix that does is sent and the status message
says so, naming the first failing updates.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from google.protobuf import any_pb2
from google.rpc import code_pb2, status_pb2

from controlplane.proto.p4.v1 import p4runtime_pb2
from emulation.softswitch.errors import EntryError

# (our choice) Per-update messages are cut to this length, and only the first
# DETAILED_FAILURES failures carry one.
ERROR_MESSAGE_CHARS = 160
DETAILED_FAILURES = 10
# (our choice) Bytes of the whole trailer as gRPC counts them (each entry's key,
# value and 32 more), under the 8 KiB past which a default client may refuse it.
TRAILER_BYTES = 8000
# Failing update indices a status message names when the details are cut.
FAILURES_NAMED = 10
# The trailer's keys and gRPC's 32 bytes per entry; grpc-status's value is 1-2 digits.
_TRAILER_FIXED = len("grpc-status") + 2 + len("grpc-message") + len("grpc-status-details-bin") + 96


def write_error_status(results: Sequence[EntryError | None]) -> Any:
    """google.rpc.Status with one p4.v1.Error per update, OK for those that succeeded,
    or the longest prefix of them that fits TRAILER_BYTES (spec 12.5).

    >>> from google.rpc import code_pb2
    >>> results = [None] * 499 + [EntryError(code_pb2.NOT_FOUND, "no entry")]
    >>> status = write_error_status(results)
    >>> len(status.details) < 500, status.message.split(";")[0]
    (True, '1 of 500 updates failed (1 NOT_FOUND)')
    >>> status.message.endswith("failing: update 499")
    True
    """
    failed = [i for i, r in enumerate(results) if r is not None]
    if not failed:
        raise ValueError("no update failed: there is no error status to send")
    summary = failure_summary(results)
    details = _details(results)
    whole = status_pb2.Status(code=code_pb2.UNKNOWN, message=summary, details=details)
    if _trailer_bytes(whole) <= TRAILER_BYTES:
        return whole
    # Cut: the note names the count it covers, sized here for the longest count.
    longest = _note(len(results), results, failed)
    budget = TRAILER_BYTES - _trailer_bytes(
        status_pb2.Status(code=code_pb2.UNKNOWN, message=summary + longest)
    )
    kept = 0
    for detail in details:
        size = _field_bytes(detail.ByteSize())
        if size > budget:
            break
        budget -= size
        kept += 1
    return status_pb2.Status(
        code=code_pb2.UNKNOWN,
        message=summary + _note(kept, results, failed),
        details=details[:kept],
    )


def failure_summary(results: Sequence[EntryError | None]) -> str:
    """The status message's head: how many failed, by code, and the first failure's
    code and cause, once (a full table is RESOURCE_EXHAUSTED, whatever the RPC's code).

    >>> full = EntryError(code_pb2.RESOURCE_EXHAUSTED, "table t is full (2 entries)")
    >>> failure_summary([None, None, full, full])
    '2 of 4 updates failed (2 RESOURCE_EXHAUSTED); the first, update 2: RESOURCE_EXHAUSTED: table t is full (2 entries)'
    """
    failed = [(i, r) for i, r in enumerate(results) if r is not None]
    if not failed:
        raise ValueError("no update failed: there is no error status to send")
    codes = Counter(code_pb2.Code.Name(r.code) for _, r in failed)
    tally = ", ".join(f"{n} {code}" for code, n in codes.most_common())
    index, first = failed[0]
    return (
        f"{len(failed)} of {len(results)} updates failed ({tally}); the first, update "
        f"{index}: {code_pb2.Code.Name(first.code)}: {_short(first.message)}"
    )


def _details(results: Sequence[EntryError | None]) -> list[Any]:
    """One packed p4.v1.Error per update; messages for the first DETAILED_FAILURES."""
    details = []
    detailed = 0
    for result in results:
        error = p4runtime_pb2.Error(canonical_code=code_pb2.OK)
        if result is not None:
            error.canonical_code = result.code
            if detailed < DETAILED_FAILURES and result.code != code_pb2.ABORTED:
                error.message = _short(result.message)
                detailed += 1
        packed = any_pb2.Any()
        packed.Pack(error)
        details.append(packed)
    return details


def _note(kept: int, results: Sequence[EntryError | None], failed: list[int]) -> str:
    """What a cut status message adds: which updates the details cover, which failed."""
    # The updates that failed themselves first, then those aborted for them.
    causes = [i for i in failed if (r := results[i]) is not None and r.code != code_pb2.ABORTED]
    aborted = sorted(set(failed) - set(causes))
    named = (causes + aborted)[:FAILURES_NAMED]
    more = len(failed) - len(named)
    covered = f"updates 0-{kept - 1}" if kept else "no update"
    return (
        f"; the details cover {covered} of {len(results)} only (more do not fit a client's "
        f"metadata limit); failing: update {', '.join(map(str, named))}"
        + (f" and {more} more" if more else "")
    )


def _trailer_bytes(status: Any) -> int:
    """What gRPC counts for the trailer of `status`: its serialized details and its
    message again, percent-encoded, in grpc-message."""
    message = status.message.encode()
    encoded = sum(1 if 0x20 <= b <= 0x7E and b != 0x25 else 3 for b in message)
    return _TRAILER_FIXED + status.ByteSize() + encoded


def _field_bytes(size: int) -> int:
    """Bytes a length-delimited field of `size` bytes takes: tag, length, value."""
    return 1 + max(1, (size.bit_length() + 6) // 7) + size


def _short(message: str) -> str:
    if len(message) <= ERROR_MESSAGE_CHARS:
        return message
    return message[: ERROR_MESSAGE_CHARS - 3] + "..."
