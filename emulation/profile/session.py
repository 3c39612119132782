"""How are models profiled from scratch: a fabric of their own, each model alone, one file?

`profile_on_fabric` brings an `EmulatedFabric` up for the topology, runs
`measure.profile_models` on it and tears it down (also on Ctrl-C or
SIGTERM); `write_profiles` writes the profiles file `load_profiles_file`
reads (with the optional `period_ms` and `measured` fields).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .measure import MeasuredProfile, profile_models

if TYPE_CHECKING:
    from emulation.jobs.run_settings import RunSettings
    from scheduler.profiles import ModelSpec


def profile_on_fabric(
    topology: str,
    groups: Mapping[int, Sequence[str]],
    settings: RunSettings,
    runs_dir: str | Path,
    scale: float,
    specs: Mapping[str, ModelSpec] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[MeasuredProfile]:
    """Every model of `groups` ({workers: models}) alone on one fresh fabric."""
    from emulation.fabric import EmulatedFabric
    from emulation.fabric_options import FabricOptions
    from topologies.library import load_topology

    topo = load_topology(topology)
    out: list[MeasuredProfile] = []
    with EmulatedFabric(topo, FabricOptions(scale=scale)) as fabric:
        for workers, models in sorted(groups.items()):
            where = Path(runs_dir) / f"{workers}-workers"
            out += profile_models(fabric, models, workers, settings, where, specs, progress)
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
    target = Path(path)
    target.write_text(json.dumps(entries, indent=1) + "\n")
    return target
