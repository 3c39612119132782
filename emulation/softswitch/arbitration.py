"""Which client of a device is the primary, and who hears when that changes?

Arbitration (P4Runtime spec 5): each StreamChannel is a `Session` with a role
and an election id; per role the live session with the highest election id is
the primary, and every session of the role is told when the primary changes.
`Arbitration` is not locked itself: the `Device` calls it under its lock, so
arbitration and writes are decided in one order.

What a client can make it hold is bounded: role names (`MAX_ROLE_NAME_CHARS`),
the election state of a role (forgotten when its last client leaves), the
messages waiting on a stream (a client that does not read is dropped), and
the log lines it causes (`LogLimiter`, names cut to `LOGGED_ROLE_CHARS`).
"""

from __future__ import annotations

import logging
import queue
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from google.rpc import code_pb2

from controlplane.proto.p4.v1 import p4runtime_pb2
from emulation.softswitch.errors import EntryError
from emulation.softswitch.log_limit import LogLimiter
from emulation.softswitch.service_limits import OUTBOX_MESSAGES

log = logging.getLogger("emulation.softswitch.device")

# (our choice) A role name longer than this is INVALID_ARGUMENT (wherever a
# request names a role): 300 clients with 256 KiB names held 82 MB for good.
MAX_ROLE_NAME_CHARS = 128
# Log lines and error messages show at most this much of a role name.
LOGGED_ROLE_CHARS = 32


@dataclass(frozen=True)
class StreamEnd:
    """Put in a session's outbox to end its stream: normally (code None) or with an error."""

    code: int | None = None
    message: str = ""


@dataclass(eq=False)
class Session:
    """One StreamChannel: its place in the election and the queue of messages to send it.

    The device sends to it under its lock. At most `outbox_limit` messages
    wait: one more means the client does not read its stream, and the session
    is dropped (`on_overflow` cancels the RPC) instead of growing.
    """

    outbox: queue.Queue[Any] = field(default_factory=queue.Queue)
    role: str | None = None  # None until its first MasterArbitrationUpdate is accepted
    role_message: Any = None  # the Role as the client sent it, echoed in notifications
    election_id: int | None = None  # None: unset, never primary (spec 15.3.1)
    peer: str = ""
    outbox_limit: int = OUTBOX_MESSAGES
    on_overflow: Callable[[], None] | None = None
    closed: bool = False  # its stream has ended: it can no longer arbitrate
    dropped: bool = False  # its outbox overflowed: nothing more is queued for it

    def send(self, message: Any) -> None:
        if self.dropped:
            return
        if self.outbox.qsize() >= self.outbox_limit:
            self.dropped = True
            if self.on_overflow is not None:
                self.on_overflow()
            return
        self.outbox.put(message)

    def end(self, code: int | None = None, message: str = "") -> None:
        """End the stream (always queued: the end of a full outbox still arrives)."""
        self.outbox.put(StreamEnd(code, message))


def election_int(message: Any) -> int:
    """The 128-bit election id of a p4.v1.Uint128."""
    return (message.high << 64) | message.low


def role_key(name: str, role_id: int = 0) -> str:
    """Roles are told apart by name; the deprecated numeric id maps to a name.

    A name longer than MAX_ROLE_NAME_CHARS is INVALID_ARGUMENT.
    """
    if len(name) > MAX_ROLE_NAME_CHARS:
        raise EntryError(
            code_pb2.INVALID_ARGUMENT,
            f"role name {show_role(name)} has {len(name)} characters; this target takes at "
            f"most {MAX_ROLE_NAME_CHARS}",
        )
    return name if name or not role_id else f"id:{role_id}"


def show_role(role: str) -> str:
    """A role name for a log line or a message: quoted, cut to LOGGED_ROLE_CHARS.

    >>> show_role("sdn"), show_role("x" * 40)
    ("'sdn'", "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'...")
    """
    if len(role) <= LOGGED_ROLE_CHARS:
        return repr(role)
    return repr(role[:LOGGED_ROLE_CHARS]) + "..."


def fmt_election(election_id: int | None) -> str:
    if election_id is None:
        return "unset"
    return f"({election_id >> 64},{election_id & ((1 << 64) - 1)})"


