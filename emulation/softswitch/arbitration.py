"""Which client of a device is the primary, and who hears when that changes?

Arbitration (P4Runtime spec 5): each StreamChannel is a `Session` with a role
and an election id; per role the live session with the highest election id is
the primary, and every session of the role is told when the primary changes.
`Arbitration` is not locked itself: the `Device` calls it under its lock, so
arbitration and writes are decided in one order.
"""

from __future__ import annotations

import logging
import queue
from dataclasses import dataclass, field
from typing import Any

from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2

from emulation.softswitch.errors import EntryError

log = logging.getLogger("emulation.softswitch.device")


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


def election_int(message: Any) -> int:
    """The 128-bit election id of a p4.v1.Uint128."""
    return (message.high << 64) | message.low


def role_key(name: str, role_id: int = 0) -> str:
    """Roles are told apart by name; the deprecated numeric id maps to a name."""
    return name if name or not role_id else f"id:{role_id}"


def fmt_election(election_id: int | None) -> str:
    if election_id is None:
        return "unset"
    return f"({election_id >> 64},{election_id & ((1 << 64) - 1)})"


class Arbitration:
    """The sessions of one device and the election state of each role."""

    def __init__(self, device_id: int) -> None:
        self.device_id = device_id
        self.sessions: list[Session] = []  # live (arbitrated) sessions
        self.highest: dict[str, int] = {}  # highest election id ever seen per role

    def arbitrate(self, session: Session, update: Any) -> None:
        """Handle a MasterArbitrationUpdate (spec 5.4); raise EntryError to end the stream."""
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
                f"stream is bound to role {session.role!r}; open a new stream for {role!r}",
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
                        f"live client of role {role!r}",
                    )
        before = self.primary(role)
        before_id = before.election_id if before else None
        session.role, session.role_message = role, update.role
        session.election_id = election_id
        if first:
            self.sessions.append(session)
        if election_id is not None:
            self.highest[role] = max(self.highest.get(role, election_id), election_id)
        after = self.primary(role)
        status = "primary" if after is session else "backup"
        log.info(
            "device %d: client %s role %r election id %s is %s",
            self.device_id,
            session.peer,
            role,
            fmt_election(election_id),
            status,
        )
        if after is not before or (after is not None and after.election_id != before_id):
            self._notify_role(role)  # the primary changed: everyone hears (spec 5.5)
        else:
            session.send(self._arbitration_message(role, session))

    def remove_session(self, session: Session) -> None:
        """A stream ended: forget it; if it was primary, the next highest live client takes over."""
        if session not in self.sessions:
            return
        role = session.role or ""
        was_primary = self.primary(role) is session
        self.sessions.remove(session)
        log.info(
            "device %d: client %s role %r election id %s disconnected",
            self.device_id,
            session.peer,
            role,
            fmt_election(session.election_id),
        )
        if was_primary:
            # (our choice) like bmv2/PI, the highest live election id becomes primary
            # at once; spec 1.3 would leave the role without one until a new update.
            new = self.primary(role)
            log.info(
                "device %d: role %r primary is now %s",
                self.device_id,
                role,
                fmt_election(new.election_id) if new else "none",
            )
            self._notify_role(role)

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
                f"unknown role {role!r}: no client has arbitrated for it on this device",
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
                f"{role!r} (primary: {shown})",
            )
        return election_id
