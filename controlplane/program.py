"""How is one device brought to the desired state?

`program_topology` is what `cassini program` and the emulated fabric both
do: compile the topology's entries (`controlplane.compile`) and program them.
Push the pipeline if the device has none or a different one, read what is
installed, diff, write the difference. Idempotent: a second run changes
nothing. Installed WRED thresholds are not overwritten unasked: a fabric
programmed with scaled thresholds must not silently get the unscaled ones
(`ThresholdChangeRefused`, unless `change_thresholds`).

Which tables a program reconciles (`reconciled_tables`): the static ones
(`STATIC_TABLES`, what the topology and the settings decide) and those of the
entries it is given; the run-time tables (`RUNTIME_TABLES`, filled and emptied
by a run's own code while the fabric stays up) keep their entries, so a
re-program, `cassini program` or a reconnect cannot silently reclassify a
running job's traffic. `clean` (`cassini program --clean`) is the full reset:
every table of the P4Info holds exactly what is given, run-time ones emptied.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .compile import desired_entries
from .entries import TableEntry
from .fit import P4INFO_ONLY, check_fit, topology_needs
from .p4info import P4InfoIndex, load_p4info
from .p4names import (
    FORWARD_TABLE,
    JOB_BY_DST_TABLE,
    JOB_BY_SRC_TABLE,
    QUEUE_CLASS_BY_FLOW_TABLE,
    QUEUE_CLASS_TABLE,
    WRED_TABLE,
)
from .reconcile import Plan, apply, plan
from .session import P4RuntimeSession
from .settings import WredSettings

if TYPE_CHECKING:
    from topologies.chip_mapping import ChipMap
    from topologies.model import Topology

# The static program's tables: their entries follow from the topology and the
# settings alone (forwarding; WRED/ECN thresholds; PFC and queue limits are not
# tables but traffic-manager settings), so the program that compiles them owns
# them and removes what it did not compile.
STATIC_TABLES = (FORWARD_TABLE, WRED_TABLE)
# Run-time tables: filled while the fabric runs by the code that knows their
# contents (a run's job classes, `job_classes.py`; a network policy's queue
# classes, `queue_classes.py`) and removed by it at the run's end. The static
# program cannot know them, so it leaves them alone (our choice; the paper has
# no run-time tables). tests/controlplane/test_program.py checks that the two
# cover the shipped P4Info's tables, so a new table gets an owner.
RUNTIME_TABLES = (JOB_BY_DST_TABLE, JOB_BY_SRC_TABLE, QUEUE_CLASS_TABLE, QUEUE_CLASS_BY_FLOW_TABLE)

# (min_cells, max_cells, max_prob) of one wred_profile entry; None: no entry.
Thresholds = tuple[int, int, int] | None


@dataclass(frozen=True)
class ThresholdChange:
    """The WRED profile of one egress port, installed and about to be written."""

    egress_port: int
    old: Thresholds
    new: Thresholds


def _thresholds(entry: TableEntry) -> Thresholds:
    p = entry.params
    return (p["min_cells"], p["max_cells"], p["max_prob"])


def _shown(t: Thresholds) -> str:
    return "none" if t is None else f"min {t[0]} / max {t[1]} cells, {t[2]} %"


def threshold_changes(the_plan: Plan, installed: Sequence[TableEntry]) -> list[ThresholdChange]:
    """The installed WRED profiles the plan modifies or deletes (new ones are no change)."""
    have = {e.key(): e for e in installed if e.table == WRED_TABLE}
    changes = [
        ThresholdChange(e.match["egress_port"], _thresholds(have[e.key()]), _thresholds(e))
        for e in the_plan.modifies
        if e.table == WRED_TABLE and e.key() in have
    ]
    changes += [
        ThresholdChange(e.match["egress_port"], _thresholds(e), None)
        for e in the_plan.deletes
        if e.table == WRED_TABLE
    ]
    return sorted(changes, key=lambda c: c.egress_port)


def describe_threshold_changes(changes: Sequence[ThresholdChange]) -> str:
    """'72 ports: min 152 / max 304 cells, 20 % -> min 1000 / max 2000 cells, 20 %'."""
    groups = Counter((c.old, c.new) for c in changes)
    return "; ".join(
        f"{n} port{'s' if n != 1 else ''}: {_shown(old)} -> {_shown(new)}"
        for (old, new), n in sorted(groups.items(), key=lambda item: -item[1])
    )


class ThresholdChangeRefused(RuntimeError):
    """The device holds other WRED thresholds than desired, and changing them was not asked."""

    def __init__(self, address: str, changes: Sequence[ThresholdChange]) -> None:
        super().__init__(
            f"device at {address} holds other WRED thresholds, left unchanged: "
            f"{describe_threshold_changes(changes)}"
        )
        self.changes = tuple(changes)


def reconciled_tables(
    p4info: P4InfoIndex, desired: Sequence[TableEntry], clean: bool = False
) -> tuple[str, ...]:
    """The tables `program_device` makes hold exactly `desired`'s entries, in full
    P4Info names: the static tables and the tables of `desired` (a caller that
    passes job classes wants exactly those); with `clean`, every table of the P4Info.
    A table of neither (say, one of an extended P4 program) is left alone.

    >>> from controlplane.p4info import load_p4info
    >>> reconciled_tables(load_p4info(), [])
    ('CassiniEgress.wred_profile', 'CassiniIngress.logical_forward')
    """
    if clean:
        return tuple(sorted(t.name for t in p4info.tables))
    names = {p4info.table(t).name for t in STATIC_TABLES}
    names.update(p4info.table(e.table).name for e in desired)
    return tuple(sorted(names))


@dataclass(frozen=True)
class ProgramResult:
    """What `program_device` did (or, with dry_run, would do); `installed_before`
    counts the entries of the tables it reconciled (`tables`)."""

    pipeline_pushed: bool
    plan: Plan
    desired_count: int
    installed_before: int
    threshold_changes: tuple[ThresholdChange, ...] = ()
    tables: tuple[str, ...] = ()


def program_device(
    session: P4RuntimeSession,
    desired: Sequence[TableEntry],
    p4info: P4InfoIndex,
    device_config: bytes = b"",
    dry_run: bool = False,
    batch_size: int = 500,
    change_thresholds: bool = False,
    clean: bool = False,
) -> ProgramResult:
    """Make the tables `reconciled_tables` names hold exactly `desired` (full P4Info
    names, see TableEntry.canonical); the other tables' entries stay as they are
    (the run-time ones, unless `clean`: the full reset).

    A dry run only reads, so it works on a read-only session (no election id).
    Raises ThresholdChangeRefused, before writing anything, when installed
    WRED profiles would change and `change_thresholds` is False.
    """
    wanted = [e.canonical(p4info) for e in desired]
    tables = reconciled_tables(p4info, wanted, clean)
    pushed = False
    if not session.has_pipeline(p4info, device_config):
        if dry_run:
            return ProgramResult(True, plan(wanted, []), len(desired), 0, tables=tables)
        session.set_pipeline(p4info, device_config)
        pushed = True
    else:
        session.p4info = p4info
    installed = [e for table in tables for e in session.read_table(table)]
    the_plan = plan(wanted, installed)
    changes = threshold_changes(the_plan, installed)
    if changes and not change_thresholds and not dry_run:
        raise ThresholdChangeRefused(session.address, changes)
    if not dry_run:
        apply(session, the_plan, batch_size=batch_size)
    return ProgramResult(pushed, the_plan, len(desired), len(installed), tuple(changes), tables)


def topology_entries(
    topo: Topology, chip: ChipMap, wred: WredSettings, p4info: P4InfoIndex
) -> list[TableEntry]:
    """The entries a device holds for `topo`, in full P4Info names (forwarding, then WRED);
    `fit.DoesNotFit` (one line) when the P4Info's tables cannot hold them."""
    entries = [e.canonical(p4info) for e in desired_entries(topo, chip, wred)]
    check_fit(topology_needs(topo, chip, p4info, entries), p4info, P4INFO_ONLY)
    return entries


def program_topology(
    session: P4RuntimeSession,
    topo: Topology,
    chip: ChipMap,
    wred: WredSettings,
    p4info: P4InfoIndex | None = None,
    device_config: bytes = b"",
    dry_run: bool = False,
    change_thresholds: bool = False,
    clean: bool = False,
) -> ProgramResult:
    """Make the device hold `topo`'s forwarding and WRED entries (`program_device`);
    run-time tables keep their entries unless `clean`, which empties them.

    `wred` is in the device's unit (cells; `controlplane.bmv2.bmv2_wred` for
    bmv2's packets); `p4info` defaults to the package's own.
    """
    p4info = p4info or load_p4info()
    return program_device(
        session,
        topology_entries(topo, chip, wred, p4info),
        p4info,
        device_config,
        dry_run=dry_run,
        change_thresholds=change_thresholds,
        clean=clean,
    )
