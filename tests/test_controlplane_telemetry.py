"""Counter snapshots -> per-port and per-logical-link deltas, and their CSV/JSON files."""

from __future__ import annotations

import csv
import json

import pytest

from controlplane.entries import CounterSample
from controlplane.p4info import load_p4info
from controlplane.telemetry import COUNTER_COLUMNS, Snapshot, TelemetryLog, deltas, link_deltas
from topologies.chip_mapping import map_to_chip
from topologies.errors import UserInputError
from topologies.library import load_topology


def _snap(t, cells):
    return Snapshot.of(t, [CounterSample(c, i, p, b) for (c, i), (p, b) in cells.items()])


def test_counter_columns_are_p4info_counters():
    index = load_p4info()
    assert {index.counter(name).name for name in COUNTER_COLUMNS} == {
        c.name for c in index.counters
    }


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
