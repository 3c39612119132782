"""The software target's Device and entry validation, called directly (no gRPC).

The dataplane is `LocalDataplane`, wrapped to record every batch it is given,
so a test can tell what reached the packet path and what did not.
"""

from __future__ import annotations

from typing import Any

import pytest
from google.rpc import code_pb2

from controlplane.p4info import P4InfoIndex
from controlplane.p4names import ECN_MARKED
from controlplane.proto.p4.v1 import p4runtime_pb2
from emulation.softswitch.arbitration import Session
from emulation.softswitch.device import Device
from emulation.softswitch.entry_validation import canonical_bytes, validate_table_entry
from emulation.softswitch.errors import EntryError
from emulation.softswitch.pipeline_check import check_pipeline
from emulation.softswitch.state import ForwardChange, WredChange
from tests.helpers.dataplane import RecordingDataplane
from tests.helpers.p4runtime import (
    DELETE,
    INSERT,
    MODIFY,
    Set,
    forward_entry,
    table_entity,
    update,
    wred_entry,
)

DEVICE_ID = 1
Atomicity = p4runtime_pb2.WriteRequest


@pytest.fixture
def dataplane() -> RecordingDataplane:
    return RecordingDataplane()


@pytest.fixture
def device(p4: P4InfoIndex, dataplane: RecordingDataplane) -> Device:
    return Device(DEVICE_ID, dataplane, p4)


def arbitrate(device: Device, low: int | None, peer: str = "") -> Session:
    session = Session(peer=peer)
    message = p4runtime_pb2.MasterArbitrationUpdate(device_id=DEVICE_ID)
    if low is not None:
        message.election_id.low = low
    device.arbitrate(session, message)
    return session


def last_status(session: Session) -> int:
    """The code of the newest arbitration message in a session's outbox (drains it)."""
    code = None
    while not session.outbox.empty():
        code = session.outbox.get_nowait().arbitration.status.code
    assert code is not None
    return code


def push(device: Device, p4: P4InfoIndex, low: int = 1, action: int = Set.VERIFY_AND_COMMIT) -> None:
    request = Set(device_id=DEVICE_ID, action=action)
    request.election_id.low = low
    request.config.p4info.CopyFrom(p4.p4info)
    device.set_pipeline(request)


def write(device: Device, *updates: Any, atomicity: int = Atomicity.CONTINUE_ON_ERROR) -> list:
    request = p4runtime_pb2.WriteRequest(device_id=DEVICE_ID, atomicity=atomicity)
    request.election_id.low = 1
    request.updates.extend(updates)
    return device.write(request)


def read(device: Device, *entities: Any) -> list[Any]:
    request = p4runtime_pb2.ReadRequest(device_id=DEVICE_ID)
    request.entities.extend(entities)
    return list(device.read(request).entities())


MAC = b"\x02\x00\x00\x00\x00\x02"


# --- arbitration ---------------------------------------------------------------------


def test_highest_election_id_is_primary_and_takes_over_on_disconnect(device: Device) -> None:
    low = arbitrate(device, 1, "low")
    assert last_status(low) == code_pb2.OK
    high = arbitrate(device, 5, "high")
    assert last_status(high) == code_pb2.OK
    assert last_status(low) == code_pb2.ALREADY_EXISTS  # told the primary changed
    assert device.primary_election_id() == 5
    device.remove_session(high)
    assert device.primary_election_id() == 1
    assert last_status(low) == code_pb2.OK


def test_arbitration_refuses_a_used_election_id_and_another_device(device: Device) -> None:
    arbitrate(device, 3)
    with pytest.raises(EntryError) as used:
        arbitrate(device, 3)
    assert used.value.code == code_pb2.INVALID_ARGUMENT and "already used" in used.value.message
    wrong = p4runtime_pb2.MasterArbitrationUpdate(device_id=DEVICE_ID + 1)
    with pytest.raises(EntryError) as other:
        device.arbitrate(Session(), wrong)
    assert other.value.code == code_pb2.NOT_FOUND and f"device {DEVICE_ID}" in other.value.message


