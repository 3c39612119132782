"""What is a model's profile on this fabric: its iteration time and Up/Down phases, measured?

The paper profiles every model alone on its testbed for a few iterations
and schedules with those profiles. `profile_models` does that here: each
model runs alone (unpaced, no agent grid) on the running fabric through the
same call `cassini fabric run` makes (`supervisor.run_schedule`), its run
folder is kept, and `measure` turns the run's records and 10 ms samples into
a `MeasuredProfile` (pure: `phases` finds the Up phases).

What is measured, per model (iterations before `WARMUP` left out, as the
shift-case benchmark does: the connections' slow start):

- iteration time: the job's start-to-start intervals (`iterations.csv`),
  what a grid must leave room for; mean and spread;
- Up phase: on the job's busiest link (most bytes over the run), per
  iteration, its duration and its start offset within the iteration, with
  their spread; its rate is the bytes in Up samples over their time, scaled
  back to the profile's units (divided by the emulation's scale S);
- the grid period (`phases.grid_period_ms`, our rule) the agents should
  keep, from every measured iteration: the emulation runs on the machine it
  was profiled on, so the spread a starved host adds is the job's spread
  there too. The iterations the host witness calls starved (a replica woke
  more than `HOST_LATE_MS` late, or an Up phase ran below `SLOW_PACE` of
  its pacing rate, alone) are counted, and `calm_grid` leaves them out
  (VGG19, 2 workers, 18 iterations on a machine at load 8: p95 278 ms with
  its 4 starved ones, 229 without, median 216). Measured on the shift-case
  pair (benchmarks README): the calm grid, 218.5 ms, did not hold the shift
  on a machine at load 17-22; the full one is the default.

The profile written (`to_profile`) is Down until the mean Up offset, Up for
the mean Up duration at the measured rate, Down for the rest of the mean
iteration time: phases that sum to the measured mean iteration time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from emulation.emulate.telemetry_series import Telemetry, job_starts, sample_interval
from emulation.jobs.records import IterationRecord
from scheduler.workloads.profile_files import profile_to_dict
from scheduler.workloads.types import Phase, Profile
from scheduler.workloads.up_slack import up_slack
from topologies.model import Topology

from .phases import GRID_PERCENTILE, Spread, grid_period_ms, per_iteration, up_segments

if TYPE_CHECKING:
    from emulation.fabric.emulated import EmulatedFabric
    from emulation.jobs.run_settings import RunSettings
    from scheduler.workloads.profiles import ModelSpec

WARMUP = 1  # iterations left out (our choice, as benchmarks/bench_shift_cases.py)


@dataclass(frozen=True)
class MeasuredProfile:
    """One model's profile as measured alone on the fabric (module docstring)."""

    model: str
    workers: int
    iteration_ms: Spread  # start to start
    up_ms: Spread
    up_offset_ms: Spread  # the Up phase's start within its iteration
    up_gbps: float  # unscaled: the profile's units
    period_ms: float  # the agents' grid period (phases.grid_period_ms)
    link: str  # the busiest link the phases were read on
    iterations: int  # iterations measured (after the warm-up)
    threshold_share: float  # utilisation above which a sample counted as Up
    interval_ms: float  # the samples' period
    batch_size: int = 0
    starved: int = 0  # iterations a replica woke late in (left out of the grid period)

    def to_profile(self) -> Profile:
        """The profile (phases summing to the mean iteration time) the scheduler reads."""
        total = self.iteration_ms.mean
        offset = min(self.up_offset_ms.mean, total)
        up = min(self.up_ms.mean, total - offset)
        phases = tuple(
            p
            for p in (Phase(offset, 0.0), Phase(up, self.up_gbps), Phase(total - offset - up, 0.0))
            if p.duration_ms > 1e-6
        )
        profile = Profile(
            name=self.model,
            model=self.model,
            parallelism="data",
            workers=self.workers,
            iteration_ms=sum(p.duration_ms for p in phases),
            phases=phases,
            batch_size=self.batch_size,
        )
        return replace(profile, up_slack_ms=up_slack(profile, self.up_ms.p95, self.interval_ms))

    def to_dict(self) -> dict[str, Any]:
        """The profiles-file entry: `load_profiles_file`'s fields plus the optional
        `period_ms` and `measured` (the spread), which older readers ignore."""
        return profile_to_dict(self.to_profile()) | {
            "period_ms": self.period_ms,
            "measured": {
                "iteration_ms": self.iteration_ms.as_dict(),
                "up_ms": self.up_ms.as_dict(),
                "up_offset_ms": self.up_offset_ms.as_dict(),
                "up_gbps": round(self.up_gbps, 6),
                "link": self.link,
                "iterations": self.iterations,
                "threshold_share": round(self.threshold_share, 6),
                "interval_ms": self.interval_ms,
                "starved_iterations": self.starved,
                "grid_rule": f"p{GRID_PERCENTILE:g} of the iteration times alone",
            },
        }


