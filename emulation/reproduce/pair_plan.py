"""Which schedules does a pair of jobs on one shared link run: aligned, and shifted by Cassini?

Shared by the simulator's and the emulation's cells, so both columns run the
same two schedules. The shift and the periods are what `cassini compat`
computes for the pair (`scheduler.cassini.plan_link`, 5 degrees, paced).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from scheduler.types import Phase, Profile

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
    (`scheduler.profiles.with_measured_profiles`), and the plan's Up and iteration
    times are the measured means (the grid's padding left out).

    >>> p = pair_plan(("resnet50", "resnet50"))
    >>> p.jobs, round(p.score, 3), round(p.shift_ms, 1)
    (('resnet50-0', 'resnet50-1'), 1.0, 49.8)
    """
    from scheduler.cassini import best_option, plan_link
    from scheduler.profiles import (
        load_models,
        load_profiles_with_periods,
        normalize_model_name,
        profiles_from_list,
        with_measured_profiles,
    )

    specs = with_measured_profiles(load_models(None), profiles)
    planned = profiles_from_list(",".join(models), WORKERS, specs)
    if profiles is not None:
        long_up = _up_p95(profiles)
        planned = [
            _with_up(p, long_up.get((normalize_model_name(p.model), p.workers))) for p in planned
        ]
    link = plan_link(planned, nic_gbps, PRECISION_DEG, "auto", pace=True)
    shared = ("link", "link")
    own_grid = best_option(
        {shared: tuple(p.name for p in planned)}, {p.name: p for p in planned},
        {shared: nic_gbps}, PRECISION_DEG, "auto", {}, pace=True,
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


def _up_p95(path: str | Path) -> dict[tuple[str, int], float]:
    """Each measured entry's Up phase at its 95th percentile plus one sample interval
    (`cassini profile`'s `measured.up_ms.p95` and `interval_ms`), by (model, workers):
    a phase is read as whole samples above a threshold, so one read as 140 ms on 10 ms
    samples lasted up to 150."""
    from scheduler.profiles import normalize_model_name
    from topologies.datafile import read_data_file

    out = {}
    for raw in read_data_file(path, "profiles"):
        measured = raw.get("measured") or {}
        p95 = measured.get("up_ms", {}).get("p95")
        interval = measured.get("interval_ms", 0.0)
        if isinstance(p95, (int, float)) and isinstance(interval, (int, float)):
            key = (normalize_model_name(str(raw["model"])), int(raw["workers"]))
            out[key] = float(p95) + float(interval)
    return out


def _with_up(profile: Profile, up_ms: float | None) -> Profile:
    """`profile` with its one Up phase `up_ms` long, the Down phase before it shortened by
    as much, so the iteration keeps its time (None, or a profile of other shape: as is).

    (our choice) The pair is planned with each measured Up phase at its p95 (plus the
    samples' resolution, `_up_p95`), as the grid period is the iterations' p95
    (`emulation.profile.phases`): a grid held only by the mean Up phase is overrun
    whenever an Up phase runs long. Measured: two VGG19s (Up 139.4 ms mean, 150.1 ms
    p95, on 10 ms samples) on the 285.4 ms grid their means hold re-aligned 42 times a
    minute and ran 361 ms; on 300 ms, none, 303 ms. A profile whose p95 read 140.1 ms
    gave a 280 ms grid: 55 re-alignments a minute, 381 ms.

    >>> from scheduler.types import Phase
    >>> p = Profile("v", "v", "data", 4, 260.0, (Phase(120.0, 0.0), Phase(140.0, 45.0)))
    >>> [(ph.duration_ms, ph.gbps) for ph in _with_up(p, 150.0).phases]
    [(110.0, 0.0), (150.0, 45.0)]
    """
    ups = [i for i, ph in enumerate(profile.phases) if ph.gbps > 0]
    if up_ms is None or len(ups) != 1 or ups[0] == 0:
        return profile
    i = ups[0]
    before, up = profile.phases[i - 1], profile.phases[i]
    grow = min(max(up_ms - up.duration_ms, 0.0), before.duration_ms)
    phases = list(profile.phases)
    phases[i - 1] = Phase(before.duration_ms - grow, 0.0)
    phases[i] = Phase(up.duration_ms + grow, up.gbps)
    return replace(profile, phases=tuple(ph for ph in phases if ph.duration_ms > 1e-9))


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
