"""The P4Runtime session against the software target's gRPC server (a real P4Runtime device)."""

from __future__ import annotations

import threading

import pytest

from controlplane.compile import desired_entries
from controlplane.entries import TableEntry, Update, UpdateType
from controlplane.p4info import mac_to_int
from controlplane.program import program_device
from controlplane.reconcile import plan
from controlplane.session import ConnectionFailed, NotPrimaryError, P4RuntimeSession, WriteError
from controlplane.settings import WredSettings
from emulation.softswitch.p4runtime_service import serve
from tests.helpers.waiting import wait_for
from topologies.chip_mapping import forwarding_entries


def _desired(testbed, index, wred=None):
    topo, chip = testbed
    return [e.canonical(index) for e in desired_entries(topo, chip, wred or WredSettings())]


def test_program_default_testbed_then_rerun_is_empty(device, testbed, index):
    topo, chip = testbed
    desired = _desired(testbed, index)
    with P4RuntimeSession.connect(device.address, 1, p4info=index) as session:
        assert session.is_primary
        assert session.get_pipeline() is None
        result = program_device(session, desired, index)
        assert result.pipeline_pushed
        n_fwd = len(forwarding_entries(topo, chip))
        assert len(result.plan.inserts) == n_fwd + 72
        installed = session.read_table()
        assert len(installed) == n_fwd + 72
        assert set(installed) == set(desired)
        assert len(session.read_table("wred_profile")) == 72
        # The device's data plane holds what we wrote.
        assert len(device.state.forward) == n_fwd
        rule = forwarding_entries(topo, chip)[0]
        assert (
            device.state.forward[(rule.ingress_port, mac_to_int(rule.dst_mac).to_bytes(6, "big"))]
            == rule.egress_port
        )
        assert device.state.wred[chip.ports()[0]].min_cells == 1000
        # Second run: same pipeline, nothing to change.
        again = program_device(session, desired, index)
        assert not again.pipeline_pushed and again.plan.is_empty()
        assert again.installed_before == n_fwd + 72


def test_changed_wred_thresholds_are_modified_in_place(device, testbed, index):
    with P4RuntimeSession.connect(device.address, 1, p4info=index) as session:
        program_device(session, _desired(testbed, index), index)
        result = program_device(
            session,
            _desired(testbed, index, WredSettings(500, 900, 30)),
            index,
            change_thresholds=True,
        )
        assert not result.pipeline_pushed
        assert len(result.plan.modifies) == 72
        assert not result.plan.inserts and not result.plan.deletes
        port = testbed[1].ports()[5]
        wred = device.state.wred[port]
        assert (wred.min_cells, wred.max_cells, wred.max_prob_percent) == (500, 900, 30)
        assert program_device(
            session, _desired(testbed, index, WredSettings(500, 900, 30)), index
        ).plan.is_empty()


def test_two_sessions_to_two_devices_in_one_process(testbed, index):
    a, b = serve(device_id=1), serve(device_id=2)
    try:
        with (
            P4RuntimeSession.connect(a.address, 1, p4info=index) as sa,
            P4RuntimeSession.connect(b.address, 2, p4info=index) as sb,
        ):
            sa.set_pipeline(index)
            sb.set_pipeline(index)
            entry_a = TableEntry(
                "logical_forward",
                {"ingress_port": 1, "dst_mac": "02:00:00:00:00:02"},
                "set_egress_port",
                {"port": 2},
            )
            entry_b = TableEntry(
                "logical_forward",
                {"ingress_port": 1, "dst_mac": "02:00:00:00:00:02"},
                "set_egress_port",
                {"port": 9},
            )
            sa.write([Update(UpdateType.INSERT, entry_a)])
            sb.write([Update(UpdateType.INSERT, entry_b)])
            assert [e.params["port"] for e in sa.read_table("logical_forward")] == [2]
            assert [e.params["port"] for e in sb.read_table("logical_forward")] == [9]
            assert a.state.forward != b.state.forward
    finally:
        a.stop()
        b.stop()


def test_primary_backup_arbitration(device, index):
    entry = TableEntry(
        "wred_profile",
        {"egress_port": 4},
        "set_wred",
        {"min_cells": 1, "max_cells": 2, "max_prob": 3},
    )
    with P4RuntimeSession.connect(device.address, 1, election_id=(0, 10), p4info=index) as primary:
        primary.set_pipeline(index)
        with P4RuntimeSession.connect(
            device.address, 1, election_id=(0, 5), p4info=index
        ) as backup:
            assert primary.is_primary and not backup.is_primary
            assert backup.primary_election_id == (0, 10)
            with pytest.raises(NotPrimaryError, match="not primary"):
                backup.write([Update(UpdateType.INSERT, entry)])
            assert device.state.wred == {}
            # A higher election id takes over; the old primary learns it from the stream.
            with P4RuntimeSession.connect(
                device.address, 1, election_id=(1, 0), p4info=index
            ) as newer:
                assert newer.is_primary
                assert wait_for(lambda: not primary.is_primary)
                newer.write([Update(UpdateType.INSERT, entry)])
                assert device.state.wred[4].max_cells == 2
            # The newer one left: the highest remaining (10) is primary again.
            assert wait_for(lambda: primary.is_primary)
            # Reads are allowed for backups.
            assert len(backup.read_table("wred_profile")) == 1