class NotMeasurable(ValueError):
    """The run left too little to measure (no iterations, no samples, no Up phase)."""


def busiest_link(telemetry: Telemetry, job: str) -> str:
    """The link that carried most of `job`'s bytes.

    >>> busiest_link(Telemetry.of([(0.01, "a", "j", 5, 1, 0), (0.01, "b", "j", 9, 1, 0),
    ...                            (0.02, "a", "j", 5, 1, 0), (0.02, "c", "k", 99, 1, 0)]), "j")
    'a'
    """
    mine = telemetry.job == job
    if not np.any(mine):
        raise NotMeasurable(f"job {job}: no telemetry samples (was the switch sampling?)")
    links, where = np.unique(telemetry.link[mine], return_inverse=True)
    totals = np.bincount(where, weights=telemetry.bytes[mine].astype(float))
    return str(links[int(np.argmax(totals))])


def job_series(
    telemetry: Telemetry, job: str, link: str, capacity_gbps: float, interval_s: float
) -> tuple[np.ndarray, np.ndarray]:
    """The job's utilisation of `link` per sample, every sample period from the first
    sample to the last (a sample without a row is zero).

    >>> t = Telemetry.of([(0.01, "l", "j", 1250, 1, 0), (0.03, "l", "j", 625, 1, 0)])
    >>> [a.tolist() for a in job_series(t, "j", "l", 1e-3, 0.01)]
    [[0.01, 0.02, 0.03], [1.0, 0.0, 0.5]]
    """
    mine = (telemetry.job == job) & (telemetry.link == link)
    times = telemetry.time_s[mine]
    first = float(telemetry.time_s.min())
    slots = np.rint((times - first) / interval_s).astype(np.int64)
    share = np.zeros(int(slots.max()) + 1 if slots.size else 0)
    full = interval_s * capacity_gbps * 1e9 / 8
    np.add.at(share, slots, telemetry.bytes[mine] / full)
    grid = np.round(first + np.arange(share.size) * interval_s, 9)
    return grid, share


def measure(
    model: str,
    workers: int,
    records: Sequence[IterationRecord],
    telemetry: Telemetry,
    link_gbps: Mapping[str, float],
    scale: float,
    job: str | None = None,
    warmup: int = WARMUP,
    calm_grid: bool = False,
) -> MeasuredProfile:
    """The measured profile of job `job` (default: named `model`) from its run alone.

    `link_gbps` is each link's emulated capacity (Gbit/s after scaling, named as the
    telemetry's links); `scale` the emulation's S, to report the rate unscaled;
    `calm_grid` leaves the starved iterations out of the grid period (module docstring).
    """
    name = job or model
    starts = job_starts([r for r in records if r.job == name]).get(name)
    if starts is None or starts.starts_s.size < warmup + 3:
        raise NotMeasurable(f"job {name}: fewer than {warmup + 3} iterations recorded")
    kept = starts.starts_s[warmup:]
    link = busiest_link(telemetry, name)
    interval = sample_interval(telemetry.time_s)
    times, share = job_series(telemetry, name, link, link_gbps[link], interval)
    segments = up_segments(times, share, interval)
    phases = per_iteration(segments, kept)
    if phases.up_ms.size == 0:
        raise NotMeasurable(f"job {name}: no Up phase on {link} above {segments.threshold:.2f}")
    lengths = np.diff(kept) * 1e3
    starved = starved_intervals(records, name, warmup, lengths.size)
    enough = np.count_nonzero(~starved) * 2 >= lengths.size
    calm = lengths[~starved] if calm_grid and enough else lengths
    rate = float(np.average(phases.share, weights=phases.up_ms)) * link_gbps[link] / scale
    return MeasuredProfile(
        model=model,
        workers=workers,
        iteration_ms=Spread.of(lengths),
        up_ms=Spread.of(phases.up_ms),
        up_offset_ms=Spread.of(phases.offset_ms),
        up_gbps=round(rate, 6),
        period_ms=grid_period_ms(calm),
        link=link,
        iterations=int(lengths.size),
        threshold_share=segments.threshold,
        interval_ms=round(interval * 1e3, 3),
        starved=int(np.count_nonzero(starved)),
    )


