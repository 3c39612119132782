"""ecn.csv's loss-by-cause columns come from the gNMI interface counters, matched to
ports by their P4Runtime port id (`state/id`), whatever the interfaces are named."""

from __future__ import annotations

import csv
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path

from pygnmi.spec.v080 import gnmi_pb2

from controlplane.gnmi import interfaces_from
from controlplane.p4names import ECN_MARKED, PORT_TX, WRED_DROPPED
from controlplane.telemetry import (
    GNMI_COLUMNS,
    Interval,
    PortDelta,
    Snapshot,
    TelemetryLog,
    watch,
)
from emulation.emulate.plan import SchedulerPlan
from emulation.emulate.report_csv import write_series
from emulation.emulate.results import SchedulerRun
from emulation.jobs.run_result import RunResult
from emulation.jobs.run_settings import RunSettings


def _leaf(*names: str, key: str | None = None) -> list[gnmi_pb2.PathElem]:
    return [
        gnmi_pb2.PathElem(name=n, key={"name": key} if n == "interface" and key else {})
        for n in names
    ]


def _response(interfaces: Mapping[str, tuple[int, Mapping[str, int]]]) -> gnmi_pb2.GetResponse:
    """A PROTO-encoded GetResponse as the switch serves it: per-leaf updates under the
    prefix /interfaces/interface[name=NAME]/state."""
    notifications = []
    for name, (port, counters) in interfaces.items():
        updates = [
            gnmi_pb2.Update(
                path=gnmi_pb2.Path(elem=_leaf("id")), val=gnmi_pb2.TypedValue(uint_val=port)
            )
        ]
        updates += [
            gnmi_pb2.Update(
                path=gnmi_pb2.Path(elem=_leaf("counters", leaf)),
                val=gnmi_pb2.TypedValue(uint_val=value),
            )
            for leaf, value in counters.items()
        ]
        prefix = gnmi_pb2.Path(elem=_leaf("interfaces", "interface", "state", key=name))
        notifications.append(gnmi_pb2.Notification(prefix=prefix, update=updates))
    return gnmi_pb2.GetResponse(notification=notifications)


ZERO = dict.fromkeys(GNMI_COLUMNS, 0)
# Two polls of ports 3 and 7. Between them the interfaces were renamed (as a new run
# of the switch may name them): the rows follow the port id, not the name.
POLLS = [
    {"cas1p1": (3, ZERO), "cas1p2": (7, ZERO | {"in-discards": 4})},
    {
        "chip-3": (3, ZERO | {"out-discards": 12, "tail-dropped": 9, "in-errors": 1, "malformed": 1}),
        "chip-7": (7, ZERO | {"in-discards": 10, "forward-misses": 5, "to-unknown-port": 1}),
    },
]  # fmt: skip
# The P4 counters of the same polls: port 3 sent 500 packets, 30 marked, 3 WRED-dropped.
CELLS = [
    {(PORT_TX, 3): (1000, 1_500_000), (ECN_MARKED, 3): (0, 0), (WRED_DROPPED, 3): (0, 0)},
    {(PORT_TX, 3): (1500, 2_250_000), (ECN_MARKED, 3): (30, 45_000), (WRED_DROPPED, 3): (3, 4500)},
]


def _polls() -> Iterator[Snapshot]:
    """The polls as a watch takes them: the interfaces parsed by the gNMI reader's parser."""
    for t, (cells, interfaces) in enumerate(zip(CELLS, POLLS, strict=True)):
        parsed = interfaces_from(_response(interfaces))
        yield replace(Snapshot.of(float(t), (), 1_700_000_000.0 + t, parsed), cells=cells)


def _run(ports: list[PortDelta]) -> SchedulerRun:
    result = RunResult(
        jobs=(), summaries=(), records=(), ports=tuple(ports), links=(),
        settings=RunSettings(), scale=0.001, emulation_profile="S = 0.001", duration_s=1.0,
    )  # fmt: skip
    return SchedulerRun("themis", SchedulerPlan("themis", (), {}, 0.0, 0.0), result, {})


def test_ecn_csv_loss_columns_are_the_gnmi_counters_of_each_port(tmp_path: Path) -> None:
    polls = _polls()
    log = TelemetryLog()

    def record(done: Interval) -> None:
        log.add(done.ports, done.links)

    assert watch(lambda: next(polls), 1.0, record, duration_s=1.0, wait=lambda _: False) == 1
    path = write_series([_run(log.ports)], tmp_path / "ecn.csv", PortDelta, "ports")
    rows = {int(r["port"]): r for r in csv.DictReader(path.open())}
    assert set(rows) == {3, 7}
    three, seven = rows[3], rows[7]
    # every loss column is a number in every row (never empty)
    for row in rows.values():
        for column in (c.replace("-", "_") for c in GNMI_COLUMNS):
            assert row[column].isdigit(), (row["port"], column, row[column])
    assert three["interface"] == "chip-3" and seven["interface"] == "chip-7"
    assert (three["out_discards"], three["tail_dropped"], three["in_errors"]) == ("12", "9", "1")
    assert (three["tx_packets"], three["ecn_marked_packets"], three["wred_dropped_packets"]) == (
        "500", "30", "3"
    )  # fmt: skip
    # lost: in-discards + in-errors + out-discards + out-errors, by hand
    assert three["lost_packets"] == str(0 + 1 + 12 + 0)
    assert (seven["in_discards"], seven["forward_misses"], seven["to_unknown_port"]) == (
        "6", "5", "1"
    )  # fmt: skip
    assert seven["lost_packets"] == "6"


def test_without_gnmi_the_loss_columns_are_empty_and_lost_is_the_wred_drops(
    tmp_path: Path,
) -> None:
    before, after = (Snapshot(float(t), cells) for t, cells in enumerate(CELLS))
    log = TelemetryLog()
    watch(
        iter([before, after]).__next__, 1.0, lambda d: log.add(d.ports), 1.0, wait=lambda _: False
    )
    path = write_series([_run(log.ports)], tmp_path / "ecn.csv", PortDelta, "ports")
    (row,) = list(csv.DictReader(path.open()))
    assert row["out_discards"] == row["in_discards"] == ""
    assert row["lost_packets"] == "3"