def test_write_error_lists_each_failed_update(device, index):
    with P4RuntimeSession.connect(device.address, 1, p4info=index) as session:
        session.set_pipeline(index)
        entries = [
            TableEntry(
                "wred_profile",
                {"egress_port": p},
                "set_wred",
                {"min_cells": 1, "max_cells": 2, "max_prob": 3},
            )
            for p in (1, 2, 3)
        ]
        session.write([Update(UpdateType.INSERT, entries[1])])
        with pytest.raises(WriteError) as err:
            session.write([Update(UpdateType.INSERT, e) for e in entries], batch_size=2)
        details = err.value.details
        assert [(d.index, d.code) for d in details] == [(1, "ALREADY_EXISTS")]
        assert details[0].update.entry == entries[1]
        assert "egress_port" in str(err.value) and "ALREADY_EXISTS" in str(err.value)
        # The other updates (in both batches) went through.
        assert sorted(device.state.wred) == [1, 2, 3]
        with pytest.raises(WriteError) as err2:
            session.write(
                [
                    Update(
                        UpdateType.DELETE,
                        TableEntry(
                            "wred_profile",
                            {"egress_port": 99},
                            "set_wred",
                            {"min_cells": 1, "max_cells": 2, "max_prob": 3},
                        ),
                    )
                ]
            )
        assert err2.value.details[0].code == "NOT_FOUND"


def test_counters_are_read_back(device, index):
    with P4RuntimeSession.connect(device.address, 1, p4info=index) as session:
        session.set_pipeline(index)
        device.state.counter("CassiniEgress.ecn_marked")[7] = (11, 16500)
        samples = session.read_counters("ecn_marked", index=7)
        assert [(s.counter, s.index, s.packets, s.bytes) for s in samples] == [
            ("CassiniEgress.ecn_marked", 7, 11, 16500)
        ]
        everything = session.read_counters()
        assert {s.counter for s in everything} == {c.name for c in index.counters}
        assert len(everything) == 4 * 512 + 2 * 512 * 16  # the job counters: per (port, class)


def test_unreachable_device_is_one_clear_error():
    with pytest.raises(ConnectionFailed, match=r"127\.0\.0\.1:1 within 0\.3 s"):
        P4RuntimeSession.connect("127.0.0.1:1", 1, timeout=0.3)


def test_wrong_device_id_is_refused(device):
    with pytest.raises(ConnectionFailed, match="device 7"):
        P4RuntimeSession.connect(device.address, 7, timeout=2)


def test_close_stops_the_stream_thread(device, index):
    before = {t.name for t in threading.enumerate()}
    session = P4RuntimeSession.connect(device.address, 1, p4info=index)
    session.close()
    session.close()  # idempotent
    leftover = {
        t.name for t in threading.enumerate() if t.name.startswith("p4rt-stream-127")
    } - before
    assert not leftover


def test_plan_against_device_after_external_delete(device, testbed, index):
    desired = _desired(testbed, index)
    with P4RuntimeSession.connect(device.address, 1, p4info=index) as session:
        program_device(session, desired, index)
        victim = desired[0]
        session.write([Update(UpdateType.DELETE, victim)])
        p = plan(desired, session.read_table())
        assert p.inserts == (victim,) and not p.modifies and not p.deletes


def test_read_only_session_needs_no_election(device, index):
    entry = TableEntry(
        "wred_profile",
        {"egress_port": 8},
        "set_wred",
        {"min_cells": 1, "max_cells": 2, "max_prob": 3},
    )
    with P4RuntimeSession.connect(device.address, 1, election_id=(0, 1), p4info=index) as primary:
        primary.set_pipeline(index)
        primary.write([Update(UpdateType.INSERT, entry)])
        with P4RuntimeSession.connect(device.address, 1, election_id=None, p4info=index) as monitor:
            assert not monitor.is_primary
            assert monitor.read_table("wred_profile") == [entry.canonical(index)]
            assert len(monitor.read_counters("port_tx")) == 512
            with pytest.raises(NotPrimaryError, match="read-only"):
                monitor.write([Update(UpdateType.DELETE, entry)])
        # The controller was not disturbed.
        assert primary.is_primary
