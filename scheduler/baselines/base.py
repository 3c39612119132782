"""What every scheduler sees and answers: the interface the simulator drives.

At each event (arrival, departure, lease expiry, periodic tick) the simulator
hands a scheduler a `ClusterView` (free GPUs per server, every job with its
progress and current servers) and gets back an `Allocation`: where every job
that should run now runs, plus up to N alternative placements with the same
per-job worker counts (the hook Cassini ranks). Schedulers keep no mutable
state between calls: leases and progress travel in the view, so a run is a
pure function of the trace, the topology and the seed.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from scheduler.cassini.candidates import racks
from scheduler.workloads.profiles import ModelSpec, build_profile, load_models
from scheduler.workloads.types import Profile
from topologies.model import Topology

PlacementMap = Mapping[str, tuple[str, ...]]


@dataclass(frozen=True)
class JobStatus:
    """One job as the scheduler sees it at an event."""

    name: str
    model: str
    requested: int
    iterations: int
    arrival_s: float
    work_done: float
    servers: tuple[str, ...] = ()
    since_s: float = 0.0
    ideal_iteration_ms: float = 0.0
    batch_size: int | None = None

    @property
    def running(self) -> bool:
        return bool(self.servers)

    @property
    def remaining(self) -> float:
        return max(0.0, self.iterations - self.work_done)


@dataclass(frozen=True)
class ClusterView:
    """The cluster at one event: capacity, free GPUs and every live job."""

    now_s: float
    gpus: Mapping[str, int]
    free: Mapping[str, int]
    jobs: tuple[JobStatus, ...]
    reason: str = "arrival"
    sharing: tuple[tuple[str, ...], ...] = ()  # running jobs time-sharing GPU slots, in stage order

    def running(self) -> list[JobStatus]:
        return [j for j in self.jobs if j.running]

    def waiting(self) -> list[JobStatus]:
        return [j for j in self.jobs if not j.running]


@dataclass(frozen=True)
class Allocation:
    """A scheduler's answer. `candidates[0]` is the base scheduler's own pick.

    With `new_schedule` the agents of the jobs in `periods_ms` re-align: job j
    starts iterations on the grid now + shifts_ms[j] + k x periods_ms[j].
    Without it every agent keeps the grid it has. Shifts within one of
    `groups` are relative: the agents may move a whole group by one offset.
    """

    placement: PlacementMap
    candidates: tuple[PlacementMap, ...] = ()
    shifts_ms: Mapping[str, float] = field(default_factory=dict)
    work_per_iteration: Mapping[str, float] = field(default_factory=dict)
    score: float | None = None
    note: str = ""
    periods_ms: Mapping[str, float] = field(default_factory=dict)
    new_schedule: bool = False
    groups: tuple[tuple[str, ...], ...] = ()
    # Jobs time-sharing the same GPU slots, each group in stage order (`scheduler.cassini.timeshare`).
    sharing: tuple[tuple[str, ...], ...] = ()


class Scheduler(Protocol):
    """A base or augmented scheduler, as the simulator drives it."""

    @property
    def name(self) -> str: ...

    @property
    def dedicated(self) -> bool:
        """True: every job alone on its own copy of the cluster (Ideal)."""
        ...

    @property
    def migration_s(self) -> float:
        """Time a moved or resumed job loses before its next iteration."""
        ...

    def decide(self, view: ClusterView) -> Allocation: ...

    def next_tick(self, now_s: float, view: ClusterView) -> float: ...


@dataclass(frozen=True)
class ClusterInfo:
    """Static facts about the cluster the baselines need (built once per run)."""

    topology: Topology
    racks: Mapping[str, tuple[str, ...]]
    rack_of: Mapping[str, str]
    gpus: Mapping[str, int]

    @staticmethod
    def of(topo: Topology) -> ClusterInfo:
        grouped = {rack: tuple(servers) for rack, servers in racks(topo).items()}
        rack_of = {s: rack for rack, servers in grouped.items() for s in servers}
        return ClusterInfo(topo, grouped, rack_of, {s.name: s.gpus for s in topo.servers})


class ProfileBook:
    """Profiles by (model, workers, batch size), built once each.

    The models file is parsed once per book; schedulers and the simulator of
    one run share a book so they agree on every profile.
    """

    def __init__(
        self, models: Mapping[str, ModelSpec] | None = None, nic_gbps: float = 50.0
    ) -> None:
        self.models = dict(models) if models is not None else load_models()
        self.nic_gbps = nic_gbps
        self._cache: dict[tuple[str, int, int | None], Profile] = {}

    def get(self, model: str, workers: int, batch_size: int | None = None) -> Profile:
        key = (model, workers, batch_size)
        prof = self._cache.get(key)
        if prof is None:
            prof = build_profile(
                model, workers, batch_size=batch_size, nic_gbps=self.nic_gbps, models=self.models
            )
            self._cache[key] = prof
        return prof


def stable_seed(*parts: object) -> int:
    """A seed from text, stable across processes (never Python's hash())."""
    return zlib.crc32("|".join(str(p) for p in parts).encode())


def racks_spanned(servers: Sequence[str], rack_of: Mapping[str, str]) -> int:
    return len({rack_of[s] for s in servers})


def pack_one(
    workers: int,
    free: Mapping[str, int],
    info: ClusterInfo,
    rng: np.random.Generator | None = None,
) -> tuple[str, ...] | None:
    """GPU slots for one job, locality first: as few racks as the free GPUs allow.

    Without `rng`: best fit (the fullest rack that still fits, else the racks
    with most room first). With `rng`: another choice spanning the same number
    of racks, so a locality-driven scheduler rates it equal, but using other
    racks and servers (so it shares other uplinks).
    """
    by_rack = {
        rack: [s for s in servers for _ in range(free.get(s, 0))]
        for rack, servers in info.racks.items()
    }
    by_rack = {r: slots for r, slots in by_rack.items() if slots}
    if sum(len(v) for v in by_rack.values()) < workers:
        return None
    order = sorted(by_rack, key=lambda r: (-len(by_rack[r]), r))
    fits_one = sorted(r for r in by_rack if len(by_rack[r]) >= workers)
    if fits_one:
        if rng is None:
            chosen = [min(fits_one, key=lambda r: (len(by_rack[r]), r))]
        else:
            chosen = [fits_one[int(rng.integers(len(fits_one)))]]
    else:
        needed, total = 0, 0
        for r in order:
            total += len(by_rack[r])
            needed += 1
            if total >= workers:
                break
        chosen = order[:needed]
        if rng is not None:
            # swap in other racks while the rack count stays minimal
            for _ in range(8):
                perm = [order[i] for i in rng.permutation(len(order))]
                trial = perm[:needed]
                if sum(len(by_rack[r]) for r in trial) >= workers:
                    chosen = trial
                    break
    slots: list[str] = []
    for r in chosen:
        rack_slots = by_rack[r]
        if rng is not None:
            rack_slots = [rack_slots[i] for i in rng.permutation(len(rack_slots))]
        slots.extend(rack_slots)
    return tuple(sorted(slots[:workers]))


def joint_candidates(
    fixed: PlacementMap,
    to_place: Sequence[tuple[str, int]],
    free: Mapping[str, int],
    info: ClusterInfo,
    count: int,
    seed: int,
) -> tuple[PlacementMap, ...]:
    """Up to `count` full placements: running jobs stay put, new jobs packed.

    Candidate 0 is the best-fit packing. Later ones pack the same jobs with
    the same worker counts and the same number of racks per job (equal for a
    locality-driven base scheduler) but on other racks/servers. Every one is
    packed from the actual free slots, so each is feasible on its own.
    """
    base = dict(fixed)
    spans: dict[str, int] = {}
    remaining = dict(free)
    for job, workers in to_place:
        pick = pack_one(workers, remaining, info)
        if pick is None:
            raise ValueError(f"job {job} does not fit in the free GPUs")
        base[job] = pick
        spans[job] = racks_spanned(pick, info.rack_of)
        for s in pick:
            remaining[s] -= 1
    out: list[PlacementMap] = [base]
    if not to_place or count <= 1:
        return tuple(out)
    rng = np.random.default_rng(seed)
    keys = {tuple(sorted(base.items()))}
    for _ in range(count * 4):
        if len(out) >= count:
            break
        trial = dict(fixed)
        remaining = dict(free)
        ok = True
        for job, workers in to_place:
            pick = pack_one(workers, remaining, info, rng)
            if pick is None or racks_spanned(pick, info.rack_of) != spans[job]:
                ok = False
                break
            trial[job] = pick
            for s in pick:
                remaining[s] -= 1
        key = tuple(sorted(trial.items()))
        if ok and key not in keys:
            keys.add(key)
            out.append(trial)
    return tuple(out)


def slots_used(placement: PlacementMap) -> dict[str, int]:
    used: dict[str, int] = {}
    for servers in placement.values():
        for s in servers:
            used[s] = used.get(s, 0) + 1
    return used