def test_only_the_primary_may_push_or_write(device: Device, p4: P4InfoIndex) -> None:
    arbitrate(device, 2)
    arbitrate(device, 1)
    with pytest.raises(EntryError) as backup:
        push(device, p4, low=1)
    assert backup.value.code == code_pb2.PERMISSION_DENIED
    push(device, p4, low=2)
    request = p4runtime_pb2.WriteRequest(device_id=DEVICE_ID)
    request.election_id.low = 1
    request.updates.append(update(INSERT, forward_entry(p4, 1, MAC, 2)))
    with pytest.raises(EntryError, match="not the primary"):
        device.write(request)


# --- pipeline ---------------------------------------------------------------------------


def test_writes_need_a_pipeline_and_a_commit_rebuilds_the_dataplane(
    device: Device, p4: P4InfoIndex, dataplane: RecordingDataplane
) -> None:
    arbitrate(device, 1)
    with pytest.raises(EntryError) as none:
        write(device, update(INSERT, forward_entry(p4, 1, MAC, 2)))
    assert none.value.code == code_pb2.FAILED_PRECONDITION
    push(device, p4, action=Set.VERIFY_AND_SAVE)
    assert dataplane.batches == []  # saved, not committed: the packet path is untouched
    commit = Set(device_id=DEVICE_ID, action=Set.COMMIT)
    commit.election_id.low = 1
    device.set_pipeline(commit)
    assert len(dataplane.batches) == 1  # one rebuild: clear tables (no entries yet)
    got = device.get_pipeline(p4runtime_pb2.GetForwardingPipelineConfigRequest(device_id=1))
    assert got.config.p4info == p4.p4info


def test_reconcile_and_commit_keeps_the_entries(
    device: Device, p4: P4InfoIndex, dataplane: RecordingDataplane
) -> None:
    arbitrate(device, 1)
    push(device, p4)
    assert write(device, update(INSERT, forward_entry(p4, 1, MAC, 2))) == [None]
    push(device, p4, action=Set.RECONCILE_AND_COMMIT)
    assert dataplane.state.forward == {(1, MAC): 2}
    assert len(read(device, table_entity(p4runtime_pb2.TableEntry()))) == 1


# --- write, rollback, undo ----------------------------------------------------------------


def test_a_write_reaches_the_dataplane_as_one_batch(
    device: Device, p4: P4InfoIndex, dataplane: RecordingDataplane
) -> None:
    arbitrate(device, 1)
    push(device, p4)
    dataplane.batches.clear()
    results = write(
        device,
        update(INSERT, forward_entry(p4, 1, MAC, 2)),
        update(INSERT, wred_entry(p4, 2, 10, 20, 30)),
    )
    assert results == [None, None]
    assert len(dataplane.batches) == 1
    assert [type(c) for c in dataplane.batches[0]] == [ForwardChange, WredChange]
    assert dataplane.state.forward == {(1, MAC): 2}
    assert dataplane.state.wred[2].max_cells == 20


def test_continue_on_error_applies_the_good_updates(
    device: Device, p4: P4InfoIndex, dataplane: RecordingDataplane
) -> None:
    arbitrate(device, 1)
    push(device, p4)
    results = write(
        device,
        update(INSERT, forward_entry(p4, 1, MAC, 2)),
        update(DELETE, forward_entry(p4, 9, MAC, None)),  # not installed
    )
    assert results[0] is None and results[1] is not None
    assert results[1].code == code_pb2.NOT_FOUND
    assert dataplane.state.forward == {(1, MAC): 2}


def test_rollback_undoes_only_the_batch_and_never_reaches_the_dataplane(
    device: Device, p4: P4InfoIndex, dataplane: RecordingDataplane
) -> None:
    arbitrate(device, 1)
    push(device, p4)
    assert write(device, update(INSERT, forward_entry(p4, 1, MAC, 2))) == [None]
    before = read(device, table_entity(p4runtime_pb2.TableEntry()))
    dataplane.batches.clear()
    results = write(
        device,
        update(MODIFY, forward_entry(p4, 1, MAC, 3)),  # changes the installed entry
        update(INSERT, forward_entry(p4, 2, MAC, 4)),  # a new one
        update(INSERT, forward_entry(p4, 1, MAC, 5)),  # exists: fails
        atomicity=Atomicity.ROLLBACK_ON_ERROR,
    )
    assert results[2] is not None and results[2].code == code_pb2.ALREADY_EXISTS
    assert all(r is not None and r.code == code_pb2.ABORTED for r in results[:2])
    assert dataplane.batches == []  # a rolled-back batch never reaches the packet loop
    assert read(device, table_entity(p4runtime_pb2.TableEntry())) == before
    assert dataplane.state.forward == {(1, MAC): 2}


