"""What must change on a device so it holds exactly the desired entries?

`plan` is a pure diff keyed by table + match (what identifies an entry in
P4Runtime); `apply` writes it, deletes first so a moved key never collides,
then modifies, then inserts. Re-running after a successful apply yields an
empty plan. Which tables the two sets cover is the caller's to say
(`program.reconciled_tables`): an entry not read is never deleted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from topologies.errors import UserInputError

from .entries import FrozenMap, TableEntry, Update, UpdateType

if TYPE_CHECKING:
    from .session import P4RuntimeSession


@dataclass(frozen=True)
class Plan:
    """The writes that turn the installed entries into the desired ones."""

    inserts: tuple[TableEntry, ...] = ()
    modifies: tuple[TableEntry, ...] = ()
    deletes: tuple[TableEntry, ...] = ()

    def is_empty(self) -> bool:
        return not (self.inserts or self.modifies or self.deletes)

    def updates(self) -> list[Update]:
        """Deletes, then modifies, then inserts."""
        return (
            [Update(UpdateType.DELETE, e) for e in self.deletes]
            + [Update(UpdateType.MODIFY, e) for e in self.modifies]
            + [Update(UpdateType.INSERT, e) for e in self.inserts]
        )

    def counts_by_table(self) -> dict[str, dict[str, int]]:
        """{table: {"insert": n, "modify": n, "delete": n}} for the tables that change."""
        out: dict[str, dict[str, int]] = {}
        for kind, entries in (
            ("insert", self.inserts),
            ("modify", self.modifies),
            ("delete", self.deletes),
        ):
            for table, n in Counter(e.table for e in entries).items():
                out.setdefault(table, {"insert": 0, "modify": 0, "delete": 0})[kind] = n
        return out


def plan(desired: Iterable[TableEntry], installed: Iterable[TableEntry]) -> Plan:
    """Diff two entry sets. Both must use the same (full) names; see TableEntry.canonical.

    >>> a = TableEntry("t", {"k": 1}, "act", {"p": 1})
    >>> b = TableEntry("t", {"k": 1}, "act", {"p": 2})
    >>> p = plan([b], [a]); (len(p.inserts), len(p.modifies), len(p.deletes))
    (0, 1, 0)
    """
    want: dict[tuple[str, FrozenMap], TableEntry] = {}
    for entry in desired:
        key = entry.key()
        previous = want.get(key)
        if previous is not None and previous != entry:
            raise UserInputError(
                f"two desired entries of {entry.table} match {dict(entry.match)} "
                f"with different actions: {previous.action}{dict(previous.params)} "
                f"and {entry.action}{dict(entry.params)}"
            )
        want[key] = entry
    have = {entry.key(): entry for entry in installed}
    inserts = tuple(e for k, e in want.items() if k not in have)
    modifies = tuple(e for k, e in want.items() if k in have and have[k] != e)
    deletes = tuple(e for k, e in have.items() if k not in want)
    return Plan(inserts, modifies, deletes)


def apply(session: P4RuntimeSession, the_plan: Plan, batch_size: int = 500) -> int:
    """Write a plan; returns the number of updates sent. Raises WriteError on failures."""
    updates = the_plan.updates()
    if updates:
        session.write(updates, batch_size=batch_size)
    return len(updates)
