"""Counter snapshots -> per-port and per-logical-link deltas, and their CSV/JSON files."""

from __future__ import annotations

import csv
import json
import threading
from dataclasses import fields
from pathlib import Path
from types import MappingProxyType

import pytest

from controlplane.entries import CounterSample
from controlplane.gnmi import COUNTER_LEAVES, Interface
from controlplane.p4info import load_p4info
from controlplane.p4names import JOB_COUNTERS
from controlplane.telemetry import (
    COUNTER_COLUMNS,
    GNMI_COLUMNS,
    Interval,
    PortDelta,
    Snapshot,
    TelemetryLog,
    deltas,
    link_deltas,
    watch,
    watched_ports,
)
from topologies.chip_mapping import map_to_chip
from topologies.errors import UserInputError
from topologies.library import load_topology


def _snap(t, cells):
    return Snapshot.of(t, [CounterSample(c, i, p, b) for (c, i), (p, b) in cells.items()])


def test_counter_columns_are_p4info_counters():
    """Every per-port counter of the P4Info has a column; the per-job ones are the
    10 ms telemetry's (controlplane.job_samples), not a poll's."""
    index = load_p4info()
    assert {index.counter(name).name for name in COUNTER_COLUMNS} == {
        c.name for c in index.counters
    } - set(JOB_COUNTERS)


def test_deltas_per_port():
    before = _snap(
        10.0,
        {
            ("CassiniEgress.port_tx", 3): (100, 150_000),
            ("CassiniEgress.ecn_marked", 3): (5, 7_500),
            ("CassiniIngress.port_rx", 1): (100, 150_000),
            ("CassiniEgress.port_tx", 4): (9, 900),
        },
    )
    after = _snap(
        10.5,
        {
            ("CassiniEgress.port_tx", 3): (300, 450_000),
            ("CassiniEgress.ecn_marked", 3): (25, 37_500),
            ("CassiniEgress.wred_dropped", 3): (2, 3_000),
            ("CassiniIngress.port_rx", 1): (320, 480_000),
            ("CassiniEgress.port_tx", 4): (9, 900),  # idle port
        },
    )
    rows = {d.port: d for d in deltas(before, after)}
    assert sorted(rows) == [1, 3]
    p3 = rows[3]
    assert (p3.tx_packets, p3.tx_bytes, p3.ecn_marked_packets, p3.ecn_marked_bytes) == (
        200,
        300_000,
        20,
        30_000,
    )
    assert (p3.wred_dropped_packets, p3.rx_packets, p3.interval_s, p3.time_s) == (2, 0, 0.5, 10.5)
    assert (rows[1].rx_packets, rows[1].tx_packets) == (220, 0)
    # Asking for ports lists them even when idle, and only them.
    assert [d.port for d in deltas(before, after, ports=[4, 3])] == [3, 4]


def test_counter_reset_counts_from_zero():
    before = _snap(0.0, {("CassiniEgress.ecn_marked", 2): (1000, 10)})
    after = _snap(1.0, {("CassiniEgress.ecn_marked", 2): (7, 10)})
    (row,) = deltas(before, after)
    assert row.ecn_marked_packets == 7


def test_link_deltas_follow_the_chip_map():
    topo = load_topology("cassini-testbed")
    chip = map_to_chip(topo)
    up = chip.link_ports[("tor1", "agg1")]
    down = chip.link_ports[("agg1", "tor1")]
    to_server = chip.server_port["s01"]
    before = _snap(0.0, {})
    after = _snap(
        2.0,
        {
            ("CassiniEgress.port_tx", up): (1000, 250_000_000),
            ("CassiniEgress.ecn_marked", up): (40, 60_000),
            ("CassiniEgress.port_tx", down): (10, 15_000),
            ("CassiniEgress.port_tx", to_server): (3, 4_500),
        },
    )
    links = {ln.link: ln for ln in link_deltas(deltas(before, after), chip)}
    assert set(links) == {"tor1->agg1", "agg1->tor1", "tor1->s01"}
    assert links["tor1->agg1"].port == up
    assert links["tor1->agg1"].ecn_marked_packets == 40
    assert links["tor1->agg1"].gbps == pytest.approx(1.0)  # 250 MB in 2 s
    assert links["agg1->tor1"].ecn_marked_packets == 0


