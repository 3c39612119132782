"""Does a topology fit a target, before anything is built?

A fabric that does not fit fails late and badly: `fabric up` on a topology
whose forwarding entries overflow the table builds every host, writes for
half a minute, then stops at the first full table. So the commands that
build or program a fabric compare first what the topology needs (its
entries per table, from the same builders `cassini program` uses; its chip
ports and cables, from the chip map) with what the target offers (each
table's `size` from the P4Info, the one source; the target's own limits,
`TargetLimits`), and refuse in one line of numbers naming what would make
it fit.

>>> from topologies.library import load_topology
>>> from topologies.chip_mapping import map_to_chip
>>> from controlplane.p4info import load_p4info
>>> topo = load_topology("leaf-spine:8:4:16")
>>> result = fit(topology_needs(topo, map_to_chip(topo)), load_p4info(), P4INFO_ONLY)
>>> print(result.message)  # doctest: +NORMALIZE_WHITESPACE
leaf-spine-8x4x16 fits the device: entries 192 in CassiniEgress.wred_profile, 23,936 in
CassiniIngress.logical_forward; 192 chip ports, 32 cables, 128 hosts
>>> print(fit(result.needs, load_p4info(), TOFINO).shortfalls[0])  # doctest: +ELLIPSIS
needs 96 100G panel cages (192 ports at their links' speeds); a Tofino holds 64 (...)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from topologies.chip_mapping import ChipMap
from topologies.errors import UserInputError
from topologies.model import Topology

from .compile import FORWARD_TABLE, desired_entries
from .entries import TableEntry
from .p4info import P4InfoIndex
from .settings import WredSettings

__all__ = [
    "P4INFO_ONLY",
    "TOFINO",
    "DoesNotFit",
    "Fit",
    "Needs",
    "Shortfall",
    "TargetLimits",
    "check_fit",
    "fit",
    "topology_needs",
]


@dataclass(frozen=True)
class TargetLimits:
    """What one target holds besides the P4Info's table sizes (None: no such limit).

    `read_entities`: entries one wildcard Read may return (`cassini program`
    reads every entry back to diff). `panel_cages`/`cage_gbps`: a Tofino's
    front panel, whose cages break out into channels of one speed.
    """

    name: str  # as a sentence names it: "the software switch"
    read_entities: int | None = None
    read_knob: str = ""
    panel_cages: int | None = None
    cage_gbps: int = 100
    cables_are_veths: bool = False  # bmv2: each loopback cable is a veth pair


# Any P4Runtime device at an address (`cassini program`): only the P4Info is known.
P4INFO_ONLY = TargetLimits("the device")
# (our choice) A Tofino 1 has 64 x 100G MACs, each a QSFP cage breaking out into
# 2 x 50G or 4 x 25G; a platform with fewer cages (32 on a Wedge100BF-32X) holds less.
TOFINO = TargetLimits("a Tofino", panel_cages=64, cage_gbps=100)


@dataclass(frozen=True)
class Needs:
    """What a topology asks of the chip: entries per table (full P4Info names), chip
    ports (one per server, two per switch-to-switch link), loopback cables, hosts
    (a namespace each) and veths (two per server cable, two more per cable where
    cables are veth pairs)."""

    topology: str
    entries: Mapping[str, int]
    chip_ports: int
    cables: int
    hosts: int
    # 100G cages at the links' speeds (`controlplane.tofino.panel_layout`); None when a
    # link runs a speed no Tofino port does (`tofino artifacts` refuses that itself).
    panel_cages: int | None

    def veths(self, limits: TargetLimits) -> int:
        """Interfaces the emulation creates on `limits`' target."""
        return 2 * self.hosts + (2 * self.cables if limits.cables_are_veths else 0)


@dataclass(frozen=True)
class Shortfall:
    """One thing a topology needs more of than the target has, and what would help."""

    what: str  # "entries in CassiniIngress.logical_forward"
    needed: int
    available: int
    holder: str  # "the P4 program"
    knob: str  # what would make it fit
    verb: str = "holds"

    def __str__(self) -> str:
        return (
            f"needs {self.needed:,} {self.what}; {self.holder} {self.verb} "
            f"{self.available:,} ({self.knob})"
        )


