"""How are models profiled from scratch: a fabric of their own, each model alone, one file?

`profile_on_fabric` brings an `EmulatedFabric` up for the topology, runs
`measure.profile_models` on it and tears it down (also on Ctrl-C or
SIGTERM); `write_profiles` writes the profiles file `load_profiles_file`
reads (with the optional `period_ms` and `measured` fields);
`profile_into` does both into one folder, and `profile_trace` for the
models of an emulation's trace (`cassini emulate --profile-first`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from topologies.outputs import write_file

from .measure import MeasuredProfile, profile_models

if TYPE_CHECKING:
    from emulation.emulate.runner import EmulateSettings
    from emulation.fabric.emulated import EmulatedFabric
    from emulation.jobs.run_settings import RunSettings
    from scheduler.workloads.profiles import ModelSpec


def profile_on_fabric(
    topology: str,
    groups: Mapping[int, Sequence[str]],
    settings: RunSettings,
    runs_dir: str | Path,
    scale: float,
    specs: Mapping[str, ModelSpec] | None = None,
    progress: Callable[[str], None] | None = None,
    then: Callable[[EmulatedFabric, list[MeasuredProfile]], None] | None = None,
) -> list[MeasuredProfile]:
    """Every model of `groups` ({workers: models}) alone on one fresh fabric; `then` runs
    on the same fabric after, with the profiles (the sharing measurement)."""
    from emulation.fabric.emulated import EmulatedFabric
    from emulation.fabric.options import FabricOptions
    from topologies.library import load_topology

    topo = load_topology(topology)
    out: list[MeasuredProfile] = []
    with EmulatedFabric(topo, FabricOptions(scale=scale)) as fabric:
        for workers, models in sorted(groups.items()):
            where = Path(runs_dir) / f"{workers}-workers"
            out += profile_models(fabric, models, workers, settings, where, specs, progress)
        if then is not None:
            then(fabric, out)
    return out


def write_profiles(path: str | Path, measured: Sequence[MeasuredProfile]) -> Path:
    """The profiles file; a model measured at several worker counts is named MODEL-wN
    after its first count (`load_profiles_file` refuses duplicate names)."""
    seen: set[str] = set()
    entries = []
    for m in measured:
        entry = m.to_dict()
        if entry["name"] in seen:
            entry["name"] = f"{m.model}-w{m.workers}"
        seen.add(entry["name"])
        entries.append(entry)
    # a run's worth of measurement: kept in the temporary folder if `path` has no room
    return write_file(path, json.dumps(entries, indent=1) + "\n", rescue=True)


def trace_groups(
    settings: EmulateSettings, specs: Mapping[str, ModelSpec]
) -> tuple[dict[int, list[str]], list[str]]:
    """The trace's models to profile, by worker count, and what is left derived: a job of one
    worker (nothing to measure on a link) or of a model that is not data parallel (our
    rule reads one Up phase per iteration)."""
    from scheduler.workloads.traces import resolve_trace
    from topologies.library import load_topology

    topo = load_topology(settings.topology)
    trace, _ = resolve_trace(
        settings.trace, topo.total_gpus(), settings.jobs, seed=settings.seed, models=specs
    )
    groups: dict[int, list[str]] = {}
    skipped: list[str] = []
    for job in trace:
        if job.workers < 2 or specs[job.model].parallelism != "data":
            skipped.append(f"{job.model}:{job.workers}")
            continue
        mine = groups.setdefault(job.workers, [])
        if job.model not in mine:
            mine.append(job.model)
    return groups, sorted(set(skipped))


def profile_trace(
    settings: EmulateSettings,
    out_dir: str | Path,
    iterations: int,
    progress: Callable[[str], None] | None = None,
) -> Path | None:
    """`emulate --profile-first`: the trace's models profiled alone on a fabric of their
    own (the emulation's topology, scale and transport), written to out_dir/profiles.json
    (their runs under out_dir/profiling/); None when no job of the trace can be measured."""
    from emulation.jobs.run_settings import RunSettings
    from scheduler.workloads.profiles import load_models

    specs = load_models(settings.models)
    groups, skipped = trace_groups(settings, specs)
    if progress is not None and skipped:
        progress(f"left derived (one worker or not data parallel): {', '.join(skipped)}")
    if not groups:
        return None
    run = RunSettings(iterations=iterations, transport=settings.transport)
    return profile_into(out_dir, settings.topology, groups, run, settings.scale, specs, progress)


def profile_into(
    out_dir: str | Path,
    topology: str,
    groups: Mapping[int, Sequence[str]],
    settings: RunSettings,
    scale: float,
    specs: Mapping[str, ModelSpec] | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """`profile_on_fabric` with its runs under out_dir/profiling/ and the profiles
    written to out_dir/profiles.json (`emulate --profile-first`, `reproduce`'s cells)."""
    folder = Path(out_dir)
    measured = profile_on_fabric(
        topology, groups, settings, folder / "profiling", scale, specs, progress
    )
    return write_profiles(folder / "profiles.json", measured)
