"""What do the report's CSV files hold: every iteration and the counter series, per scheduler?"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import asdict, fields
from pathlib import Path

from emulation.jobs.records import COLUMNS

from .results import SchedulerRun


def write_iterations(runs: Sequence[SchedulerRun], path: Path) -> Path:
    """iterations.csv: every worker's iteration record, with its scheduler first."""
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["scheduler", *COLUMNS])
        for run in runs:
            for rec in run.records:
                values = asdict(rec)
                w.writerow(
                    [run.scheduler, *("" if values[c] is None else values[c] for c in COLUMNS)]
                )
    return path


def write_series(runs: Sequence[SchedulerRun], path: Path, cls: type, attr: str) -> Path:
    """ecn.csv or ecn-links.csv: each run's `telemetry.<attr>` rows (`cls`), scheduler first."""
    names = [f.name for f in fields(cls)]
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["scheduler", *names])
        w.writeheader()
        for run in runs:
            for row in getattr(run.telemetry, attr):
                w.writerow({"scheduler": run.scheduler, **asdict(row)})
    return path
