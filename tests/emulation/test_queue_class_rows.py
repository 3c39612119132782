"""queue_classes.csv: rows from two readings of the switch's queues, the file, and the
watch that takes the readings (over a real in-process gNMI channel, no fabric)."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from concurrent import futures
from pathlib import Path

import grpc

from controlplane.gnmi import GnmiError, QueueCount
from emulation.jobs.queue_class_rows import (
    COLUMNS,
    QUEUE_CLASSES_FILE,
    QueueClassRow,
    queue_rows,
    read_queue_classes,
    snapshot,
    write_queue_classes,
)
from emulation.jobs.queue_class_watch import QueueClassWatch
from emulation.softswitch.gnmi_service import add_gnmi_service
from emulation.softswitch.port_stats import QueueCounters, port_counters, queue_counters

LINKS = {3: "tor1->agg1", 4: "agg1->tor1"}


def test_rows_are_the_changes_of_link_ports_with_traffic() -> None:
    before = {(3, 7): (10, 15_000, 1, 0), (3, 0): (5, 300, 0, 0), (4, 2): (1, 100, 0, 0)}
    after = {
        (3, 7): (14, 21_000, 3, 0),  # 4 frames, 2 marked
        (3, 0): (5, 300, 0, 2),  # 2 drops, nothing sent
        (4, 2): (1, 100, 0, 0),  # no change: no row
        (4, 6): (2, 3_000, 0, 0),  # new since the last reading
        (9, 1): (8, 800, 0, 0),  # a port on no link
    }
    rows = queue_rows(before, after, 100.123456, LINKS)
    assert rows == [
        QueueClassRow(100.12346, "agg1->tor1", 6, 2, 3_000, 0, 0),
        QueueClassRow(100.12346, "tor1->agg1", 0, 0, 0, 0, 2),
        QueueClassRow(100.12346, "tor1->agg1", 7, 4, 6_000, 2, 0),
    ]


def test_a_queue_of_no_known_port_is_left_out_of_the_snapshot() -> None:
    queues = [QueueCount("x", None, 0, 1, 2, 3, 4), QueueCount("tor1-eth3", 3, 5, 6, 700, 8, 9)]
    assert snapshot(queues) == {(3, 5): (6, 700, 9, 8)}  # packets, bytes, CE marks, drops


def test_the_file_has_the_issue_columns_and_reads_back(tmp_path: Path) -> None:
    rows = [QueueClassRow(1.5, "tor1->agg1", 7, 4, 6000, 2, 1)]
    path = write_queue_classes(tmp_path, rows)
    assert path == tmp_path / QUEUE_CLASSES_FILE
    with path.open(newline="") as fh:
        lines = list(csv.reader(fh))
    assert lines == [
        ["time_s", "link", "class", "packets", "bytes", "ce_marks", "drops"],
        ["1.5", "tor1->agg1", "7", "4", "6000", "2", "1"],
    ]
    assert list(COLUMNS) == lines[0]
    assert read_queue_classes(path) == rows


class Readings:
    """Queue readings handed out in turn; a GnmiError once they run out."""

    def __init__(self, readings: Sequence[Sequence[QueueCount]]) -> None:
        self.readings = list(readings)

    def __call__(self) -> Sequence[QueueCount]:
        if not self.readings:
            raise GnmiError("no gNMI answer from 127.0.0.1:1 within 5 s")
        return self.readings.pop(0)


def test_the_watch_takes_a_baseline_then_a_reading_at_stop() -> None:
    first = [QueueCount("tor1-eth3", 3, 7, 10, 10_000, 0, 1)]
    last = [QueueCount("tor1-eth3", 3, 7, 15, 17_000, 1, 0)]
    watch = QueueClassWatch(LINKS, 60.0, Readings([first, last]), clock=lambda: 7.0).start()
    rows = watch.stop()
    # 5 frames, 1 drop; the CE marks went back (a restarted switch): 0, not -1
    assert rows == [QueueClassRow(7.0, "tor1->agg1", 7, 5, 7_000, 0, 1)]
    assert watch.error is None


def test_a_failed_reading_is_reported_and_the_rows_so_far_kept() -> None:
    first = [QueueCount("tor1-eth3", 3, 2, 1, 100, 0, 0)]
    second = [QueueCount("tor1-eth3", 3, 2, 3, 300, 0, 0)]
    watch = QueueClassWatch(LINKS, 60.0, Readings([first, second]), clock=lambda: 1.0).start()
    watch.poll()
    rows = watch.stop()  # the third reading fails
    assert rows == [QueueClassRow(1.0, "tor1->agg1", 2, 2, 200, 0, 0)]
    assert watch.error is not None and "no gNMI answer" in watch.error


def test_the_watch_reads_a_switch_over_gnmi(tmp_path: Path) -> None:
    names = {3: "tor1-eth3", 4: "tor1-eth4"}
    served: list[list[QueueCounters]] = [queue_counters({}, names, [3, 4])]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    add_gnmi_service(server, lambda: port_counters({}, names, [3, 4]), queues=lambda: served[0])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        watch = QueueClassWatch.over_gnmi(f"127.0.0.1:{port}", LINKS, 0.1, 5.0).start()
        assert watch.interval_s == 1.0  # never faster than once a second
        stats = {
            "sent_packets": {(3, 7): 4, (4, 0): 1},
            "sent_bytes": {(3, 7): 6000, (4, 0): 60},
            "marked_packets": {(3, 7): 1},
            "dropped_packets": {(3, 2): 2},
        }
        served[0] = queue_counters(stats, names, [3, 4])
        rows = watch.stop()
    finally:
        server.stop(0).wait()
    assert watch.error is None
    assert [(r.link, r.queue_class, r.packets, r.bytes, r.ce_marks, r.drops) for r in rows] == [
        ("agg1->tor1", 0, 1, 60, 0, 0),
        ("tor1->agg1", 2, 0, 0, 0, 2),
        ("tor1->agg1", 7, 4, 6000, 1, 0),
    ]
    write_queue_classes(tmp_path, rows)
    assert read_queue_classes(tmp_path / QUEUE_CLASSES_FILE) == rows
