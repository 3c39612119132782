"""What did each strict-priority queue class of each link send, mark and drop during a run?

Under a network policy that puts flows into queue classes (`run_settings.CLASS_POLICIES`:
Crux, EchelonFlow), a run writes `queue_classes.csv` (`time_s, link, class, packets,
bytes, ce_marks, drops`): per poll and link direction, one row per queue class that
sent or dropped something since the previous poll (a missing row is zero). `link` is
named as in `ecn-links.csv` and `telemetry.csv` (`telemetry_rows.link_names`: `tor1->agg1`
at tor1's egress port toward agg1), `class` is the queue class (0-7, 7 served first),
`time_s` the wall clock (Unix epoch, s) of the poll that ended the interval, `ce_marks`
the frames that left CE-marked by the class's WRED, `drops` its WRED and tail drops.

The counts come from the switch's per (port, queue class) counters over gNMI
(`controlplane.gnmi.GnmiReader.read_queues`, the OpenConfig QoS model's
transmit-pkts, transmit-octets, dropped-pkts and our ecn-marked-pkts), cumulative:
`queue_rows` turns two snapshots into one interval's rows (pure);
`queue_class_watch.QueueClassWatch` takes the snapshots while the replicas run.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from dataclasses import astuple, dataclass
from pathlib import Path

from controlplane.gnmi import QueueCount

QUEUE_CLASSES_FILE = "queue_classes.csv"
COLUMNS = ("time_s", "link", "class", "packets", "bytes", "ce_marks", "drops")

# (port, queue class) -> (packets, bytes, CE marks, drops), cumulative
Snapshot = Mapping[tuple[int, int], tuple[int, int, int, int]]


@dataclass(frozen=True)
class QueueClassRow:
    """One row of queue_classes.csv (`queue_class` is its `class` column)."""

    time_s: float
    link: str
    queue_class: int
    packets: int
    bytes: int
    ce_marks: int
    drops: int


def snapshot(queues: Sequence[QueueCount]) -> dict[tuple[int, int], tuple[int, int, int, int]]:
    """The counts of `queues` by (port, class); queues of no known port are left out."""
    return {
        (q.port, q.queue_class): (
            q.transmit_pkts,
            q.transmit_octets,
            q.ecn_marked_pkts,
            q.dropped_pkts,
        )
        for q in queues
        if q.port is not None
    }


def queue_rows(
    before: Snapshot, after: Snapshot, time_s: float, links: Mapping[int, str]
) -> list[QueueClassRow]:
    """The rows of one interval: per link port and class, what changed from `before` to
    `after` (rows of no traffic and ports off every link are left out), by link and class.

    >>> before = {(3, 7): (10, 15000, 1, 0), (3, 0): (5, 300, 0, 0)}
    >>> after = {(3, 7): (14, 21000, 2, 0), (3, 0): (5, 300, 0, 2), (9, 1): (1, 60, 0, 0)}
    >>> for r in queue_rows(before, after, 12.3456789, {3: "tor1->agg1"}):
    ...     print(r)
    QueueClassRow(time_s=12.34568, link='tor1->agg1', queue_class=0, packets=0, bytes=0, ce_marks=0, drops=2)
    QueueClassRow(time_s=12.34568, link='tor1->agg1', queue_class=7, packets=4, bytes=6000, ce_marks=1, drops=0)
    """
    when = round(time_s, 5)
    rows = []
    for (port, queue_class), counts in after.items():
        link = links.get(port)
        if link is None:
            continue
        old = before.get((port, queue_class), (0, 0, 0, 0))
        delta = [max(0, a - b) for a, b in zip(counts, old, strict=True)]  # a restarted switch
        if any(delta):
            rows.append(QueueClassRow(when, link, queue_class, *delta))
    return sorted(rows, key=lambda r: (r.link, r.queue_class))


def write_queue_classes(folder: str | Path, rows: Sequence[QueueClassRow]) -> Path:
    """queue_classes.csv into `folder`."""
    path = Path(folder) / QUEUE_CLASSES_FILE
    with path.open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(COLUMNS)
        out.writerows(astuple(r) for r in rows)
    return path


def read_queue_classes(path: str | Path) -> list[QueueClassRow]:
    """The rows of a queue_classes.csv."""
    with Path(path).open(newline="") as fh:
        return [
            QueueClassRow(
                float(r["time_s"]),
                r["link"],
                int(r["class"]),
                int(r["packets"]),
                int(r["bytes"]),
                int(r["ce_marks"]),
                int(r["drops"]),
            )  # fmt: skip
            for r in csv.DictReader(fh)
        ]
