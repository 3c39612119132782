"""How is one device brought to the desired state?

Push the pipeline if the device has none or a different one, read what is
installed, diff, write the difference. Idempotent: a second run changes
nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .entries import TableEntry
from .p4info import P4InfoIndex
from .reconcile import Plan, apply, plan
from .session import P4RuntimeSession


@dataclass(frozen=True)
class ProgramResult:
    """What `program_device` did (or, with dry_run, would do)."""

    pipeline_pushed: bool
    plan: Plan
    desired_count: int
    installed_before: int


def program_device(
    session: P4RuntimeSession,
    desired: Sequence[TableEntry],
    p4info: P4InfoIndex,
    device_config: bytes = b"",
    dry_run: bool = False,
    batch_size: int = 500,
) -> ProgramResult:
    """Make the device hold exactly `desired` (full P4Info names, see TableEntry.canonical)."""
    pushed = False
    if not session.has_pipeline(p4info):
        if dry_run:
            the_plan = plan([e.canonical(p4info) for e in desired], [])
            return ProgramResult(True, the_plan, len(desired), 0)
        session.set_pipeline(p4info, device_config)
        pushed = True
    else:
        session.p4info = p4info
    installed = session.read_table()
    the_plan = plan([e.canonical(p4info) for e in desired], installed)
    if not dry_run:
        apply(session, the_plan, batch_size=batch_size)
    return ProgramResult(pushed, the_plan, len(desired), len(installed))
