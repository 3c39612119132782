"""How long does an iteration take when jobs time-share GPUs? The interleaving model.

A sharing group is a set of jobs whose workers run on the same GPU slots
(a smaller job on a subset of a larger one's). The model follows Muri's
multi-resource interleaving (Zhao et al., SIGCOMM 2022, section 3: a DL
iteration is a sequence of stages, each using one resource; jobs in a group
use different resources at the same time and a group's cycle is a sequence of
stages, each as long as its longest use), with two resources, the GPU and
the network:

- A job's iteration is a compute stage C (the sum of its profile's Down
  phases) then a communication stage M (the sum of its Up phases). Jobs
  whose profiles interleave compute and transfers (pipeline, hybrid) are
  lumped the same way (our choice: the staged form Muri profiles jobs in).
- The GPU runs one job's compute at a time. In group order pi, stage s runs
  job pi(s)'s compute while job pi(s-1) communicates; a stage lasts
  max(C[pi(s)], M[pi(s-1)]). The cycle, one iteration of every member, is

      T = sum over s of max(C[pi(s)], M[pi(s-1)])      (n >= 2 jobs)
      T = C + M                                        (one job: no sharing)

  For two jobs this is Muri's formula for two resources. For three or more
  the same round-robin applies (our choice: the paper interleaves at most as
  many jobs as resources). The best order is the one with the smallest T
  (Muri tries every permutation).
- Inside a group job pi(s) computes from offset o_s (the sum of the stages
  before s) and communicates from o_{s+1}; in the simulator it runs the
  profile Down(o_{s+1} - o_s) then its Up phases, paced on period T with
  shift o_s (`scheduler.simulator`), so its communication overlaps the next
  member's compute and no two members of a group communicate at once.

Sharing factor of a member: T over its iteration alone (the JCT
degradation sharing costs it, at equal progress per iteration); the
group's factor is its members' largest. Sharing utilisation: the share of
the group's GPU-slot time spent computing, sum(C_i x w_i) / (T x slots).

    >>> from scheduler.workloads.types import Phase, Profile
    >>> a = Profile("a", "m", "data", 2, 100.0, (Phase(60.0, 0.0), Phase(40.0, 50.0)))
    >>> b = Profile("b", "m", "data", 2, 100.0, (Phase(60.0, 0.0), Phase(40.0, 50.0)))
    >>> g = share({"a": a, "b": b})
    >>> g.cycle_ms, dict(g.offsets_ms)     # max(60, 40) + max(60, 40)
    (120.0, {'a': 0.0, 'b': 60.0})
    >>> sharing_factor(g, {"a": a, "b": b}), utilisation(g, {"a": a, "b": b}, {"a": 2, "b": 2}, 2)
    (1.2, 1.0)
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scheduler.workloads.types import Phase, Profile

MAX_ORDERS = 24  # (our choice) permutations tried: every order of up to four jobs


@dataclass(frozen=True)
class Stages:
    """A job's iteration as Muri stages it: compute on the GPU, then communication."""

    compute_ms: float
    comm_ms: float

    @property
    def alone_ms(self) -> float:
        return self.compute_ms + self.comm_ms


def stages(profile: Profile, comm_ms: float | None = None) -> Stages:
    """Compute (Down phases) and communication (Up phases) of one iteration.

    `comm_ms` replaces the profile's communication time (an estimate for a
    placement under contention).
    """
    down = sum(p.duration_ms for p in profile.phases if p.gbps <= 0)
    up = sum(p.duration_ms for p in profile.phases if p.gbps > 0)
    return Stages(down, up if comm_ms is None else comm_ms)


def stage_lengths(order: Sequence[Stages]) -> list[float]:
    """Length of each stage of the cycle: stage s = max(C[s], M[s-1]).

    >>> stage_lengths([Stages(90.0, 10.0), Stages(10.0, 90.0)])
    [90.0, 10.0]
    """
    n = len(order)
    if n == 1:
        return [order[0].alone_ms]
    return [max(order[s].compute_ms, order[s - 1].comm_ms) for s in range(n)]


def cycle_ms(order: Sequence[Stages]) -> float:
    """The group's cycle: one iteration of every member (see the module docstring).

    A job's own stages are sequential: stage s holds C[s] and stage s+1 at
    least M[s], so the cycle is never below a member's time alone.

    >>> cycle_ms([Stages(10.0, 10.0), Stages(1.0, 1.0)])   # 10 + 10, not sum(C) = 11
    20.0
    """
    return sum(stage_lengths(order))


