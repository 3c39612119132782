"""How does the transport share one bottleneck between 2, 3 or 4 jobs' Up phases, measured?

The fluid simulator shares a link max-min (ideal); the issue measured
kernel TCP on the WRED-marked fabric running jobs that share links 19-25%
slower than that predicts. `measure_sharing` runs k jobs of one model
(2 workers each) whose rings all cross one ToR uplink (`tor1->agg1` of the
default testbed, `SHARING_PLACEMENTS`), unpaced and started together, and
reads from the 10 ms samples of that link (pure: `sharing_figures`):

- utilisation: the link's total share in samples where exactly n jobs were
  Up (each above half its fair share of the link, `measure_run`);
- fairness: Jain's index of the n jobs' shares in those samples;
- stretch: each job's Up phase on the shared link over its Up phase alone
  (the measured profile's mean).

The sharing model file (`write_sharing_model`) holds these per n;
`scheduler.workloads.sharing_model` reads it for the fluid simulator (`simulate` and
`emulate --sharing FILE`): a link n jobs share offers capacity x factor(n).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from emulation.emulate.telemetry_series import Telemetry, job_starts, sample_interval
from emulation.jobs.records import IterationRecord
from emulation.jobs.telemetry_rows import OVERLAP_SHARE
from topologies.outputs import write_file

from .phases import per_iteration, up_segments

if TYPE_CHECKING:
    from emulation.fabric.emulated import EmulatedFabric
    from emulation.jobs.run_settings import RunSettings

SHARED_LINK = "tor1->agg1"
# (checked with `emulate.plan.shared_links` on cassini-testbed) every ring crosses
# tor1->agg1; the first two share nothing else
SHARING_PLACEMENTS: tuple[tuple[str, str], ...] = (
    ("s01", "s05"),
    ("s03", "s13"),
    ("s02", "s21"),
    ("s04", "s15"),
)


@dataclass(frozen=True)
class ShareFigures:
    """What samples with exactly `active` jobs Up on the link showed."""

    active: int
    samples: int
    utilisation: float  # mean total share of the link (0-1)
    fairness: float  # mean Jain index of the active jobs' shares


def jain(values: np.ndarray) -> float:
    """Jain's fairness index: 1 when equal, 1/n when one takes all.

    >>> jain(np.array([1.0, 1.0])), jain(np.array([1.0, 0.0]))
    (1.0, 0.5)
    """
    total = float(values.sum())
    if total <= 0:
        return 1.0
    return round(total**2 / (values.size * float((values**2).sum())), 6)


def sharing_figures(share: np.ndarray, threshold: float = OVERLAP_SHARE) -> list[ShareFigures]:
    """Per number of jobs Up at once (each above `threshold`), the samples' mean total
    utilisation and fairness; `share[j, i]` is job j's share of the link in sample i.

    >>> s = np.array([[0.9, 0.5, 0.6, 0.0], [0.0, 0.4, 0.3, 0.0]])
    >>> [(f.active, f.samples, f.utilisation, f.fairness) for f in sharing_figures(s)]
    [(1, 1, 0.9, 1.0), (2, 2, 0.9, 0.943903)]

    (Two Up: 0.81 / (2 x 0.41) = 0.987805 and 0.81 / (2 x 0.45) = 0.9, mean 0.943903.)
    """
    up = share > threshold
    count = up.sum(axis=0)
    out = []
    for n in range(1, share.shape[0] + 1):
        cols = np.flatnonzero(count == n)
        if cols.size == 0:
            continue
        totals = share[:, cols].sum(axis=0)
        fair = [jain(share[up[:, c], c]) for c in cols]
        out.append(
            ShareFigures(
                n, int(cols.size), round(float(totals.mean()), 6), round(float(np.mean(fair)), 6)
            )
        )
    return out


@dataclass(frozen=True)
class SharingRun:
    """k jobs through one link: the figures by jobs Up at once, each job's Up stretch."""

    jobs: int
    link: str
    by_active: tuple[ShareFigures, ...]
    up_ms: Mapping[str, float]  # each job's mean Up phase on the shared link
    stretch: float  # mean over jobs of up_ms / the Up phase alone