@dataclass(frozen=True)
class Fit:
    """A topology's needs against one target: `fits`, or the shortfalls in `message`."""

    target: str
    needs: Needs
    shortfalls: tuple[Shortfall, ...]

    @property
    def fits(self) -> bool:
        return not self.shortfalls

    @property
    def message(self) -> str:
        """One line: the topology, the target and every shortfall with its numbers."""
        if self.fits:
            n = self.needs
            entries = ", ".join(f"{c:,} in {t}" for t, c in sorted(n.entries.items()))
            return (
                f"{n.topology} fits {self.target}: entries {entries}; {n.chip_ports} chip "
                f"ports, {n.cables} cables, {n.hosts} hosts"
            )
        return f"{self.needs.topology} does not fit {self.target}: " + "; ".join(
            map(str, self.shortfalls)
        )


class DoesNotFit(UserInputError):
    """A topology the target cannot hold; the message is `Fit.message`."""

    def __init__(self, result: Fit) -> None:
        super().__init__(result.message)
        self.fit = result


def entries_per_table(entries: Iterable[TableEntry], p4info: P4InfoIndex) -> dict[str, int]:
    """{full table name: entries}, aliases counted under the P4Info's full name."""
    return dict(Counter(p4info.table(e.table).name for e in entries))


def topology_needs(
    topo: Topology,
    chip: ChipMap,
    p4info: P4InfoIndex | None = None,
    entries: Iterable[TableEntry] | None = None,
) -> Needs:
    """What `topo` on `chip` needs; `entries` are what `cassini program` installs (built
    here with `desired_entries` when not given: their count does not depend on the
    thresholds). Full table names need `p4info` when `entries` use aliases."""
    from .tofino import panel_layout, port_speeds  # Tofino-only arithmetic

    built = list(entries) if entries is not None else desired_entries(topo, chip, WredSettings())
    counts = (
        entries_per_table(built, p4info)
        if p4info is not None
        else dict(Counter(e.table for e in built))
    )
    cages: int | None
    try:
        cages = len({p.panel_port for p in panel_layout(port_speeds(topo, chip))})
    except UserInputError:
        cages = None
    return Needs(
        topology=topo.name,
        entries=MappingProxyType(counts),
        chip_ports=len(chip.ports()),
        cables=len(chip.loopback_pairs),
        hosts=len(topo.servers),
        panel_cages=cages,
    )


def _table_knob(table: str, needs: Needs) -> str:
    """What would shrink or grow `table`'s count: the forwarding table costs one entry
    per (port, server); any other table needs a larger `size` in the P4 program."""
    grow = f"a P4 program whose {table} `size` is at least {needs.entries[table]:,}"
    if table == FORWARD_TABLE:
        return (
            f"one entry per chip port and destination server: {needs.chip_ports} ports x "
            f"{needs.hosts} servers here; a topology with fewer servers or switches, or {grow}"
        )
    return grow


def fit(needs: Needs, p4info: P4InfoIndex, limits: TargetLimits) -> Fit:
    """`needs` against the P4Info's table sizes and `limits` (see the module example).

    A table of `size` 0 declares no size: the P4Runtime spec leaves it to the target.
    """
    shortfalls: list[Shortfall] = []
    for name, count in sorted(needs.entries.items()):
        size = p4info.table(name).size
        if size and count > size:
            shortfalls.append(
                Shortfall(
                    f"entries in {name}", count, size, "the P4 program", _table_knob(name, needs)
                )
            )
    total = sum(needs.entries.values())
    if limits.read_entities is not None and total > limits.read_entities:
        shortfalls.append(
            Shortfall(
                "entries in all tables (`cassini program` reads them back in one Read)",
                total,
                limits.read_entities,
                f"one Read of {limits.name}",
                limits.read_knob,
                verb="returns at most",
            )
        )
    cages = needs.panel_cages
    if limits.panel_cages is not None and cages is not None and cages > limits.panel_cages:
        shortfalls.append(
            Shortfall(
                f"{limits.cage_gbps}G panel cages ({needs.chip_ports} ports at their links' "
                "speeds)",
                cages,
                limits.panel_cages,
                limits.name,
                "fewer servers or switch links: one port per server, two per switch link",
            )
        )
    return Fit(limits.name, needs, tuple(shortfalls))


def check_fit(needs: Needs, p4info: P4InfoIndex, limits: TargetLimits) -> Fit:
    """`fit`, raising DoesNotFit (a UserInputError: one line on the command line)
    when the topology does not fit."""
    result = fit(needs, p4info, limits)
    if not result.fits:
        raise DoesNotFit(result)
    return result