def test_log_writes_csv_and_json(tmp_path):
    topo = load_topology("cassini-testbed")
    chip = map_to_chip(topo)
    port = chip.link_ports[("core1", "agg2")]
    rows = deltas(_snap(0.0, {}), _snap(1.0, {("CassiniEgress.ecn_marked", port): (3, 4500)}))
    log = TelemetryLog()
    log.add(rows, link_deltas(rows, chip))
    paths = log.write(tmp_path / "ecn.csv")
    assert [p.name for p in paths] == ["ecn.csv", "ecn-links.csv"]
    with paths[0].open() as fh:
        (rec,) = list(csv.DictReader(fh))
    assert rec["port"] == str(port) and rec["ecn_marked_packets"] == "3"
    with paths[1].open() as fh:
        (link,) = list(csv.DictReader(fh))
    assert link["link"] == "core1->agg2"
    (jpath,) = log.write(tmp_path / "ecn.json")
    data = json.loads(jpath.read_text())
    assert (
        data["links"][0]["link"] == "core1->agg2" and data["ports"][0]["ecn_marked_bytes"] == 4500
    )
    with pytest.raises(UserInputError, match="use a .csv or .json"):
        log.write(tmp_path / "ecn.txt")


# --- gNMI loss columns, idle rows, timestamps and the watch loop -----------------------


def _iface(port: int, **counters: int) -> Interface:
    return Interface(f"veth{port}", port, MappingProxyType(dict(counters)))


def test_gnmi_columns_are_leaves_and_fields() -> None:
    assert set(GNMI_COLUMNS) <= set(COUNTER_LEAVES)
    names = {f.name for f in fields(PortDelta)}
    assert {leaf.replace("-", "_") for leaf in GNMI_COLUMNS} <= names


def test_loss_columns_and_every_loss_in_lost_packets() -> None:
    before = Snapshot.of(
        0.0, [], wall_s=100.0, interfaces=[_iface(1, **{"in-discards": 2}), _iface(2)]
    )
    after = Snapshot.of(
        0.5,
        [CounterSample("CassiniEgress.wred_dropped", 2, 3, 4500)],
        wall_s=100.5,
        interfaces=[
            _iface(1, **{"in-discards": 7, "forward-misses": 4, "rx-overruns": 1, "in-errors": 2}),
            _iface(2, **{"out-discards": 9, "tail-dropped": 6, "out-errors": 1}),
        ],
    )
    rows = {d.port: d for d in deltas(before, after)}
    p1, p2 = rows[1], rows[2]
    assert (p1.interface, p1.in_discards, p1.forward_misses, p1.rx_overruns) == ("veth1", 5, 4, 1)
    assert p1.tail_dropped is None  # the target did not report that leaf
    assert p1.lost_packets == 5 + 2
    assert (p2.tail_dropped, p2.out_discards, p2.wred_dropped_packets) == (6, 9, 3)
    assert p2.lost_packets == 9 + 1  # out-discards already hold the WRED drops
    assert p1.utc == p2.utc == "1970-01-01T00:01:40.500Z"

    # Without gNMI the only loss the P4 counters see is WRED's.
    wred = CounterSample("CassiniEgress.wred_dropped", 2, 3, 4500)
    (plain,) = deltas(Snapshot.of(0.0, []), Snapshot.of(1.0, [wred]))
    assert (plain.lost_packets, plain.tail_dropped, plain.utc) == (3, None, "")


def test_watched_ports_include_idle_ones() -> None:
    idle = Snapshot.of(1.0, [CounterSample("CassiniEgress.port_tx", i, 0, 0) for i in range(4)])
    moved = Snapshot.of(
        2.0,
        [CounterSample("CassiniEgress.port_tx", i, 5 if i == 3 else 0, 0) for i in range(4)],
        interfaces=[_iface(1), _iface(2)],
    )
    # gNMI names the device's ports; a port that moved is always in.
    assert watched_ports(idle, moved) == [1, 2, 3]
    # Without gNMI or a chip map: every counter index.
    assert watched_ports(idle, idle) == [0, 1, 2, 3]
    rows = deltas(idle, moved, watched_ports(idle, moved))
    assert [(r.port, r.tx_packets, r.tail_dropped) for r in rows] == [
        (1, 0, None),
        (2, 0, None),
        (3, 5, None),
    ]
    topo = load_topology("cassini-testbed")
    chip = map_to_chip(topo)
    assert len(watched_ports(idle, idle, chip)) == len(
        set(chip.link_ports.values()) | set(chip.server_port.values())
    )