def best_order(stages_of: Mapping[str, Stages]) -> tuple[str, ...]:
    """The members' order with the shortest cycle (ties: the first in name order)."""
    names = sorted(stages_of)
    if len(names) <= 2:
        return tuple(names)
    best: tuple[float, tuple[str, ...]] | None = None
    first = names[0]  # a cycle's rotations are the same cycle: fix the first job
    for i, rest in enumerate(itertools.permutations(names[1:])):
        if i >= MAX_ORDERS:
            break
        order = (first, *rest)
        t = cycle_ms([stages_of[n] for n in order])
        if best is None or t < best[0] - 1e-9:
            best = (t, order)
    assert best is not None
    return best[1]


@dataclass(frozen=True)
class SharedGroup:
    """A sharing group laid out: order, cycle, when each member computes, its profile inside."""

    order: tuple[str, ...]
    cycle_ms: float
    offsets_ms: Mapping[str, float]
    profiles: Mapping[str, Profile]


def share(
    profiles: Mapping[str, Profile],
    order: Sequence[str] | None = None,
    comm_ms: Mapping[str, float] | None = None,
) -> SharedGroup:
    """Lay out a sharing group: its cycle, offsets and each member's profile inside it.

    `order` fixes the stage order (default: `best_order`); `comm_ms`
    overrides members' communication times (placement estimates).
    """
    st = {n: stages(p, (comm_ms or {}).get(n)) for n, p in profiles.items()}
    seq = tuple(order) if order is not None else best_order(st)
    if sorted(seq) != sorted(profiles):
        raise ValueError(f"order {seq} does not name the group's jobs {sorted(profiles)}")
    if len(seq) == 1:
        only = seq[0]
        return SharedGroup(seq, st[only].alone_ms, {only: 0.0}, {only: profiles[only]})
    lengths = stage_lengths([st[n] for n in seq])
    total = sum(lengths)
    offsets: dict[str, float] = {}
    shaped: dict[str, Profile] = {}
    t = 0.0
    for s, name in enumerate(seq):
        offsets[name] = t
        prof = profiles[name]
        ups = tuple(Phase(p.duration_ms, p.gbps) for p in prof.phases if p.gbps > 0)
        down = lengths[s]
        shaped[name] = Profile(
            prof.name,
            prof.model,
            prof.parallelism,
            prof.workers,
            down + sum(p.duration_ms for p in ups),
            (Phase(down, 0.0), *ups),
            prof.batch_size,
        )
        t += lengths[s]
    return SharedGroup(seq, total, offsets, shaped)


def sharing_factors(group: SharedGroup, alone_ms: Mapping[str, float]) -> dict[str, float]:
    """Each member's JCT degradation: the cycle over its iteration alone."""
    return {n: group.cycle_ms / max(alone_ms[n], 1e-9) for n in group.order}


def sharing_factor(group: SharedGroup, profiles: Mapping[str, Profile]) -> float:
    """The group's sharing factor: its most slowed member's (1 alone)."""
    alone = {n: stages(profiles[n]).alone_ms for n in group.order}
    return max(sharing_factors(group, alone).values())


def utilisation(
    group: SharedGroup,
    profiles: Mapping[str, Profile],
    workers: Mapping[str, int],
    slots: int,
) -> float:
    """Share of the group's GPU-slot time spent computing: sum(C_i x w_i) / (T x slots)."""
    busy = sum(stages(profiles[n]).compute_ms * workers[n] for n in group.order)
    return busy / (group.cycle_ms * max(slots, 1))


def slots_in_use(
    placement: Mapping[str, Sequence[str]], groups: Sequence[Sequence[str]]
) -> dict[str, int]:
    """GPU slots taken per server when the jobs of each group share slots.

    A group takes, on each server, its largest member's count there; a job
    in no group takes its own.

    >>> slots_in_use({"a": ("s1", "s1"), "b": ("s1",), "c": ("s2",)}, [("a", "b")])
    {'s1': 2, 's2': 1}
    """
    used: dict[str, int] = {}
    grouped: set[str] = set()
    for group in groups:
        members = [placement[n] for n in group if n in placement and placement[n]]
        if len(members) < 2:
            continue
        grouped.update(n for n in group if n in placement)
        per: dict[str, int] = {}
        for servers in members:
            for s in set(servers):
                per[s] = max(per.get(s, 0), list(servers).count(s))
        for s, k in per.items():
            used[s] = used.get(s, 0) + k
    for name, servers in placement.items():
        if name in grouped:
            continue
        for s in servers:
            used[s] = used.get(s, 0) + 1
    return dict(sorted(used.items()))
