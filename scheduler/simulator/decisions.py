"""Which placement and time-shifts did each scheduler choose, decision by decision?

The emulator must run the very decisions the simulator's schedulers make (one
scheduling code path): `scheduler.simulator.experiment.run_experiment` reports every
decision through its `on_decision` hook, and `DecisionLog` keeps them as
plain data. A `Decision` hands the fabric's runner a `Schedule` (placement,
shifts, periods and models of the placed jobs: `as_schedule`), the values
themselves; files are for users (`cassini schedule --json` writes one).

    >>> log = DecisionLog()
    >>> from scheduler.baselines.base import Allocation, ClusterView
    >>> view = ClusterView(0.0, {"s01": 1, "s02": 1}, {"s01": 1, "s02": 1}, (), "arrival")
    >>> log("themis", 0.0, view, Allocation({"a": ("s01", "s02")}))
    >>> log.of("themis")[0].as_schedule().placement
    {'a': ('s01', 's02')}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduler.baselines.base import Allocation, ClusterView
from scheduler.workloads.types import Schedule


@dataclass(frozen=True)
class Decision:
    """One scheduler decision: when, why, and what it placed and paced.

    `shifts_ms`/`periods_ms` are empty for a scheduler without Cassini (its
    jobs run free); `new_schedule` False means the agents keep the grid they
    have (see `scheduler.baselines.base.Allocation`). `sharing` holds the jobs
    that time-share GPU slots, each group in stage order (`scheduler.cassini.timeshare`;
    empty for an exclusive scheduler): the emulation runs each member's
    time-shared profile from it.
    """

    at_s: float
    reason: str
    placement: Mapping[str, tuple[str, ...]]
    models: Mapping[str, str]
    shifts_ms: Mapping[str, float] = field(default_factory=dict)
    periods_ms: Mapping[str, float] = field(default_factory=dict)
    new_schedule: bool = False
    sharing: tuple[tuple[str, ...], ...] = ()

    def as_schedule(self) -> Schedule:
        """What the placed jobs run: their servers, shifts, periods, models and sharing
        groups (each group's placed members, where two or more are placed)."""
        placed = self.placement
        sharing = tuple(
            kept
            for kept in (tuple(j for j in group if j in placed) for group in self.sharing)
            if len(kept) > 1
        )
        return Schedule(
            placement=dict(placed),
            shifts_ms={j: v for j, v in self.shifts_ms.items() if j in placed},
            periods_ms={j: v for j, v in self.periods_ms.items() if j in placed},
            models={j: self.models[j] for j in placed if j in self.models},
            sharing=sharing,
        )


def decision_of(now_s: float, view: ClusterView, alloc: Allocation) -> Decision:
    """The plain-data form of one decision (running jobs only)."""
    placement = {j: tuple(s) for j, s in alloc.placement.items() if s}
    models = {job.name: job.model for job in view.jobs}
    paced = alloc.new_schedule
    return Decision(
        at_s=now_s,
        reason=view.reason,
        placement=placement,
        models=models,
        shifts_ms=dict(alloc.shifts_ms) if paced else {},
        periods_ms=dict(alloc.periods_ms) if paced else {},
        new_schedule=paced,
        sharing=tuple(tuple(g) for g in alloc.sharing if len(g) > 1),
    )


class DecisionLog:
    """The `on_decision` hook of `run_experiment`: every scheduler's decisions, in order."""

    def __init__(self) -> None:
        self._by_scheduler: dict[str, list[Decision]] = {}

    def __call__(self, scheduler: str, now_s: float, view: ClusterView, alloc: Allocation) -> None:
        self._by_scheduler.setdefault(scheduler, []).append(decision_of(now_s, view, alloc))

    def of(self, scheduler: str) -> tuple[Decision, ...]:
        """`scheduler`'s decisions in the order it made them (empty if it made none)."""
        return tuple(self._by_scheduler.get(scheduler, ()))

    def first(self, scheduler: str) -> Decision:
        """The first decision, which is the whole schedule of a snapshot trace."""
        decisions = self.of(scheduler)
        if not decisions:
            raise LookupError(f"scheduler {scheduler!r} made no decision")
        return decisions[0]