def measure_run(
    records: Sequence[IterationRecord],
    telemetry: Telemetry,
    link: str,
    capacity_gbps: float,
    alone_up_ms: float,
    warmup: int = 1,
) -> SharingRun:
    """One run's figures (module docstring); `alone_up_ms` the job's Up phase alone.

    (our choice) A sample is a distinct `time_s` of the run (as the report's figures
    take them), a job's share in it its bytes over what the link carries in one
    sampling period; a job is Up in a sample when it has more than half its fair
    share, 1 / (2 k) of the link.
    """
    interval = sample_interval(telemetry.time_s)
    starts = job_starts(records)
    jobs = sorted(starts)
    times = np.unique(telemetry.time_s)
    on_link = telemetry.link == link
    slot = np.searchsorted(times, telemetry.time_s[on_link])
    share = np.zeros((len(jobs), times.size))
    for j, job in enumerate(jobs):
        mine = telemetry.job[on_link] == job
        np.add.at(share[j], slot[mine], telemetry.bytes[on_link][mine] * 8.0)
    share /= interval * capacity_gbps * 1e9
    threshold = 1.0 / (2 * len(jobs))
    up_ms: dict[str, float] = {}
    for j, job in enumerate(jobs):
        segments = up_segments(times, share[j], interval, threshold=threshold)
        phases = per_iteration(segments, starts[job].starts_s[warmup:])
        up_ms[job] = round(float(phases.up_ms.mean()), 3) if phases.up_ms.size else float("nan")
    stretch = float(np.nanmean([v / alone_up_ms for v in up_ms.values()]))
    figures = tuple(sharing_figures(share, threshold))
    return SharingRun(len(jobs), link, figures, up_ms, round(stretch, 4))


def measure_sharing(
    fabric: EmulatedFabric,
    model: str,
    counts: Sequence[int],
    settings: RunSettings,
    out_dir: str | Path,
    alone_up_ms: float,
) -> list[SharingRun]:
    """For each k of `counts`, k jobs of `model` (2 workers each, `SHARING_PLACEMENTS`)
    through `SHARED_LINK`, unpaced, started together; run folders under out_dir/k-jobs."""
    from emulation.emulate.runner import link_rates
    from emulation.emulate.telemetry_series import read_telemetry
    from emulation.jobs.launch import JobPlan
    from emulation.jobs.run_folder import write_run
    from emulation.jobs.supervisor import run_schedule
    from emulation.jobs.telemetry_rows import TELEMETRY_FILE
    from scheduler.workloads.profiles import build_profile

    topo = fabric.topo
    rates = link_rates(topo, fabric.profile.scale)
    profile = build_profile(model, 2, nic_gbps=topo.nic_gbps())
    out = []
    for k in counts:
        if not 1 < k <= len(SHARING_PLACEMENTS):
            raise ValueError(f"{k} jobs: between 2 and {len(SHARING_PLACEMENTS)}")
        jobs = [
            JobPlan(f"{model}-{i}", model, servers, profile)
            for i, servers in enumerate(SHARING_PLACEMENTS[:k])
        ]
        folder = Path(out_dir) / f"{k}-jobs"
        result = run_schedule(fabric, jobs, settings, folder)
        write_run(result, folder)
        if result.interrupted:
            raise KeyboardInterrupt
        telemetry = read_telemetry([folder / TELEMETRY_FILE])
        out.append(
            measure_run(result.records, telemetry, SHARED_LINK, rates[SHARED_LINK], alone_up_ms)
        )
    return out


def write_sharing_model(path: str | Path, model: str, runs: Sequence[SharingRun]) -> Path:
    """The sharing model: per k jobs on the link, the figures by jobs Up at once."""
    doc = {
        "model": model,
        "link": SHARED_LINK,
        "up_rule": "a job is Up in a sample with more than 1 / (2 k) of the link, k jobs",
        "runs": [asdict(r) for r in runs],
    }
    return write_file(path, json.dumps(doc, indent=1) + "\n", "--sharing-out", rescue=True)
