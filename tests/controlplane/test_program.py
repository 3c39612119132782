"""`program_device` reconciles the tables the static program owns and leaves the
run-time tables (job classes, queue classes) to their installers, unless a full
reset is asked; against the in-process software target, read back over P4Runtime."""

from __future__ import annotations

import pytest

from controlplane.entries import TableEntry, Update, UpdateType
from controlplane.job_classes import JobSockets, job_class_entries
from controlplane.p4names import (
    FORWARD_ACTION,
    FORWARD_TABLE,
    JOB_BY_DST_TABLE,
    JOB_BY_SRC_TABLE,
    QUEUE_CLASS_BY_FLOW_TABLE,
    QUEUE_CLASS_TABLE,
)
from controlplane.program import (
    RUNTIME_TABLES,
    STATIC_TABLES,
    program_device,
    reconciled_tables,
    topology_entries,
)
from controlplane.queue_classes import Flow, queue_class_entries
from controlplane.session import P4RuntimeSession
from controlplane.settings import WredSettings
from emulation.cli import main
from topologies.chip_mapping import map_to_chip
from topologies.library import load_topology

TOPOLOGY = "leaf-spine:2:1:2"  # small: the test is about which tables, not how many entries
JOBS = [JobSockets("vgg19", (("10.0.0.1", 47000), ("10.0.0.2", 47001)))]
FLOW = Flow("10.0.0.1", "10.0.0.2", "tcp", 40000, 47001)
# A forwarding entry no topology compiles: a stale static entry the program must remove.
STALE = TableEntry(
    FORWARD_TABLE,
    {"ingress_port": 500, "dst_mac": 0x02AABBCCDDEE},
    FORWARD_ACTION,
    {"port": 1},
)


def _static(index):
    topo = load_topology(TOPOLOGY)
    return topology_entries(topo, map_to_chip(topo), WredSettings(), index)


def _runtime(index):
    """The job-class and queue-class entries a run installs, in full P4Info names."""
    entries = job_class_entries(JOBS) + queue_class_entries({46: 7}, {FLOW: 6})
    return [e.canonical(index) for e in entries]


def _held(session, tables):
    return {e for table in tables for e in session.read_table(table)}


def test_every_p4info_table_has_one_owner(index):
    tables = {t.name for t in index.tables}
    assert set(STATIC_TABLES) | set(RUNTIME_TABLES) == tables
    assert not set(STATIC_TABLES) & set(RUNTIME_TABLES)
    assert set(STATIC_TABLES) == {FORWARD_TABLE, "CassiniEgress.wred_profile"}


def test_reconciled_tables_are_the_static_ones_plus_those_given(index):
    static = _static(index)
    assert set(reconciled_tables(index, static)) == set(STATIC_TABLES)
    with_jobs = static + [e.canonical(index) for e in job_class_entries(JOBS)]
    assert set(reconciled_tables(index, with_jobs)) == {
        *STATIC_TABLES,
        JOB_BY_DST_TABLE,
        JOB_BY_SRC_TABLE,
    }
    assert set(reconciled_tables(index, static, clean=True)) == {t.name for t in index.tables}


def test_reprogram_keeps_runtime_entries_and_deletes_stale_static_one(device, index):
    static, runtime = _static(index), _runtime(index)
    with P4RuntimeSession.connect(device.address, 1, p4info=index) as session:
        program_device(session, static, index)
        session.write([Update(UpdateType.INSERT, e) for e in [*runtime, STALE]])
        assert STALE.canonical(index) in set(session.read_table(FORWARD_TABLE))

        result = program_device(session, static, index)

        assert result.plan.deletes == (STALE.canonical(index),)
        assert not result.plan.inserts and not result.plan.modifies
        assert _held(session, RUNTIME_TABLES) == set(runtime)
        assert _held(session, STATIC_TABLES) == set(static)
        assert len(runtime) == 6  # 2 sockets x (by_dst, by_src), one DSCP, one flow
        # The data plane still classifies by them.
        assert len(device.state.job_by_dst) == 2 and len(device.state.job_by_src) == 2


def test_clean_removes_runtime_entries_too(device, index):
    static, runtime = _static(index), _runtime(index)
    with P4RuntimeSession.connect(device.address, 1, p4info=index) as session:
        program_device(session, static, index)
        session.write([Update(UpdateType.INSERT, e) for e in [*runtime, STALE]])

        dry = program_device(session, static, index, dry_run=True, clean=True)
        assert set(dry.plan.deletes) == {*runtime, STALE.canonical(index)}
        assert _held(session, RUNTIME_TABLES) == set(runtime)  # a dry run writes nothing

        result = program_device(session, static, index, clean=True)

        assert set(result.plan.deletes) == {*runtime, STALE.canonical(index)}
        assert _held(session, RUNTIME_TABLES) == set()
        assert set(session.read_table()) == set(static)
        assert not device.state.job_by_dst and not device.state.job_by_src


def test_runtime_entries_given_are_reconciled_in_their_tables(device, index):
    """A caller that passes job classes wants exactly those: other jobs' entries go,
    the queue classes it did not pass stay."""
    static, runtime = _static(index), _runtime(index)
    other = [
        e.canonical(index)
        for e in job_class_entries([JobSockets("resnet", (("10.0.0.3", 47000),))])
    ]
    with P4RuntimeSession.connect(device.address, 1, p4info=index) as session:
        program_device(session, static, index)
        session.write([Update(UpdateType.INSERT, e) for e in runtime])

        program_device(session, static + other, index)

        assert _held(session, (JOB_BY_DST_TABLE, JOB_BY_SRC_TABLE)) == set(other)
        queue = {e for e in runtime if e.table in (QUEUE_CLASS_TABLE, QUEUE_CLASS_BY_FLOW_TABLE)}
        assert _held(session, (QUEUE_CLASS_TABLE, QUEUE_CLASS_BY_FLOW_TABLE)) == queue


@pytest.mark.parametrize("clean", [False, True])
def test_cli_program_clean_flag(device, index, capsys, clean):
    argv = ["program", "-t", TOPOLOGY, "--grpc", device.address, "--device-id", "1"]
    assert main(argv) == 0
    runtime = _runtime(index)
    with P4RuntimeSession.connect(device.address, 1, election_id=(0, 2), p4info=index) as s:
        s.write([Update(UpdateType.INSERT, e) for e in runtime])
    capsys.readouterr()

    assert main([*argv, *(["--clean"] if clean else [])]) == 0

    out = capsys.readouterr().out
    with P4RuntimeSession.connect(device.address, 1, election_id=None, p4info=index) as s:
        held = _held(s, RUNTIME_TABLES)
    if clean:
        assert held == set()
        assert f"{JOB_BY_DST_TABLE}: changed +0 inserted, ~0 modified, -2 deleted" in out
    else:
        assert held == set(runtime)
        assert "nothing to change" in out
