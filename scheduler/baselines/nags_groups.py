"""Which sharing group should a waiting job join, and how good is it? Group scoring for NAGS and Muri.

A unit is what runs on one set of GPU slots: a job alone, or a sharing
group (`scheduler.cassini.timeshare`). `evaluate` lays out a unit with one more job
and scores it; the schedulers (`nags`, `muri`) pick among the units with
these numbers. Two ways to count a job's communication:

- fixed (Muri): the profile's communication time, wherever the job runs.
- network-aware (NAGS, our choice of estimate): the profile's time stretched
  by the most loaded link of the job's placement, max(1, (peak demand of
  the other running jobs on the link + the job's own peak) / capacity).
  The members of one group never count against each other: their
  communication stages do not overlap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scheduler.cassini.timeshare import SharedGroup, share, stages
from scheduler.workloads.traffic import JobRouter
from scheduler.workloads.types import Profile
from topologies.model import DirectedLink


@dataclass(frozen=True)
class Member:
    """One job of a unit: its profile alone and the GPU slots (servers) it runs on."""

    name: str
    profile: Profile
    servers: tuple[str, ...]


@dataclass(frozen=True)
class GroupScore:
    """A unit with a job added: its layout and the numbers the schedulers rank by."""

    group: SharedGroup
    factors: Mapping[str, float]  # per member: cycle / its iteration alone on its placement
    factor: float  # the largest
    utilisation: float  # GPU: compute slot-time over the group's slot-time
    muri_weight: float  # Muri's: both resources' busy time over 2 x cycle
    comm_ms: Mapping[str, float]  # communication time counted per member


class LinkLoad:
    """Peak demand per directed link from the running jobs (what NAGS places around)."""

    def __init__(self, router: JobRouter, capacities: Mapping[DirectedLink, float]) -> None:
        self.router = router
        self.capacities = capacities
        self.load: dict[DirectedLink, float] = {}
        self.links: dict[str, frozenset[DirectedLink]] = {}
        self.peak: dict[str, float] = {}

    def links_of(self, m: Member) -> frozenset[DirectedLink]:
        return self.router.job_links(m.servers, m.profile.parallelism)

    def add(self, m: Member) -> None:
        """Count a placed job's peak demand on its links."""
        links = self.links_of(m)
        self.links[m.name] = links
        self.peak[m.name] = m.profile.peak_gbps
        for lk in links:
            self.load[lk] = self.load.get(lk, 0.0) + m.profile.peak_gbps

    def remove(self, name: str) -> None:
        for lk in self.links.pop(name, frozenset()):
            self.load[lk] -= self.peak[name]
        self.peak.pop(name, None)

    def stretch(self, m: Member, apart: Sequence[str] = ()) -> float:
        """How much contention should stretch `m`'s communication on its placement (>= 1).

        `apart`: jobs whose demand does not count (the members of m's group).
        """
        worst = 1.0
        for lk in self.links_of(m):
            other = self.load.get(lk, 0.0)
            for name in apart:
                if lk in self.links.get(name, frozenset()):
                    other -= self.peak[name]
            if m.name in self.links and lk in self.links[m.name]:
                other -= self.peak[m.name]
            worst = max(worst, (max(other, 0.0) + m.profile.peak_gbps) / self.capacities[lk])
        return worst


def slot_union(members: Sequence[Member]) -> tuple[str, ...]:
    """The GPU slots a unit holds: per server, its members' largest count there."""
    per: dict[str, int] = {}
    for m in members:
        for s in set(m.servers):
            per[s] = max(per.get(s, 0), m.servers.count(s))
    return tuple(sorted(s for s, k in per.items() for _ in range(k)))


def evaluate(
    members: Sequence[Member],
    load: LinkLoad | None = None,
) -> GroupScore:
    """Lay out `members` as one sharing group and score it.

    With `load` (NAGS) each member's communication is stretched by its
    placement's links (`LinkLoad.stretch`); without (Muri) it is the
    profile's.

    Two 2-GPU jobs of 60 ms compute and 40 ms communication: cycle
    max(60, 40) + max(60, 40) = 120 ms, factor 120 / 100, both GPUs
    computing all the time; Muri's weight (60 + 40) x 2 / (2 x 120):

    >>> from scheduler.workloads.types import Phase
    >>> p = Profile("p", "m", "data", 2, 100.0, (Phase(60.0, 0.0), Phase(40.0, 50.0)))
    >>> s = evaluate([Member("a", p, ("s1", "s2")), Member("b", p, ("s1", "s2"))])
    >>> s.group.cycle_ms, s.factor, s.utilisation, round(s.muri_weight, 3)
    (120.0, 1.2, 1.0, 0.833)
    """
    names = [m.name for m in members]
    comm: dict[str, float] = {}
    for m in members:
        base = stages(m.profile).comm_ms
        if load is not None:
            base *= load.stretch(m, [n for n in names if n != m.name])
        comm[m.name] = base
    profiles = {m.name: m.profile for m in members}
    group = share(profiles, comm_ms=comm)
    alone = {m.name: stages(m.profile, comm[m.name]).alone_ms for m in members}
    factors = {n: group.cycle_ms / max(alone[n], 1e-9) for n in names}
    slots = len(slot_union(members))
    busy = sum(stages(m.profile).compute_ms * len(m.servers) for m in members)
    both = sum(alone[m.name] * len(m.servers) for m in members)
    return GroupScore(
        group=group,
        factors=factors,
        factor=max(factors.values()),
        utilisation=busy / (group.cycle_ms * max(slots, 1)),
        muri_weight=both / (2.0 * group.cycle_ms * max(slots, 1)),
        comm_ms=comm,
    )
