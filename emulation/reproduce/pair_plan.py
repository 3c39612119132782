"""Which schedules does a pair of jobs on one shared link run: aligned, and shifted by Cassini?

Shared by the simulator's and the emulation's cells, so both columns run the
same two schedules. The shift and the periods are what `cassini compat`
computes for the pair (`scheduler.cassini.plans.plan_link`, 5 degrees, paced).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .workloads import PAIR_SERVERS

PRECISION_DEG = 5.0
WORKERS = 4


@dataclass(frozen=True)
class PairPlan:
    """Two job names, Cassini's plan for them on one link, and the two schedules."""

    key: str  # "vgg19+vgg19"
    jobs: tuple[str, str]  # "vgg19-0", "vgg19-1"
    models: tuple[str, str]
    # the pair's compatibility score on its own grid (the least-idling pacing option),
    # before any stretch that makes the grid hold: the paper's notion (Table 2's scores)
    score: float
    shift_ms: float  # the second job's shift relative to the first
    periods_ms: Mapping[str, float]
    up_ms: Mapping[str, float]  # per job, its profile's time at non-zero demand
    iteration_ms: Mapping[str, float]  # per job, its profile's iteration time

    def placement(self) -> dict[str, list[str]]:
        return {job: list(servers) for job, servers in zip(self.jobs, PAIR_SERVERS, strict=True)}

    def schedule(self, shifted: bool) -> dict[str, Any]:
        """The schedule (`cassini schedule --json`'s keys) of one case: aligned, both jobs
        start together and run free (no agent, as without Cassini); shifted, Cassini's
        shift and periods."""
        if not shifted:
            return {"placement": self.placement(), "shifts_ms": dict.fromkeys(self.jobs, 0.0)}
        return {
            "placement": self.placement(),
            "shifts_ms": {self.jobs[0]: 0.0, self.jobs[1]: self.shift_ms},
            "periods_ms": dict(self.periods_ms),
        }


def pair_plan(
    models: tuple[str, str], nic_gbps: float = 50.0, profiles: str | Path | None = None
) -> PairPlan:
    """Cassini's plan for two jobs of `WORKERS` workers on one link of `nic_gbps`.

    `profiles`: a profiles file (`cassini profile --out`); its models' measured
    profiles replace the derived ones, each paced at its measured grid period
    (`scheduler.workloads.profile_files.with_measured_profiles`) and planned with its Up phase at its
    p95 (`scheduler.cassini.pacing.group_problem`); the plan's Up and iteration times are the
    measured means (the grid's padding left out).

    >>> p = pair_plan(("resnet50", "resnet50"))
    >>> p.jobs, round(p.score, 3), round(p.shift_ms, 1)
    (('resnet50-0', 'resnet50-1'), 0.985, 30.5)
    """
    from scheduler.cassini.pacing import best_option, group_problem
    from scheduler.cassini.plans import plan_link
    from scheduler.workloads.profile_files import load_profiles_with_periods, with_measured_profiles
    from scheduler.workloads.profiles import load_models, normalize_model_name, profiles_from_list

    specs = with_measured_profiles(load_models(None), profiles)
    planned = profiles_from_list(",".join(models), WORKERS, specs)
    link = plan_link(planned, nic_gbps, PRECISION_DEG, "auto", pace=True)
    shared = ("link", "link")
    own_grid = best_option(
        group_problem(
            {shared: tuple(p.name for p in planned)}, {p.name: p for p in planned},
            {shared: nic_gbps}, PRECISION_DEG, "auto", {}, pace=True,
        ),
        pace=True,
    )  # fmt: skip
    own_score = own_grid.link_scores[shared]
    jobs = (f"{models[0]}-0", f"{models[1]}-1")
    names = [p.name for p in planned]
    shifts = link.solution.shifts_ms
    measured = {
        (normalize_model_name(prof.model), prof.workers): prof
        for prof, _ in (load_profiles_with_periods(profiles).values() if profiles else ())
    }
    by_job = {
        j: measured.get((normalize_model_name(p.model), p.workers), p)
        for j, p in zip(jobs, planned, strict=True)
    }
    return PairPlan(
        key="+".join(models),
        jobs=jobs,
        models=models,
        score=float(own_score),
        shift_ms=float(shifts.get(names[1], 0.0) - shifts.get(names[0], 0.0)),
        periods_ms={j: float(link.periods_ms[n]) for j, n in zip(jobs, names, strict=True)},
        up_ms={j: sum(ph.duration_ms for ph in p.phases if ph.gbps > 0) for j, p in by_job.items()},
        iteration_ms={j: p.iteration_ms for j, p in by_job.items()},
    )


def link_share(plan: PairPlan, aligned_mean_ms: Mapping[str, float]) -> float:
    """Each job's share of the link while both communicate, averaged over the two jobs:
    its profile's Up time over the time its Up phases took aligned (iteration minus Down).

    >>> from dataclasses import replace
    >>> p = replace(pair_plan(("resnet50", "resnet50")), up_ms={"a": 50.0, "b": 50.0},
    ...             iteration_ms={"a": 100.0, "b": 100.0})
    >>> link_share(p, {"a": 150.0, "b": 150.0})
    0.5
    """
    shares = []
    for job, up in plan.up_ms.items():
        down = plan.iteration_ms[job] - up
        took = aligned_mean_ms[job] - down
        shares.append(up / took if took > 0 else float("nan"))
    return sum(shares) / len(shares)


def ratio(base: float, variant: float) -> float:
    """base / variant; inf when only the base has any, 1 when neither has."""
    if variant > 0:
        return base / variant
    return float("inf") if base > 0 else 1.0