def test_rollback_restores_a_deleted_entry_and_a_const_default_stays(
    device: Device, p4: P4InfoIndex, dataplane: RecordingDataplane
) -> None:
    arbitrate(device, 1)
    push(device, p4)
    assert write(device, update(INSERT, wred_entry(p4, 4, 10, 20, 30))) == [None]
    before = read(device, table_entity(p4runtime_pb2.TableEntry()))
    wred = p4.table("CassiniEgress.wred_profile")
    default = p4runtime_pb2.TableEntry(table_id=wred.id, is_default_action=True)
    default.action.action.action_id = wred.const_default_action_id
    results = write(
        device,
        update(DELETE, wred_entry(p4, 4, 0, 0, 0)),
        update(MODIFY, default),  # the default action is const: refused
        atomicity=Atomicity.ROLLBACK_ON_ERROR,
    )
    assert results[1] is not None and results[1].code == code_pb2.PERMISSION_DENIED
    assert results[0] is not None and results[0].code == code_pb2.ABORTED
    assert read(device, table_entity(p4runtime_pb2.TableEntry())) == before
    assert dataplane.state.wred[4].min_cells == 10


# --- read ------------------------------------------------------------------------------------


def test_read_returns_canonical_entries_and_counter_snapshots(
    device: Device, p4: P4InfoIndex, dataplane: RecordingDataplane
) -> None:
    arbitrate(device, 1)
    push(device, p4)
    padded = forward_entry(p4, b"\x00\x01", MAC, b"\x00\x02")  # zero-padded bytestrings
    assert write(device, update(INSERT, padded)) == [None]
    (got,) = read(device, table_entity(p4runtime_pb2.TableEntry()))
    assert got.table_entry == forward_entry(p4, 1, MAC, 2)  # shortest form (spec 8.4)
    dataplane.state.counter(ECN_MARKED)[3] = (7, 10_500)
    counter = p4.counter(ECN_MARKED)
    entity = p4runtime_pb2.Entity()
    entity.counter_entry.counter_id = counter.id
    entity.counter_entry.index.index = 3
    (cell,) = read(device, entity)
    assert (cell.counter_entry.data.packet_count, cell.counter_entry.data.byte_count) == (
        7,
        10_500,
    )
    dataplane.state.counter(ECN_MARKED)[3] = (8, 12_000)  # a read is a snapshot, not a view
    assert cell.counter_entry.data.packet_count == 7


def test_a_bad_entity_fails_the_whole_read_naming_it(device: Device, p4: P4InfoIndex) -> None:
    arbitrate(device, 1)
    push(device, p4)
    bad = p4runtime_pb2.Entity()
    bad.counter_entry.counter_id = 12345
    with pytest.raises(EntryError) as failed:
        read(device, table_entity(p4runtime_pb2.TableEntry()), bad)
    assert failed.value.message.startswith("entity 1: unknown counter id 12345")


# --- entry validation and pipeline checking, as pure functions -------------------------------


def test_validation_refuses_what_the_spec_forbids(p4: P4InfoIndex) -> None:
    entry = forward_entry(p4, 1, b"\x01" * 7, 2)  # a 56-bit MAC
    with pytest.raises(EntryError, match="does not fit in bit<48>"):
        validate_table_entry(p4, entry, INSERT)
    no_action = forward_entry(p4, 1, MAC, None)
    with pytest.raises(EntryError, match="an INSERT needs an action"):
        validate_table_entry(p4, no_action, INSERT)
    assert validate_table_entry(p4, no_action, DELETE).entry.match  # a DELETE names its key only
    assert canonical_bytes(b"\x00\x00\x05", 9, "port") == b"\x05"
    assert canonical_bytes(b"\x00", 9, "port") == b"\x00"


def test_pipeline_check_names_a_foreign_table(p4: P4InfoIndex) -> None:
    assert check_pipeline(p4.p4info, p4).tables == p4.tables
    raw = type(p4.p4info)()
    raw.CopyFrom(p4.p4info)
    raw.tables[0].preamble.name = "CassiniIngress.logical_fwd"
    with pytest.raises(EntryError, match="Did you mean"):
        check_pipeline(raw, p4)
    assert check_pipeline(raw, None).table("CassiniIngress.logical_fwd")  # any program, unchecked
