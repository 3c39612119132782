"""Which files does one schedule's run leave in its folder?

The replicas write their own, per worker, under `REPLICA_FOLDER` while they
run; `write_run` adds the run's tables, summary and counter series after.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from controlplane.telemetry import TelemetryLog
from scheduler.workloads.profile_files import profile_to_dict

from .records import csv_rows
from .run_result import RunResult
from .telemetry_rows import write_series

REPLICA_FOLDER = "replicas"  # per worker: JOB-wW.jsonl (records) and JOB-wW.log (stderr)


def write_run(result: RunResult, folder: str | Path) -> list[Path]:
    """iterations.csv, summary.json, ecn.csv / ecn-links.csv, telemetry.csv, queues.csv
    (queue_classes.csv is written by the run itself, under a class policy),
    schedule.json, profiles.json and emulation-profile.txt into `folder` (the replicas'
    own files are already there)."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "iterations.csv", out / "summary.json", out / "schedule.json"]
    with written[0].open("w", newline="") as fh:
        csv.writer(fh).writerows(csv_rows(result.records))
    written[1].write_text(json.dumps(result.summary(), indent=1) + "\n")
    written[2].write_text(json.dumps(result.schedule(), indent=1) + "\n")
    profiles = out / "profiles.json"
    profiles.write_text(
        json.dumps([profile_to_dict(j.profile) | {"name": j.name} for j in result.jobs], indent=1)
        + "\n"
    )
    emulation = out / "emulation-profile.txt"
    emulation.write_text(result.emulation_profile + "\n")
    log = TelemetryLog(list(result.ports), list(result.links))
    series = write_series(out, result.telemetry, result.queues)
    return [*written, profiles, emulation, *log.write(out / "ecn.csv"), *series]
