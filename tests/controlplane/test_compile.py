"""Topology -> table entries, the entry wrapper, settings, and the reconcile plan (all pure)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from controlplane.compile import desired_entries, forwarding_table_entries, wred_entries
from controlplane.entries import TableEntry, Update, UpdateType
from controlplane.reconcile import plan
from controlplane.settings import (
    ControlPlaneSettings,
    WredSettings,
    load_settings,
)
from topologies.chip_mapping import forwarding_entries, map_to_chip
from topologies.errors import UserInputError


def test_forwarding_entries_mirror_chip_mapping(testbed, index):
    topo, chip = testbed
    rules = forwarding_entries(topo, chip)
    entries = forwarding_table_entries(topo, chip)
    assert len(entries) == len(rules) > 0
    by_key = {(e.match["ingress_port"], e.match["dst_mac"]): e for e in entries}
    for rule in rules:
        mac = int(rule.dst_mac.replace(":", ""), 16)
        entry = by_key[(rule.ingress_port, mac)]
        assert entry.params["port"] == rule.egress_port
        assert entry.table == "CassiniIngress.logical_forward"
        assert entry.action == "CassiniIngress.set_egress_port"
    # Every entry is valid against the P4Info (names, widths, completeness).
    for entry in entries:
        msg = entry.to_proto(index)
        assert TableEntry.from_proto(index, msg) == entry


def test_wred_entries_one_per_chip_port(testbed):
    _, chip = testbed
    entries = wred_entries(chip, WredSettings(1000, 2000, 40))
    assert len(entries) == len(chip.ports()) == 72
    assert sorted(e.match["egress_port"] for e in entries) == list(chip.ports())
    assert {dict(e.params).__repr__() for e in entries} == {
        repr({"max_cells": 2000, "max_prob": 40, "min_cells": 1000})
    }


def test_table_entry_normalizes_values_and_is_hashable(index):
    a = TableEntry(
        "logical_forward",
        {"ingress_port": 3, "dst_mac": "02:00:00:00:00:0A"},
        "set_egress_port",
        {"port": 7},
    )
    b = TableEntry(
        "logical_forward",
        {"dst_mac": 0x02000000000A, "ingress_port": "3"},
        "set_egress_port",
        {"port": 7},
    )
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    full = a.canonical(index)
    assert (
        full.table == "CassiniIngress.logical_forward"
        and full.action == "CassiniIngress.set_egress_port"
    )
    msg = a.to_proto(index)
    assert msg.table_id == 33554433
    assert [(m.field_id, m.exact.value) for m in msg.match] == [
        (1, b"\x03"),
        (2, b"\x02\x00\x00\x00\x00\x0a"),
    ]
    assert msg.action.action.params[0].value == b"\x07"
    upd = Update(UpdateType.DELETE, a).to_proto(index)
    assert upd.type == 3 and upd.entity.table_entry == msg


def test_table_entry_rejects_bad_entries(index):
    def proto(table="logical_forward", match=None, action="set_egress_port", params=None):
        match = {"ingress_port": 1, "dst_mac": 2} if match is None else match
        params = {"port": 3} if params is None else params
        return TableEntry(table, match, action, params).to_proto(index)

    with pytest.raises(UserInputError, match="Did you mean 'CassiniIngress.logical_forward'"):
        proto(table="logical_fwd")
    with pytest.raises(UserInputError, match="match field 'dst_mac' is missing"):
        proto(match={"ingress_port": 1})
    with pytest.raises(UserInputError, match="Did you mean 'dst_mac'"):
        proto(match={"ingress_port": 1, "dst_mc": 2})
    with pytest.raises(
        UserInputError, match=r"logical_forward.ingress_port: 600 does not fit in bit<9>"
    ):
        proto(match={"ingress_port": 600, "dst_mac": 2})
    with pytest.raises(UserInputError, match="parameter 'port' is missing"):
        proto(params={})
    with pytest.raises(
        UserInputError, match="cannot be used in entries of CassiniEgress.wred_profile"
    ):
        proto(table="wred_profile", match={"egress_port": 1}, action="NoAction", params={})
    with pytest.raises(
        UserInputError, match="cannot be used in entries of CassiniIngress.logical_forward"
    ):
        proto(action="set_wred", params={"min_cells": 1, "max_cells": 2, "max_prob": 3})
    with pytest.raises(UserInputError, match="not a number or MAC"):
        TableEntry("logical_forward", {"ingress_port": "x1"}, "drop")


def test_settings_validation_and_files(tmp_path):
    with pytest.raises(UserInputError, match="wred.max_cells: 500 must be between min_cells"):
        WredSettings(1000, 500, 10)
    with pytest.raises(UserInputError, match="not a percentage"):
        WredSettings(1000, 2000, 101)
    yml = tmp_path / "s.yaml"
    yml.write_text(
        "wred: {min_cells: 100, max_cells: 300, max_prob_percent: 20}\npfc: {skid_cells: 4000}\n"
    )
    s = load_settings(yml)
    assert s.wred == WredSettings(100, 300, 20) and s.pfc.skid_cells == 4000
    js = tmp_path / "s.json"
    js.write_text(json.dumps({"wred": {"min_cell": 1}}))
    with pytest.raises(UserInputError, match="Did you mean 'min_cells'"):
        load_settings(js)
    js.write_text(json.dumps({"queue_cell": 1}))
    with pytest.raises(UserInputError, match="Did you mean 'queue_cells'"):
        load_settings(js)
    assert ControlPlaneSettings().with_wred(max_prob_percent=5).wred == WredSettings(1000, 2000, 5)


def test_plan_is_empty_when_installed_matches(testbed, index):
    topo, chip = testbed
    desired = [e.canonical(index) for e in desired_entries(topo, chip, WredSettings())]
    first = plan(desired, [])
    assert len(first.inserts) == len(desired) and not first.modifies and not first.deletes
    assert plan(desired, desired).is_empty()
    # Order does not matter.
    assert plan(list(reversed(desired)), desired).is_empty()


def test_changed_wred_thresholds_only_modify(testbed, index):
    topo, chip = testbed
    old = desired_entries(topo, chip, WredSettings(1000, 2000, 100))
    new = desired_entries(topo, chip, WredSettings(800, 1600, 50))
    p = plan(new, old)
    assert not p.inserts and not p.deletes
    assert len(p.modifies) == 72
    assert all(e.params["min_cells"] == 800 for e in p.modifies)
    assert p.counts_by_table() == {
        "CassiniEgress.wred_profile": {"insert": 0, "modify": 72, "delete": 0}
    }
    kinds = [u.type for u in p.updates()]
    assert kinds == [UpdateType.MODIFY] * 72


def test_changed_topology_updates_in_place(testbed):
    topo, chip = testbed
    old = desired_entries(topo, chip, WredSettings())
    # A server gets a new NIC (new MAC): its rules move, nothing else changes.
    servers = list(topo.servers)
    servers[0] = dataclasses.replace(servers[0], mac="02:aa:00:00:00:01")
    topo2 = dataclasses.replace(topo, servers=tuple(servers))
    new = desired_entries(topo2, map_to_chip(topo2), WredSettings())
    p = plan(new, old)
    old_mac = int(topo.servers[0].mac.replace(":", ""), 16)
    new_mac = 0x02AA00000001
    assert p.deletes and len(p.deletes) == len(p.inserts)
    assert {e.match["dst_mac"] for e in p.deletes} == {old_mac}
    assert {e.match["dst_mac"] for e in p.inserts} == {new_mac}
    assert not p.modifies
    # Deletes are written before inserts.
    kinds = [u.type for u in p.updates()]
    assert kinds.index(UpdateType.INSERT) > max(
        i for i, k in enumerate(kinds) if k == UpdateType.DELETE
    )


def test_changed_egress_is_a_modify_and_conflicts_are_refused():
    a = TableEntry("t", {"k": 1}, "fwd", {"port": 1})
    b = TableEntry("t", {"k": 1}, "fwd", {"port": 2})
    c = TableEntry("t", {"k": 2}, "fwd", {"port": 2})
    p = plan([b, c], [a, c])
    assert p.modifies == (b,) and not p.inserts and not p.deletes
    with pytest.raises(UserInputError, match="two desired entries of t match"):
        plan([a, b], [])


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("queue_cells: .inf\n", r"s.yaml: queue_cells: expected an integer, got inf"),
        ("cell_bytes: '80'\n", r"s.yaml: cell_bytes: expected an integer, got '80'"),
        ("pfc: {enabled: 'no'}\n", r"s.yaml: pfc.enabled: expected true or false, got 'no'"),
        ("pfc: {priority: '3'}\n", r"s.yaml: pfc.priority: expected an integer, got '3'"),
        ("pfc: {priority: 9}\n", r"s.yaml: pfc.priority: 9 is outside 0..7"),
        ("wred: {min_cells: 5000}\n", r"s.yaml: wred.max_cells: 2000 must be between"),
    ],
)
def test_settings_files_with_wrong_types_or_ranges_name_the_file_and_field(tmp_path, doc, message):
    path = tmp_path / "s.yaml"
    path.write_text(doc)
    with pytest.raises(UserInputError, match=message):
        load_settings(path)


def test_tofino_artifacts_refuse_settings_they_cannot_write(tmp_path):
    # `queue_cells: .inf` became `QUEUE_MAX_CELLS = inf` (a NameError on the switch), and
    # `enabled: 'no'` turned PFC on: both are refused before anything is written.
    from emulation.cli import main

    for doc in ("queue_cells: .inf\n", "pfc: {enabled: 'no'}\n"):
        settings = tmp_path / "s.yaml"
        settings.write_text(doc)
        out = tmp_path / "out"
        assert main(["tofino", "artifacts", "--out", str(out), "--settings", str(settings)]) == 2
        assert not out.exists()
