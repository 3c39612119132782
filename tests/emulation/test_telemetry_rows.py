"""telemetry.csv and queues.csv rows from the switch's samples, and the overlap metric,
against hand-computed cases."""

from __future__ import annotations

from pathlib import Path

import pytest

from controlplane.job_classes import class_names
from controlplane.job_samples import JobSample
from emulation.jobs.telemetry_rows import (
    QueueRow,
    TelemetryRow,
    link_names,
    overlap,
    read_telemetry,
    series_rows,
    write_series,
)
from topologies.chip_mapping import map_to_chip
from topologies.library import load_topology

NAMES = class_names({"a": 1, "b": 2})


def test_rows_per_sample_link_and_job_with_traffic() -> None:
    links = {3: "tor1->agg1", 4: "agg1->tor1"}
    samples = [
        JobSample(100.0, 0.01, {(3, 1): (2, 3000, 1), (3, 2): (1, 1500, 0)}, {3: 7}),
        JobSample(100.01, 0.01, {(4, 0): (1, 64, 0), (4, 9): (1, 60, 0), (8, 1): (5, 5, 5)}, {}),
        JobSample(100.02, 0.01, {}, {4: 2}),
        JobSample(100.03, 0.01, {(3, 1): (0, 0, 0)}, None),  # an idle cell: no row
    ]
    rows, queues = series_rows(samples, links, NAMES)
    assert rows == [
        TelemetryRow(100.0, "tor1->agg1", "a", 3000, 2, 1),
        TelemetryRow(100.0, "tor1->agg1", "b", 1500, 1, 0),
        # class 0 and an unused class are both traffic of no job; port 8 is on no link
        TelemetryRow(100.01, "agg1->tor1", "other", 124, 2, 0),
    ]
    assert queues == [
        QueueRow(100.0, "tor1->agg1", 7),
        QueueRow(100.01, "agg1->tor1", 0),  # it sent: a row, its queue was empty
        QueueRow(100.02, "agg1->tor1", 2),
    ]


def test_files_have_the_issue_s_columns_and_read_back(tmp_path: Path) -> None:
    rows = [TelemetryRow(1.5, "tor1->agg1", "a", 10, 1, 0)]
    paths = write_series(tmp_path, rows, [QueueRow(1.5, "tor1->agg1", 3)])
    assert [p.name for p in paths] == ["telemetry.csv", "queues.csv"]
    assert paths[0].read_text().splitlines() == [
        "time_s,link,job,bytes,packets,ce_marks",
        "1.5,tor1->agg1,a,10,1,0",
    ]
    assert paths[1].read_text().splitlines()[0] == "time_s,link,max_depth_cells"
    assert read_telemetry(paths[0]) == rows


def test_links_are_named_as_ecn_links_csv_names_them() -> None:
    chip = map_to_chip(load_topology("cassini-testbed"))
    names = link_names(chip)
    assert names[chip.link_ports[("tor1", "agg1")]] == "tor1->agg1"
    assert names[chip.server_port["s01"]] == "tor1->s01"


def test_overlap_by_hand() -> None:
    # A 50 Mbit/s link: 62,500 bytes per 10 ms; a quarter is 15,625 bytes.
    gbps = 0.05
    quarter = 15_625
    samples = {
        0.01: {"a": 30_000, "b": 30_000},  # both above: overlapped
        0.02: {"a": 60_000, "b": quarter},  # b exactly at a quarter is not above: busy only
        0.03: {"a": quarter + 1, "b": quarter + 1, "other": 40_000},  # overlapped
        0.04: {"other": 62_000},  # traffic of no job: not busy
        0.05: {"b": 50_000},  # busy
        0.06: {"a": 100},  # below: not busy
    }
    rows = [
        TelemetryRow(t, "tor1->agg1", job, b, 1, 0)
        for t, jobs in samples.items()
        for job, b in jobs.items()
    ]
    rows.append(TelemetryRow(0.01, "agg1->tor1", "a", 62_000, 1, 0))  # another link
    got = overlap(rows, {"tor1->agg1": gbps, "agg1->tor1": gbps, "tor2->agg1": gbps}, 0.01)
    link = got["tor1->agg1"]
    assert (link.busy_samples, link.overlapped_samples) == (4, 2)
    assert link.fraction == pytest.approx(0.5)
    assert got["agg1->tor1"].fraction == 0.0
    assert got["tor2->agg1"].fraction is None  # never busy: no fraction
    # a longer sample interval raises the bar: at 20 ms only 0.02's a and 0.05's b are above
    slow = overlap(rows, {"tor1->agg1": gbps}, 0.02)["tor1->agg1"]
    assert (slow.busy_samples, slow.overlapped_samples) == (2, 0)
