"""What did each job send on each link per 10 ms sample, and did the jobs take turns?

Pure functions over the switch's per-(egress port, job class) samples
(`controlplane.job_samples.JobSample`):

- `series_rows`: the rows of a run's `telemetry.csv` (`time_s, link, job,
  bytes, packets, ce_marks`: a row per sample, link and job with traffic on
  it in that sample) and `queues.csv` (`time_s, link, max_depth_cells`: a
  row per sample and link that sent or queued in it; a missing row is zero).
  `link` is named as in `ecn-links.csv` (`tor1->agg1`: the direction a->b
  measured at a's egress port toward b), `job` as in summary.json, `other`
  for traffic of no job. `time_s` is the wall clock in seconds (Unix
  epoch) when the sample was taken (the end of its interval), the clock of
  `iterations.csv`'s `start_ms`/`end_ms` divided by 1000. The report reads
  these files back with `emulation.emulate.telemetry_series`.
- `overlap`: per link, the fraction of its busy samples in which two or more
  jobs each used more than a quarter of its capacity (issue 25, section 3).
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import astuple, dataclass, fields
from pathlib import Path
from typing import Any

from controlplane.job_classes import OTHER
from controlplane.job_samples import JobSample
from topologies.chip_mapping import ChipMap

TELEMETRY_FILE = "telemetry.csv"
QUEUES_FILE = "queues.csv"
# (our choice) What "a job used the link" means for the overlap: more than a
# quarter of its capacity over the sample, the threshold; two jobs
# above it at once had their Up phases on the link together.
OVERLAP_SHARE = 0.25


@dataclass(frozen=True)
class TelemetryRow:
    """One row of telemetry.csv."""

    time_s: float
    link: str
    job: str
    bytes: int
    packets: int
    ce_marks: int


@dataclass(frozen=True)
class QueueRow:
    """One row of queues.csv."""

    time_s: float
    link: str
    max_depth_cells: int


def link_names(chip: ChipMap) -> dict[int, str]:
    """Chip port -> the link direction it sends on, named as ecn-links.csv names it
    (`controlplane.telemetry.link_deltas`: a->b at a's egress port toward b)."""
    names = {port: f"{a}->{b}" for (a, b), port in chip.link_ports.items()}
    for server, port in chip.server_port.items():
        names[port] = f"{chip.switch_of_port[port]}->{server}"
    return names


def series_rows(
    samples: Iterable[JobSample], links: Mapping[int, str], class_names: Sequence[str]
) -> tuple[list[TelemetryRow], list[QueueRow]]:
    """The telemetry.csv and queues.csv rows of `samples` (ports off every link are left
    out; classes of one name, `other` and the unused ones, are summed).

    >>> s = JobSample(12.3456789, 0.01, {(3, 1): (2, 3000, 1), (3, 0): (1, 66, 0),
    ...               (3, 5): (1, 60, 0), (9, 1): (1, 1, 0)}, {3: 4})
    >>> rows, queues = series_rows([s], {3: "tor1->agg1"}, ["other", "a"] + ["other"] * 14)
    >>> [(r.time_s, r.link, r.job, r.bytes, r.packets, r.ce_marks) for r in rows]
    [(12.34568, 'tor1->agg1', 'a', 3000, 2, 1), (12.34568, 'tor1->agg1', 'other', 126, 2, 0)]
    >>> queues
    [QueueRow(time_s=12.34568, link='tor1->agg1', max_depth_cells=4)]
    """
    rows: list[TelemetryRow] = []
    queues: list[QueueRow] = []
    for sample in samples:
        when = round(sample.time_s, 5)
        per: dict[tuple[str, str], list[int]] = {}
        for (port, job_class), (packets, byte_count, marks) in sample.counts.items():
            link = links.get(port)
            if link is None or not (packets or byte_count or marks):
                continue
            job = class_names[job_class] if 0 <= job_class < len(class_names) else OTHER
            total = per.setdefault((link, job), [0, 0, 0])
            total[0] += byte_count
            total[1] += packets
            total[2] += marks
        rows.extend(TelemetryRow(when, link, job, *v) for (link, job), v in sorted(per.items()))
        busy = {link for link, _ in per}
        depths = sample.max_depth_cells or {}
        for port, link in sorted(links.items(), key=lambda item: item[1]):
            depth = int(depths.get(port, 0))
            if depth or link in busy:
                queues.append(QueueRow(when, link, depth))
    return rows, queues


def _write(path: Path, rows: Sequence[Any], columns: Sequence[str]) -> Path:
    with path.open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(columns)
        out.writerows(astuple(r) for r in rows)
    return path


def write_series(
    folder: str | Path, rows: Sequence[TelemetryRow], queues: Sequence[QueueRow]
) -> list[Path]:
    """telemetry.csv and queues.csv into `folder`."""
    out = Path(folder)
    return [
        _write(out / TELEMETRY_FILE, rows, [f.name for f in fields(TelemetryRow)]),
        _write(out / QUEUES_FILE, queues, [f.name for f in fields(QueueRow)]),
    ]


def read_telemetry(path: str | Path) -> list[TelemetryRow]:
    """The rows of a telemetry.csv."""
    with Path(path).open(newline="") as fh:
        return [
            TelemetryRow(
                float(r["time_s"]),
                r["link"],
                r["job"],
                int(r["bytes"]),
                int(r["packets"]),
                int(r["ce_marks"]),
            )  # fmt: skip
            for r in csv.DictReader(fh)
        ]


@dataclass(frozen=True)
class LinkOverlap:
    """One link's overlap: of its busy samples (a job above the share), how many had two
    or more jobs above it."""

    link: str
    busy_samples: int
    overlapped_samples: int

    @property
    def fraction(self) -> float | None:
        return self.overlapped_samples / self.busy_samples if self.busy_samples else None


def overlap(
    rows: Iterable[TelemetryRow],
    capacity_gbps: Mapping[str, float],
    interval_s: float,
    share: float = OVERLAP_SHARE,
) -> dict[str, LinkOverlap]:
    """Per link of `capacity_gbps` (the topology's rate, scaled as the fabric runs it),
    the overlap of the jobs on it: a job uses the link in a sample if it sent more than
    `share` of what the link carries in `interval_s`; traffic of no job does not count.
    (our choice) The fraction is over the link's busy samples (one job or more above the
    share), not over the whole run, so idle time (start-up, Down phases of every job)
    does not dilute it: 1.0 is "whenever a job used the link another one did too".

    >>> rows = [TelemetryRow(t, "l", j, b, 1, 0) for t, j, b in [
    ...     (0.01, "a", 400), (0.01, "b", 300),    # both above 1000 * 0.25: overlapped
    ...     (0.02, "a", 900), (0.02, "b", 100),    # b below: busy only
    ...     (0.03, "other", 900),                  # no job: not busy
    ...     (0.04, "b", 251)]]                     # busy
    >>> o = overlap(rows, {"l": 1000 * 8 / 0.01 / 1e9}, 0.01)["l"]
    >>> o.busy_samples, o.overlapped_samples, o.fraction
    (3, 1, 0.3333333333333333)
    """
    above: dict[str, dict[float, int]] = {link: {} for link in capacity_gbps}
    for row in rows:
        if row.job == OTHER or row.link not in above:
            continue
        limit = share * capacity_gbps[row.link] * 1e9 * interval_s / 8
        per_time = above[row.link]
        if row.bytes > limit:
            per_time[row.time_s] = per_time.get(row.time_s, 0) + 1
    return {
        link: LinkOverlap(link, len(per_time), sum(1 for n in per_time.values() if n >= 2))
        for link, per_time in above.items()
    }
