"""Which queue class does RoCE ride through the switch during a RoCE run, and who says so?

On the testbed RoCE rides its own lossless queue, the one of the switch's PFC
priority, and TCP a lossy one. The switch picks a packet's class by its DSCP
(`CassiniIngress.queue_class`, `controlplane.queue_classes`), so without an
entry RoCE data (ECT(0)) and the replicas' TCP control frames (pure ACKs,
SYNs, FINs: Linux sends them not ECN-capable) shared class 0, where WRED,
driven by RoCE's backlog, dropped the TCP frames it would have marked (issue 26:
0-4 frames of 66-74 B a 4:1 incast).

Everything follows from one setting, the switch's PFC priority
(`TmConfig.pfc.priority`, which the hosts honour too, `roce.pfc`):

- RoCE data carries DSCP `pfc.dscp_for(priority)` and rides queue class
  `priority` (our choice: the traffic class is the 802.1p priority, DSCP >> 3,
  and the queue is the traffic class, the identity maps a switch ships with);
- CNPs and RoCE ACKs (DSCP `pfc.CNP_DSCP`, 48) ride class CNP_DSCP >> 3 = 6
  (ConnectX's `cnp_802p_prio`), above the data, as a switch serves CNPs from a
  strict-priority queue: in RoCE's class or below, a port held backlogged by
  PFC through an incast (the receiver's downlink) would hold back the very ACKs
  and CNPs its receiver's own flows wait for (go-back-N's timer would resend).
  With a priority of 6 or 7 they share RoCE's class instead (FIFO, never starved).
- everything else (TCP) stays in class 0, lossy: hosts' kernels ignore pauses.

Strict priority of RoCE's class over class 0 starves nothing the run needs:
during a RoCE run TCP carries only the ring's hello and start barrier, before
a job's first iteration, and the connections' close (`roce_links`: the
collectives' bytes are RoCE's). A port's RoCE backlog lasts at most while its
senders' Up phase does (PFC holds it under XOFF per ingress port, DCQCN cuts
the rates), so a TCP frame behind it waits at most that long, far below the
replicas' socket timeout, and TCP resends what it must.

The traffic manager's classes must agree (`tm_mismatch`): RoCE's class must
pause when PFC is on, naming the hosts' priority. Entries are installed before
the replicas start and removed after (run-time tables, `program.RUNTIME_TABLES`),
each in a short session, so the run's job-class writes (`job_telemetry`) are
not refused by a primary held open.

>>> roce_dscp_classes(3)
{26: 3, 48: 6}
>>> roce_dscp_classes(7)
{58: 7, 48: 7}
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from controlplane.entries import TableEntry, Update, UpdateType
from controlplane.p4names import QUEUE_CLASS_TABLE
from controlplane.queue_classes import queue_class_entries
from emulation.roce.pfc import CNP_DSCP, dscp_for

if TYPE_CHECKING:
    from controlplane.session import P4RuntimeSession
    from emulation.fabric.emulated import EmulatedFabric
    from emulation.softswitch.tm_config import TmConfig

# (our choice) Above the job classes' writes (0, 2) and the class policies' (0, 3):
# short sessions, so the id only orders them.
ELECTION_ID = (0, 4)


def roce_class(priority: int) -> int:
    """The queue class RoCE data rides for PFC `priority` (the class is the priority)."""
    dscp_for(priority)  # 0..7, else ValueError
    return priority


def reply_class(priority: int) -> int:
    """The queue class of CNPs and RoCE ACKs: their DSCP's priority, never below RoCE's."""
    return max(CNP_DSCP >> 3, roce_class(priority))


def roce_dscp_classes(priority: int) -> dict[int, int]:
    """DSCP -> queue class of a RoCE run: data at `priority`'s, CNPs and ACKs above it."""
    return {dscp_for(priority): roce_class(priority), CNP_DSCP: reply_class(priority)}


def roce_entries(priority: int) -> list[TableEntry]:
    """The queue_class entries of a RoCE run (`roce_dscp_classes`)."""
    return queue_class_entries(roce_dscp_classes(priority), {})


def tm_mismatch(tm: TmConfig) -> str | None:
    """Why RoCE's class does not pause as the hosts expect, None when it does: with PFC
    on, the class must pause and its frames name `pfc.priority` (hosts honour that one
    only); with PFC off it must not pause either."""
    queue_class = roce_class(tm.pfc.priority)
    enabled, _xoff, _xon, priority = tm.class_pfc(queue_class)
    if enabled != tm.pfc.enabled:
        return (
            f"queue class {queue_class} (RoCE's) has PFC {'on' if enabled else 'off'}, "
            f"the switch's PFC is {'on' if tm.pfc.enabled else 'off'}"
        )
    if enabled and priority != tm.pfc.priority:
        return (
            f"queue class {queue_class} (RoCE's) pauses priority {priority}, "
            f"the hosts honour {tm.pfc.priority}"
        )
    return None


@dataclass
class RoceClasses:
    """One RoCE run's DSCP -> class entries: installed at `start`, removed at `stop`;
    `record()` says what was installed (summary.json's fidelity `roce_classes`)."""

    fabric: EmulatedFabric
    installed: tuple[TableEntry, ...] = ()
    error: str | None = None
    priority: int = field(init=False, default=0)

    def start(self) -> RoceClasses:
        """Install the entries; on a mismatch or a failure the run goes on with RoCE in
        class 0, and the record says why."""
        tm = self.fabric.profile.tm
        self.priority = tm.pfc.priority
        self.error = tm_mismatch(tm)
        if self.error is not None:
            self.error = f"RoCE stays in class 0: {self.error}"
            return self
        entries = roce_entries(self.priority)
        try:
            with self.fabric.session(ELECTION_ID) as session:
                _delete_dscps(session, entries)  # a killed run's leftovers
                session.write([Update(UpdateType.INSERT, e) for e in entries])
            self.installed = tuple(entries)
        except Exception as err:
            self.error = f"RoCE stays in class 0: {err}"
        return self

    def stop(self) -> None:
        """Remove the entries (not when the switch has died: nothing holds them)."""
        entries, self.installed = self.installed, ()
        if not entries or self.fabric.switch_failure() is not None:
            return
        with contextlib.suppress(Exception), self.fabric.session(ELECTION_ID) as session:
            _delete_dscps(session, entries)

    def record(self) -> dict[str, Any]:
        """The PFC priority, the DSCP -> class map meant for it, and any error."""
        return {
            "pfc_priority": self.priority,
            "dscp_classes": {str(d): c for d, c in roce_dscp_classes(self.priority).items()},
            "error": self.error,
        }


def for_run(fabric: EmulatedFabric, transport: str) -> RoceClasses | None:
    """A run's RoCE classes, installed, when its collectives ride RoCE (`mltcp` too: it
    runs over RoCE, with no classes of its own); None over TCP (crux, echelon, none)."""
    return RoceClasses(fabric).start() if transport == "roce" else None


def _delete_dscps(session: P4RuntimeSession, entries: Sequence[TableEntry]) -> None:
    """Delete the held queue_class entries of `entries`' DSCPs."""
    dscps = {e.match["dscp"] for e in entries}
    held = [e for e in session.read_table(QUEUE_CLASS_TABLE) if e.match.get("dscp") in dscps]
    if held:
        session.write([Update(UpdateType.DELETE, e) for e in held])
