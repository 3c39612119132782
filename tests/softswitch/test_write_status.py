"""A full table answers RESOURCE_EXHAUSTED, and a failed bulk Write names its first
failure's cause once: in the switch's status (write_status) and in the session's
WriteError (controlplane.write_errors), also for updates the cut details do not cover."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import grpc
import pytest
from google.rpc import code_pb2

from controlplane.entries import TableEntry, Update, UpdateType
from controlplane.p4info import P4InfoIndex, index_p4info, load_p4info
from controlplane.session import P4RuntimeSession, WriteError
from emulation.softswitch.errors import EntryError
from emulation.softswitch.p4runtime_service import RunningServer, serve
from emulation.softswitch.write_status import failure_summary, write_error_status
from tests.helpers.p4runtime import DEVICE_ID

FULL = "table CassiniIngress.logical_forward is full (300 entries)"


@pytest.fixture
def small() -> P4InfoIndex:
    """The Cassini P4Info with a forwarding table of 300 entries."""
    message = type(load_p4info().p4info)()
    message.CopyFrom(load_p4info().p4info)
    (table,) = [t for t in message.tables if t.preamble.name.endswith("logical_forward")]
    table.size = 300
    return index_p4info(message)


@pytest.fixture
def switch() -> Iterator[RunningServer]:
    with serve(DEVICE_ID, p4info_check=False) as running:
        yield running


def _forward(i: int, port: int = 2) -> Update:
    entry = TableEntry(
        "logical_forward", {"ingress_port": 1, "dst_mac": i + 1}, "set_egress_port", {"port": port}
    )
    return Update(UpdateType.INSERT, entry)


def test_the_status_names_the_first_cause_once_with_its_code() -> None:
    full = EntryError(code_pb2.RESOURCE_EXHAUSTED, FULL)
    results: list[EntryError | None] = [None] * 300 + [full] * 200
    status = write_error_status(results)
    assert status.code == code_pb2.UNKNOWN  # spec 12.5: a batch with failures
    assert status.message.startswith(
        f"200 of 500 updates failed (200 RESOURCE_EXHAUSTED); the first, update 300: "
        f"RESOURCE_EXHAUSTED: {FULL}"
    )
    assert status.message.count("is full") == 1
    assert "failing: update 300, 301" in status.message  # the details stop before them
    mixed = failure_summary([EntryError(code_pb2.ALREADY_EXISTS, "there"), None, full, full])
    assert mixed.startswith("3 of 4 updates failed (2 RESOURCE_EXHAUSTED, 1 ALREADY_EXISTS)")
    with pytest.raises(ValueError, match="no update failed"):
        failure_summary([None])


def test_a_table_overflow_is_resource_exhausted_for_every_update_once_said(
    switch: RunningServer, small: P4InfoIndex
) -> None:
    """1,200 inserts into a table of 300, 500 a batch: the table fills in the middle of
    the first batch, past what its cut details cover, yet every failed update is
    RESOURCE_EXHAUSTED (before: 554 UNKNOWN beside 346 RESOURCE_EXHAUSTED) and the
    message says the cause once, on one line."""
    with P4RuntimeSession.connect(switch.address, DEVICE_ID, p4info=small) as session:
        session.set_pipeline(small)
        with pytest.raises(WriteError) as failed:
            session.write([_forward(i) for i in range(1200)])
        details = failed.value.details
        assert [d.index for d in details] == list(range(300, 1200))
        assert Counter(d.code for d in details) == {"RESOURCE_EXHAUSTED": 900}
        # The switch words the first ten failures only; the rest carry their code.
        assert details[0].message == FULL and {d.message for d in details} <= {FULL, ""}
        message = str(failed.value)
        assert "\n" not in message and message.count("is full") == 1
        assert message.startswith(
            "900 of 1200 update(s) failed (900 RESOURCE_EXHAUSTED); the first, #300 INSERT "
            "logical_forward {'dst_mac': 301, 'ingress_port': 1}"
        )
        assert message.endswith(f"RESOURCE_EXHAUSTED: {FULL}")
        assert len(session.read_table("logical_forward")) == 300


def test_other_causes_keep_their_code_and_are_named_once_each(
    switch: RunningServer, small: P4InfoIndex
) -> None:
    """A full table beside entries that exist with another action: the message names the
    first failure of each code; a delete that makes room lets a later insert in."""
    with P4RuntimeSession.connect(switch.address, DEVICE_ID, p4info=small) as session:
        session.set_pipeline(small)
        session.write([_forward(i) for i in range(299)])
        updates = [_forward(5, port=3), _forward(299), _forward(300), _forward(301)]
        with pytest.raises(WriteError) as failed:
            session.write(updates, batch_size=2)
        codes = [(d.index, d.code) for d in failed.value.details]
        assert codes == [
            (0, "ALREADY_EXISTS"),
            (2, "RESOURCE_EXHAUSTED"),
            (3, "RESOURCE_EXHAUSTED"),
        ]
        message = str(failed.value)
        assert message.startswith(
            "3 of 4 update(s) failed (2 RESOURCE_EXHAUSTED, 1 ALREADY_EXISTS)"
        )
        assert message.count("already exists") == 1 and message.count("is full") == 1
        room = [Update(UpdateType.DELETE, _forward(0).entry), _forward(300)]
        session.write(room)  # no error: the delete made room
        assert len(session.read_table("logical_forward")) == 300


def test_a_rejected_rpc_is_not_mistaken_for_a_full_table(
    switch: RunningServer, small: P4InfoIndex
) -> None:
    """Too many updates in one Write fail the RPC whole, RESOURCE_EXHAUSTED without
    details: each update keeps the RPC's own cause, not a full table's."""
    with P4RuntimeSession.connect(switch.address, DEVICE_ID, p4info=small) as session:
        session.set_pipeline(small)
        with pytest.raises(WriteError) as failed:
            session.write([_forward(i) for i in range(10_001)], batch_size=10_001)
        details = failed.value.details
        assert len(details) == 10_001
        assert {d.message for d in details} == {
            "10001 updates in one Write; this target takes at most 10000 (split the batch)"
        }
        assert {d.code for d in details} == {grpc.StatusCode.RESOURCE_EXHAUSTED.name}