def test_watch_writes_a_row_per_port_for_every_interval(tmp_path: Path) -> None:
    clock = [1000.0]
    wall = [1_700_000_000.0]
    tail = [0]

    def take() -> Snapshot:
        return Snapshot.of(
            clock[0],
            [CounterSample("CassiniEgress.port_tx", 1, 0, 0)],
            wall_s=wall[0],
            interfaces=[_iface(1, **{"tail-dropped": tail[0], "out-discards": tail[0]}), _iface(2)],
        )

    def wait(seconds: float) -> bool:
        clock[0] += seconds
        wall[0] += seconds
        if round(clock[0] - 1000.0, 6) == 0.6:
            tail[0] += 7  # drops in the third interval only
        return False

    got: list[Interval] = []
    assert watch(take, 0.2, got.append, duration_s=1.0, clock=lambda: clock[0], wait=wait) == 5
    assert [i.index for i in got] == [1, 2, 3, 4, 5]
    assert all([r.port for r in i.ports] == [1, 2] for i in got)
    assert [round(i.time_s, 6) for i in got] == [0.2, 0.4, 0.6, 0.8, 1.0]
    assert [r.tail_dropped for i in got for r in i.ports if r.port == 1] == [0, 0, 7, 0, 0]
    assert got[0].utc == "2023-11-14T22:13:20.200Z" == got[0].ports[0].utc
    log = TelemetryLog()
    for i in got:
        log.add(i.ports, i.links)
    (path,) = log.write(tmp_path / "w.csv")
    with path.open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 10
    assert list(rows[0])[:4] == ["utc", "time_s", "interval_s", "port"]
    assert sum(int(r["tail_dropped"]) for r in rows if r["port"] == "1") == 7
    assert {r["tail_dropped"] for r in rows if r["port"] == "2"} == {""}  # not reported: blank
    assert {r["lost_packets"] for r in rows if r["port"] == "2"} == {"0"}


def test_watch_stops_when_asked() -> None:
    stop = threading.Event()
    stop.set()
    assert watch(lambda: Snapshot.of(0.0, []), 0.01, lambda i: None, stop=stop) == 0
    with pytest.raises(UserInputError, match="interval must be > 0"):
        watch(lambda: Snapshot.of(0.0, []), 0, lambda i: None)


def test_a_watch_lasts_its_duration_of_the_clock_however_slow_the_polls() -> None:
    # `--interval 100ms --duration 10s` ran 25.6 s when each poll took 256 ms: the
    # duration was counted in polls. Now it is the clock's.
    clock = [0.0]

    def take() -> Snapshot:
        clock[0] += 0.256  # a slow read
        return Snapshot.of(clock[0], [])

    def wait(seconds: float) -> bool:
        clock[0] += seconds
        return False

    got: list[Interval] = []
    watch(take, 0.1, got.append, duration_s=10.0, clock=lambda: clock[0], wait=wait)
    assert 0.256 + 9.9 <= clock[0] <= 0.256 + 10.0 + 0.256  # the first read, then 10 s
    assert 35 <= len(got) <= 40  # one per poll, about 10 s / 0.256 s; never 100


def test_the_writer_appends_csv_rows_as_it_goes_and_a_json_whole(tmp_path: Path) -> None:
    from controlplane.telemetry import TelemetryWriter

    rows = [Interval(1, 0.5, "2023-11-14T22:13:20.500Z", [], [])]
    clock = [0.0]

    def take() -> Snapshot:
        return Snapshot.of(clock[0], [CounterSample("CassiniEgress.port_tx", 1, clock[0], 0)])

    def wait(seconds: float) -> bool:
        clock[0] += seconds
        return False

    writer = TelemetryWriter(tmp_path / "w.csv")
    seen: list[int] = []

    def record(done: Interval) -> None:
        writer.add(done)
        with (tmp_path / "w.csv").open() as fh:  # on disk already, before the watch ends
            seen.append(len(list(csv.DictReader(fh))))

    watch(take, 0.2, record, duration_s=1.0, clock=lambda: clock[0], wait=wait)
    assert seen == [1, 2, 3, 4, 5]
    assert writer.close() == [tmp_path / "w.csv"]  # no chip map: no links file
    assert not (tmp_path / "w-links.csv").exists()
    json_writer = TelemetryWriter(tmp_path / "w.json")
    json_writer.add(rows[0])
    assert not (tmp_path / "w.json").exists()
    assert json_writer.close() == [tmp_path / "w.json"]
    assert json.loads((tmp_path / "w.json").read_text()) == {"ports": [], "links": []}