def starved_intervals(
    records: Sequence[IterationRecord], job: str, warmup: int, count: int
) -> np.ndarray:
    """Per measured interval (iteration `warmup + i` to the next), was a replica of `job`
    starved in it, by the host witness: it woke more than `HOST_LATE_MS` late, or an Up
    phase sent below `SLOW_PACE` of its pacing rate (alone, nothing is in its way)? That
    is the machine's spread, not the job's.

    >>> r = [IterationRecord("j", "m", 0, k, 0.0, 1.0, 0, 0.0, 0.0, False,
    ...                      late_max_ms=9.0 if k == 2 else 0.5,
    ...                      up_pace=(0.5,) if k == 4 else (0.9,)) for k in range(6)]
    >>> starved_intervals(r, "j", 1, 4).tolist()
    [False, True, False, True]
    """
    from emulation.jobs.witness_limits import HOST_LATE_MS, SLOW_PACE

    late = {
        r.iteration
        for r in records
        if r.job == job
        and (
            (r.late_max_ms is not None and r.late_max_ms > HOST_LATE_MS)
            or any(p < SLOW_PACE for p in r.up_pace or ())
        )
    }
    iterations = sorted({r.iteration for r in records if r.job == job})[warmup : warmup + count]
    return np.array([k in late for k in iterations] + [False] * (count - len(iterations)))


def spread_servers(topo: Topology, workers: int) -> tuple[str, ...]:
    """`workers` servers taken one per ToR in turn, so the ring crosses the ToRs' uplinks
    as a placed job's does (a job alone inside one rack would never leave its ToR).

    >>> from topologies.library import load_topology
    >>> spread_servers(load_topology("cassini-testbed"), 3)
    ('s01', 's05', 's09')
    """
    names = set(topo.server_names())
    by_switch: dict[str, list[str]] = {}
    for link in topo.links:
        for server, switch in ((link.a, link.b), (link.b, link.a)):
            if server in names and switch not in names:
                by_switch.setdefault(switch, []).append(server)
    columns = [sorted(s) for _, s in sorted(by_switch.items())]
    order = [c[i] for i in range(max(map(len, columns), default=0)) for c in columns if i < len(c)]
    if workers > len(order):
        raise ValueError(f"{workers} workers do not fit the {len(order)} servers of {topo.name}")
    return tuple(order[:workers])


def profile_models(
    fabric: EmulatedFabric,
    models: Sequence[str],
    workers: int,
    settings: RunSettings,
    out_dir: str | Path,
    specs: Mapping[str, ModelSpec] | None = None,
    progress: Callable[[str], None] | None = None,
    calm_grid: bool = False,
) -> list[MeasuredProfile]:
    """Each model alone on `fabric` for `settings.iterations` iterations, measured; each
    run's folder (what `fabric run` writes) is kept under `out_dir/<model>/`."""
    from emulation.emulate.runner import link_rates
    from emulation.emulate.telemetry_series import read_telemetry
    from emulation.jobs.launch import JobPlan
    from emulation.jobs.run_folder import write_run
    from emulation.jobs.supervisor import run_schedule
    from emulation.jobs.telemetry_rows import TELEMETRY_FILE
    from scheduler.workloads.profiles import build_profile, normalize_model_name

    topo = fabric.topo
    servers = spread_servers(topo, workers)
    rates = link_rates(topo, fabric.profile.scale)
    out: list[MeasuredProfile] = []
    for model in models:
        key = normalize_model_name(model)
        derived = build_profile(key, workers, nic_gbps=topo.nic_gbps(), models=specs)
        job = JobPlan(name=key, model=key, servers=servers, profile=derived)
        folder = Path(out_dir) / key
        if progress is not None:
            progress(f"{key}: {workers} workers on {', '.join(servers)}")
        result = run_schedule(fabric, [job], settings, folder)
        write_run(result, folder)
        if result.interrupted:
            raise KeyboardInterrupt
        if result.error:
            raise RuntimeError(f"profiling {key}: {result.error}")
        telemetry = read_telemetry([folder / TELEMETRY_FILE])
        scale = fabric.profile.scale
        found = measure(key, workers, result.records, telemetry, rates, scale, calm_grid=calm_grid)
        out.append(MeasuredProfile(**{**found.__dict__, "batch_size": derived.batch_size}))
    return out
