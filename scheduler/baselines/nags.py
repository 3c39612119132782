"""NAGS: network-aware GPU sharing, and the engine Muri-style grouping shares with it.

From the NAGS design as the issue describes it (no public text of it was
reachable, so every rule below beyond its named parts is ours): jobs may
share GPUs in sharing groups of any size and any GPU count; each partition
is placed with its communication pattern in mind; groups are scored by the
sharing factor (the JCT degradation sharing costs) and the sharing
utilisation (GPU use). Time-sharing itself is modelled in
`scheduler.cassini.timeshare` and run by the simulator.

The rules (all our choice):
- Queue: waiting jobs in Themis's order, farthest from finish-time fairness
  first (as `delay` does, so the comparison is about placement and sharing).
  Running jobs are not preempted.
- A waiting job first takes a free consolidated placement (as few racks as
  an empty cluster allows) alone: sharing slows every member, so it is used
  only when GPUs are short.
- Otherwise it may join a unit (a running job alone, or a group of fewer
  than `max_group` jobs). Its slots: a smaller or equal job takes the
  unit's slots on the fewest racks (its ring stays inside them); a larger
  job takes all the unit's slots plus free ones packed locality first (any
  GPU count shares). Each member's communication is the profile's stretched
  by its placement's most loaded link (`nags_groups.LinkLoad`), the group's
  own members apart since their communication stages never overlap: the
  network-aware part.
- A candidate group is admitted when its sharing factor (largest member
  cycle over its time alone) is at most `max_factor` (1.5) and it raises the
  unit's GPU utilisation; the best admitted one by utilisation / factor
  wins. If a fragmented exclusive placement is also free, the job takes
  whichever has the smaller factor (the fragmented one's: its stretched
  iteration over its profile's).
- Otherwise the job waits.
- After the queue, a group member moves to a free consolidated placement
  alone when the time sharing would still cost it (remaining iterations x
  (cycle - time alone)) exceeds the move's `migration_s` (15 s, as Themis).
- Each group's members are paced on the group's cycle with the offsets of
  its stage order (`scheduler.cassini.timeshare.share`), so the simulator's agents
  keep the interleave; groups are re-laid only when their members change.

`SharingPolicy` holds what differs between NAGS and Muri (`muri`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from scheduler.cassini.timeshare import share, stages
from scheduler.workloads.traffic import JobRouter
from topologies.model import DirectedLink

from .base import (
    Allocation,
    ClusterInfo,
    ClusterView,
    JobStatus,
    ProfileBook,
    pack_one,
    racks_spanned,
)
from .nags_groups import GroupScore, LinkLoad, Member, evaluate, slot_union
from .themis import finish_time_fairness

_EPS = 1e-9


@dataclass(frozen=True)
class SharingPolicy:
    """What a GPU-sharing scheduler decides its own way."""

    max_group: int = 3  # (our choice) jobs per group; the cycle's order search is factorial
    same_gpus_only: bool = False  # Muri: only jobs of the same GPU count share, on the same slots
    network_aware: bool = True  # NAGS: communication stretched by the placement's links
    max_factor: float = 1.5  # (our choice) admission: sharing factor at most this
    consolidate: bool = True  # NAGS: alone only on a consolidated placement, else compare
    split_out: bool = True  # NAGS: a member moves alone to free GPUs when that pays back


@dataclass(frozen=True)
class Option:
    """One way to run a waiting job: alone, or in a unit with its score."""

    servers: tuple[str, ...]
    unit: tuple[str, ...] = ()
    score: GroupScore | None = None
    extra: tuple[str, ...] = ()  # free slots a larger job adds to the unit's


@dataclass(frozen=True)
class SharingScheduler:
    info: ClusterInfo
    book: ProfileBook
    router: JobRouter
    capacities: Mapping[DirectedLink, float]
    policy: SharingPolicy = SharingPolicy()
    name: str = "nags"
    migration_s: float = 15.0
    dedicated: bool = False

    def preferred_racks(self, workers: int) -> int:
        pick = pack_one(workers, self.info.gpus, self.info)
        return racks_spanned(pick, self.info.rack_of) if pick else len(self.info.racks)

    def member(self, job: JobStatus, servers: tuple[str, ...]) -> Member:
        return Member(job.name, self.book.get(job.model, job.requested, job.batch_size), servers)

    def decide(self, view: ClusterView) -> Allocation:
        now = view.now_s
        by_name = {j.name: j for j in view.jobs}
        placement: dict[str, tuple[str, ...]] = {j.name: j.servers for j in view.running()}
        pool = dict(view.free)
        units: list[tuple[str, ...]] = [g for g in view.sharing if len(g) > 1]
        grouped = {n for g in units for n in g}
        units += [(n,) for n in sorted(placement) if n not in grouped]
        before = {u for u in units if len(u) > 1}
        load = LinkLoad(self.router, self.capacities)
        for name, servers in sorted(placement.items()):
            load.add(self.member(by_name[name], servers))
        queue = sorted(
            view.waiting(), key=lambda j: (-finish_time_fairness(j, now), j.arrival_s, j.name)
        )
        for job in queue:
            option = self.choose(job, units, placement, pool, load, by_name)
            if option is None:
                continue
            placement[job.name] = option.servers
            for s in option.extra if option.unit else option.servers:
                pool[s] -= 1
            load.add(self.member(job, option.servers))
            if option.unit:
                assert option.score is not None
                units[units.index(option.unit)] = option.score.group.order
            else:
                units.append((job.name,))
        if self.policy.split_out:
            self.split(units, placement, pool, by_name, load)
        after = {u for u in units if len(u) > 1}
        return self.allocation(units, placement, by_name, changed=after != before)

    def choose(
        self,
        job: JobStatus,
        units: list[tuple[str, ...]],
        placement: Mapping[str, tuple[str, ...]],
        pool: Mapping[str, int],
        load: LinkLoad,
        by_name: Mapping[str, JobStatus],
    ) -> Option | None:
        """Where `job` runs now: alone, in the best admitted group, or nowhere (waits)."""
        pick = pack_one(job.requested, pool, self.info)
        consolidated = pick is not None and (
            not self.policy.consolidate
            or racks_spanned(pick, self.info.rack_of) <= self.preferred_racks(job.requested)
        )
        if pick is not None and consolidated:
            return Option(pick)
        best: Option | None = None
        for unit in units:
            opt = self.join(job, unit, placement, pool, load, by_name)
            if opt is None or opt.score is None:
                continue
            if best is None or self.rank(opt.score) > self.rank(best.score) + _EPS:  # type: ignore[arg-type]
                best = opt
        if pick is None:
            return best
        if best is None or best.score is None:
            return Option(pick)
        me = self.member(job, pick)
        own = stages(me.profile)
        stretched = own.compute_ms + own.comm_ms * load.stretch(me)
        frag = stretched / max(own.alone_ms, _EPS)  # its slowdown alone on the fragments
        return best if best.score.factor < frag - _EPS else Option(pick)

    def rank(self, score: GroupScore) -> float:
        """NAGS: utilisation per unit of slowdown; Muri: its weight (both resources' use)."""
        if self.policy.same_gpus_only:
            return score.muri_weight
        return score.utilisation / score.factor

    def join(
        self,
        job: JobStatus,
        unit: tuple[str, ...],
        placement: Mapping[str, tuple[str, ...]],
        pool: Mapping[str, int],
        load: LinkLoad,
        by_name: Mapping[str, JobStatus],
    ) -> Option | None:
        """`job` added to `unit`: its slots, the group's score, or None if not admitted."""
        if len(unit) >= self.policy.max_group:
            return None
        hosts = [self.member(by_name[n], placement[n]) for n in unit]
        slots = slot_union(hosts)
        extra: tuple[str, ...] = ()
        if self.policy.same_gpus_only:
            if any(len(h.servers) != job.requested for h in hosts):
                return None
            servers = tuple(sorted(hosts[0].servers))
        elif job.requested <= len(slots):
            sub = pack_one(job.requested, Counter(slots), self.info)
            if sub is None:
                return None
            servers = sub
        else:
            more = pack_one(job.requested - len(slots), pool, self.info)
            if more is None:
                return None
            extra = more
            servers = tuple(sorted(slots + more))
        me = Member(job.name, self.book.get(job.model, job.requested, job.batch_size), servers)
        aware = load if self.policy.network_aware else None
        score = evaluate([*hosts, me], aware)
        now_score = evaluate(hosts, aware)
        if self.policy.same_gpus_only:
            # Muri: a group must beat running its jobs one after another
            alone = [stages(m.profile).alone_ms for m in (*hosts, me)]
            if score.group.cycle_ms > len(alone) * min(alone) + _EPS:
                return None
        else:
            if score.factor > self.policy.max_factor + _EPS:
                return None
            if score.utilisation <= now_score.utilisation + _EPS:
                return None
        return Option(servers, unit, score, extra)

    def split(
        self,
        units: list[tuple[str, ...]],
        placement: dict[str, tuple[str, ...]],
        pool: dict[str, int],
        by_name: Mapping[str, JobStatus],
        load: LinkLoad,
    ) -> None:
        """Members that gain more than a migration by running alone on free GPUs leave their group."""
        for i, unit in enumerate(list(units)):
            if len(unit) < 2:
                continue
            laid = share({n: self.member(by_name[n], placement[n]).profile for n in unit}, unit)
            for name in unit:
                job = by_name[name]
                alone = self.member(job, placement[name]).profile.iteration_ms
                cost_s = job.remaining * (laid.cycle_ms - alone) / 1e3
                pick = pack_one(job.requested, pool, self.info)
                if pick is None or cost_s <= self.migration_s:
                    continue
                if racks_spanned(pick, self.info.rack_of) > self.preferred_racks(job.requested):
                    continue
                load.remove(name)
                placement[name] = pick
                load.add(self.member(job, pick))
                for s in pick:
                    pool[s] -= 1
                rest = tuple(n for n in units[i] if n != name)
                units[i] = rest
                units.append((name,))
                break  # one move per group per decision (our choice): the cycle changes
        units[:] = [u for u in units if u]

    def allocation(
        self,
        units: list[tuple[str, ...]],
        placement: Mapping[str, tuple[str, ...]],
        by_name: Mapping[str, JobStatus],
        changed: bool,
    ) -> Allocation:
        """The placement, the sharing groups, and each member's period (cycle) and shift (offset)."""
        groups = tuple(u for u in units if len(u) > 1)
        periods: dict[str, float] = {}
        shifts: dict[str, float] = {}
        for group in groups:
            laid = share({n: self.member(by_name[n], placement[n]).profile for n in group}, group)
            for n in group:
                periods[n] = laid.cycle_ms
                shifts[n] = laid.offsets_ms[n]
        note = f"{len(groups)} sharing group(s): " + "; ".join("+".join(g) for g in groups)
        return Allocation(
            placement=dict(placement),
            candidates=(dict(placement),),
            shifts_ms=shifts,
            periods_ms=periods,
            new_schedule=changed,
            groups=groups,
            sharing=groups,
            note=note if groups else "",
        )

    def next_tick(self, now_s: float, view: ClusterView) -> float:
        return math.inf