class Arbitration:
    """The sessions of one device and the election state of each role."""

    def __init__(
        self,
        device_id: int,
        log_limit: LogLimiter | None = None,
        max_sessions: int | None = None,
    ) -> None:
        self.device_id = device_id
        self.log_limit = log_limit if log_limit is not None else LogLimiter()
        # Arbitrated streams past this many are kept only if they become primary (the
        # spare slot); None: no cap. Silent streams never count (the service's slots).
        self.max_sessions = max_sessions
        self.sessions: list[Session] = []  # live (arbitrated) sessions
        # Highest election id seen per role with a live client; (our choice) a role
        # is forgotten when its last client leaves, so names cannot pile up.
        self.highest: dict[str, int] = {}

    def arbitrate(self, session: Session, update: Any) -> None:
        """Handle a MasterArbitrationUpdate (spec 5.4); raise EntryError to end the stream."""
        if session.closed:
            raise EntryError(code_pb2.CANCELLED, "the stream has ended")
        first = session.role is None
        if update.device_id != self.device_id:
            code = code_pb2.NOT_FOUND if first else code_pb2.FAILED_PRECONDITION
            raise EntryError(
                code, f"unknown device id {update.device_id} (this is device {self.device_id})"
            )
        role = role_key(update.role.name, update.role.id)
        if update.role.HasField("config"):
            # (our choice) no role-config scheme: every role has full pipeline access.
            raise EntryError(
                code_pb2.INVALID_ARGUMENT, "role.config is not supported by this target"
            )
        if not first and role != session.role:
            raise EntryError(
                code_pb2.FAILED_PRECONDITION,
                f"stream is bound to role {show_role(session.role or '')}; open a new stream "
                f"for {show_role(role)}",
            )
        election_id = (
            election_int(update.election_id) if update.HasField("election_id") else None
        )
        if election_id is not None:
            for other in self.sessions:
                if (
                    other is not session
                    and other.role == role
                    and other.election_id == election_id
                ):
                    raise EntryError(
                        code_pb2.INVALID_ARGUMENT,
                        f"election id {fmt_election(election_id)} is already used by another "
                        f"live client of role {show_role(role)}",
                    )
        before = self.primary(role)
        before_id = before.election_id if before else None
        if (
            first
            and self.max_sessions is not None
            and len(self.sessions) >= self.max_sessions
            and not _beats(election_id, before_id)
        ):
            raise EntryError(
                code_pb2.RESOURCE_EXHAUSTED,
                f"{len(self.sessions)} clients have arbitrated, the most this target serves; "
                "the spare StreamChannel is kept only for a client that becomes the primary "
                f"of its role (election id {fmt_election(election_id)} does not beat the "
                f"primary's {fmt_election(before_id)})",
            )
        session.role, session.role_message = role, update.role
        session.election_id = election_id
        if first:
            self.sessions.append(session)
        if election_id is not None:
            self.highest[role] = max(self.highest.get(role, election_id), election_id)
        after = self.primary(role)
        status = "primary" if after is session else "backup"
        self.log_limit.log(
            log,
            logging.INFO,
            "device %d: client %s role %s election id %s is %s",
            self.device_id,
            session.peer,
            show_role(role),
            fmt_election(election_id),
            status,
        )
        if after is not before or (after is not None and after.election_id != before_id):
            self._notify_role(role)  # the primary changed: everyone hears (spec 5.5)
        else:
            session.send(self._arbitration_message(role, session))

    def remove_session(self, session: Session) -> None:
        """A stream ended: forget it; if it was primary, the next highest live client takes over."""
        session.closed = True
        if session not in self.sessions:
            return
        role = session.role or ""
        was_primary = self.primary(role) is session
        self.sessions.remove(session)
        self.log_limit.log(
            log,
            logging.INFO,
            "device %d: client %s role %s election id %s disconnected",
            self.device_id,
            session.peer,
            show_role(role),
            fmt_election(session.election_id),
        )
        if all(s.role != role for s in self.sessions):
            self.highest.pop(role, None)  # its last client left: forget the role
        elif was_primary:
            # (our choice) like bmv2/PI, the highest live election id becomes primary
            # at once; spec 1.3 would leave the role without one until a new update.
            new = self.primary(role)
            self.log_limit.log(
                log,
                logging.INFO,
                "device %d: role %s primary is now %s",
                self.device_id,
                show_role(role),
                fmt_election(new.election_id) if new else "none",
            )
            self._notify_role(role)

    def expire(self, session: Session) -> bool:
        """Close a session that has not arbitrated (its time is up); False if it has."""
        if session.role is not None:
            return False
        session.closed = True
        return True

    def primary_election_id(self, role: str = "") -> int | None:
        """The primary's election id of `role`, None without a primary."""
        primary = self.primary(role)
        return primary.election_id if primary else None

    def primary(self, role: str) -> Session | None:
        """The live client of `role` with the highest election id, if any."""
        candidates = [s for s in self.sessions if s.role == role and s.election_id is not None]
        return max(candidates, key=lambda s: s.election_id or 0, default=None)

    def _notify_role(self, role: str) -> None:
        for session in self.sessions:
            if session.role == role:
                session.send(self._arbitration_message(role, session))

    def _arbitration_message(self, role: str, to: Session) -> Any:
        """The advisory MasterArbitrationUpdate for one client (spec 5.5)."""
        response = p4runtime_pb2.StreamMessageResponse()
        arb = response.arbitration
        arb.device_id = self.device_id
        if to.role_message is not None and (to.role_message.name or to.role_message.id):
            arb.role.CopyFrom(to.role_message)
        primary = self.primary(role)
        shown = primary.election_id if primary else self.highest.get(role)
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

    def check_primary(self, role: str, request: Any) -> int:
        """The election id of a request that only the primary of `role` may make (spec 5.4)."""
        if role and role not in self.highest and all(s.role != role for s in self.sessions):
            raise EntryError(
                code_pb2.NOT_FOUND,
                f"unknown role {show_role(role)}: no client has arbitrated for it on this device",
            )
        if not request.HasField("election_id"):
            raise EntryError(
                code_pb2.PERMISSION_DENIED, "election_id is unset: only the primary may write"
            )
        election_id = election_int(request.election_id)
        primary = self.primary(role)
        if primary is None or primary.election_id != election_id:
            shown = fmt_election(primary.election_id) if primary else "none"
            raise EntryError(
                code_pb2.PERMISSION_DENIED,
                f"election id {fmt_election(election_id)} is not the primary of role "
                f"{show_role(role)} (primary: {shown})",
            )
        return election_id


def _beats(election_id: int | None, primary_id: int | None) -> bool:
    """Whether a client of `election_id` becomes primary over one of `primary_id`."""
    return election_id is not None and (primary_id is None or election_id > primary_id)
