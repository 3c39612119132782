"""The software target's P4Runtime service, driven by real gRPC calls over 127.0.0.1."""

from __future__ import annotations

from typing import Any

import grpc
import numpy as np
import pytest
from google.rpc import code_pb2

from controlplane.p4info import P4InfoIndex
from controlplane.proto.p4.config.v1 import p4info_pb2
from controlplane.proto.p4.v1 import p4runtime_pb2
from emulation.softswitch.p4runtime_service import RunningServer, serve
from emulation.softswitch.state import (
    ClearTables,
    ForwardChange,
    WredProfile,
)
from tests.helpers.dataplane import RecordingDataplane
from tests.helpers.p4runtime import (
    DELETE,
    DEVICE_ID,
    INSERT,
    MODIFY,
    TIMEOUT,
    Client,
    Set,
    expect_rpc_error,
    forward_entry,
    table_entity,
    update,
    wred_entry,
    write_errors,
)
from topologies.errors import UserInputError

MAC_A = bytes.fromhex("020000000001")
MAC_B = bytes.fromhex("020000000002")


# --- capabilities and arbitration -----------------------------------------------------


def test_capabilities_reports_the_api_version_we_implement(
    server: RunningServer, clients: Any
) -> None:
    from emulation.softswitch.p4runtime_service import P4RUNTIME_API_VERSION

    reply = clients().stub.Capabilities(p4runtime_pb2.CapabilitiesRequest(), timeout=TIMEOUT)
    assert reply.p4runtime_api_version == P4RUNTIME_API_VERSION == "1.4.1"
    assert server.address.startswith("127.0.0.1:") and not server.address.endswith(":0")


def test_highest_election_id_is_primary_and_backups_learn_it(clients: Any) -> None:
    a, b = clients(), clients()
    first = a.arbitrate(5)
    assert first.status.code == code_pb2.OK and first.election_id.low == 5
    backup = b.arbitrate(3)
    assert backup.status.code == code_pb2.ALREADY_EXISTS
    assert backup.election_id.low == 5  # the primary's id, not the backup's own
    # A higher id takes over: both hear about it.
    c = clients()
    assert c.arbitrate(9).status.code == code_pb2.OK
    assert a.next_arbitration().status.code == code_pb2.ALREADY_EXISTS
    note_b = b.next_arbitration()
    assert note_b.status.code == code_pb2.ALREADY_EXISTS and note_b.election_id.low == 9


def test_primary_disconnect_promotes_next_highest(server: RunningServer, clients: Any) -> None:
    a, b = clients(), clients()
    a.arbitrate(2)
    assert b.arbitrate(1).status.code == code_pb2.ALREADY_EXISTS
    a.close()
    promoted = b.next_arbitration()
    assert promoted.status.code == code_pb2.OK and promoted.election_id.low == 1
    assert server.device.primary_election_id("") == 1


def test_backup_cannot_write_or_push_pipeline(
    primary: Client, clients: Any, p4: P4InfoIndex
) -> None:
    backup = clients()
    assert backup.arbitrate(4).status.code == code_pb2.ALREADY_EXISTS
    err = expect_rpc_error(
        grpc.StatusCode.PERMISSION_DENIED,
        backup.write,
        update(INSERT, forward_entry(p4, 1, MAC_A, 2)),
    )
    assert "not the primary" in err.details()
    expect_rpc_error(grpc.StatusCode.PERMISSION_DENIED, backup.set_pipeline, p4.p4info)
    # Reads need no election.
    assert backup.read(table_entity(p4runtime_pb2.TableEntry())) == []


def test_wrong_device_id_ends_the_stream_with_not_found(clients: Any) -> None:
    client = clients()
    with pytest.raises(grpc.RpcError) as info:
        client.arbitrate(1, device_id=99)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    assert "99" in info.value.details()


def test_duplicate_election_id_is_invalid_argument(clients: Any) -> None:
    a, b = clients(), clients()
    a.arbitrate(3)
    with pytest.raises(grpc.RpcError) as info:
        b.arbitrate(3)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # The first client is unaffected and still primary.
    a.arbitrate(3)


def test_roles_elect_primaries_independently(clients: Any) -> None:
    a, b = clients(), clients()
    assert a.arbitrate(1, role="te").status.code == code_pb2.OK
    reply = b.arbitrate(1, role="ecn")  # same id, other role: allowed
    assert reply.status.code == code_pb2.OK and reply.role.name == "ecn"


def test_packet_out_is_dropped_and_counted(server: RunningServer, primary: Client) -> None:
    packet = p4runtime_pb2.StreamMessageRequest()
    packet.packet.payload = b"\x00" * 64
    primary.send(packet)
    primary.arbitrate(10)  # a round trip on the stream: the PacketOut was handled before
    assert server.device.packet_outs_dropped == 1


# --- pipeline -------------------------------------------------------------------------


def test_pipeline_push_and_get_round_trip(clients: Any, p4: P4InfoIndex) -> None:
    client = clients()
    client.arbitrate(1)
    get = p4runtime_pb2.GetForwardingPipelineConfigRequest
    before = client.stub.GetForwardingPipelineConfig(get(device_id=DEVICE_ID), timeout=TIMEOUT)
    assert not before.HasField("config")
    client.set_pipeline(p4.p4info, cookie=0xC0FFEE)
    full = client.stub.GetForwardingPipelineConfig(get(device_id=DEVICE_ID), timeout=TIMEOUT).config
    assert full.p4info == p4.p4info and full.p4_device_config == b"opaque"
    assert full.cookie.cookie == 0xC0FFEE
    info_only = client.stub.GetForwardingPipelineConfig(
        get(device_id=DEVICE_ID, response_type=get.P4INFO_AND_COOKIE), timeout=TIMEOUT
    ).config
    assert info_only.p4info == p4.p4info and info_only.p4_device_config == b""
    cookie_only = client.stub.GetForwardingPipelineConfig(
        get(device_id=DEVICE_ID, response_type=get.COOKIE_ONLY), timeout=TIMEOUT
    ).config
    assert cookie_only.cookie.cookie == 0xC0FFEE and not cookie_only.HasField("p4info")
    expect_rpc_error(
        grpc.StatusCode.NOT_FOUND,
        client.stub.GetForwardingPipelineConfig,
        get(device_id=3),
        timeout=TIMEOUT,
    )


def test_read_and_write_before_a_pipeline_fail_precondition(clients: Any, p4: P4InfoIndex) -> None:
    client = clients()
    client.arbitrate(1)
    expect_rpc_error(
        grpc.StatusCode.FAILED_PRECONDITION, client.read, table_entity(p4runtime_pb2.TableEntry())
    )
    expect_rpc_error(
        grpc.StatusCode.FAILED_PRECONDITION,
        client.write,
        update(INSERT, forward_entry(p4, 1, MAC_A, 2)),
    )


def _foreign_p4info(p4: P4InfoIndex) -> Any:
    foreign = p4info_pb2.P4Info()
    foreign.CopyFrom(p4.p4info)
    extra = foreign.tables.add()
    extra.preamble.id, extra.preamble.name = 33554499, "MyIngress.ipv4_lpm"
    field = extra.match_fields.add(id=1, name="hdr.ipv4.dstAddr", bitwidth=32)
    field.match_type = p4info_pb2.MatchField.LPM
    extra.action_refs.add(id=p4.action("NoAction").id)
    return foreign


def test_foreign_p4info_is_rejected_naming_the_object(clients: Any, p4: P4InfoIndex) -> None:
    client = clients()
    client.arbitrate(1)
    err = expect_rpc_error(
        grpc.StatusCode.INVALID_ARGUMENT, client.set_pipeline, _foreign_p4info(p4)
    )
    assert "MyIngress.ipv4_lpm" in err.details()
    narrow = p4info_pb2.P4Info()
    narrow.CopyFrom(p4.p4info)
    narrow.tables[0].match_fields[1].bitwidth = 32  # dst_mac as bit<32>
    err = expect_rpc_error(grpc.StatusCode.INVALID_ARGUMENT, client.set_pipeline, narrow)
    assert "dst_mac" in err.details() and "logical_forward" in err.details()
    with_register = p4info_pb2.P4Info()
    with_register.CopyFrom(p4.p4info)
    register = with_register.registers.add()
    register.preamble.id, register.preamble.name = 369098753, "MyIngress.reg"
    err = expect_rpc_error(grpc.StatusCode.INVALID_ARGUMENT, client.set_pipeline, with_register)
    assert "MyIngress.reg" in err.details()
    # VERIFY alone checks without installing anything.
    client.set_pipeline(p4.p4info, action=Set.VERIFY)
    expect_rpc_error(
        grpc.StatusCode.FAILED_PRECONDITION, client.read, table_entity(p4runtime_pb2.TableEntry())
    )


def test_verify_and_commit_clears_entries_reconcile_keeps_them(
    server: RunningServer, primary: Client, p4: P4InfoIndex
) -> None:
    primary.write(update(INSERT, forward_entry(p4, 1, MAC_A, 2)))
    # Another compile of the same program: different ids, same names. Entries move over.
    renumbered = p4info_pb2.P4Info()
    renumbered.CopyFrom(p4.p4info)
    renumbered.tables[0].preamble.id = 33554440
    primary.set_pipeline(renumbered, action=Set.RECONCILE_AND_COMMIT)
    (entity,) = primary.read(table_entity(p4runtime_pb2.TableEntry()))
    assert entity.table_entry.table_id == 33554440
    assert server.state.forward == {(1, MAC_A): 2}
    primary.set_pipeline(p4.p4info)
    assert primary.read(table_entity(p4runtime_pb2.TableEntry())) == []
    assert server.state.forward == {}


def test_save_then_commit(server: RunningServer, primary: Client, p4: P4InfoIndex) -> None:
    commit = Set(device_id=DEVICE_ID, action=Set.COMMIT)
    commit.election_id.low = 10
    expect_rpc_error(grpc.StatusCode.NOT_FOUND, primary.stub.SetForwardingPipelineConfig, commit)
    # COMMIT realizes the saved config; it takes none of its own.
    expect_rpc_error(
        grpc.StatusCode.INVALID_ARGUMENT, primary.set_pipeline, p4.p4info, action=Set.COMMIT
    )
    primary.write(update(INSERT, forward_entry(p4, 1, MAC_A, 2)))
    primary.set_pipeline(p4.p4info, action=Set.VERIFY_AND_SAVE)
    primary.write(update(INSERT, forward_entry(p4, 3, MAC_B, 4)))
    assert server.state.forward == {(1, MAC_A): 2}  # the dataplane waits for COMMIT
    primary.stub.SetForwardingPipelineConfig(commit, timeout=TIMEOUT)
    assert server.state.forward == {(3, MAC_B): 4}


# --- write ------------------------------------------------------------------------------


def test_insert_modify_delete_reach_the_dataplane(
    server: RunningServer, primary: Client, p4: P4InfoIndex
) -> None:
    primary.write(
        update(INSERT, forward_entry(p4, 1, MAC_A, 2)),
        update(INSERT, wred_entry(p4, 2, 1000, 2000, 10)),
    )
    assert server.state.forward == {(1, MAC_A): 2}
    assert server.state.wred == {2: WredProfile(1000, 2000, 10)}
    primary.write(
        update(MODIFY, forward_entry(p4, 1, MAC_A, 5)),
        update(MODIFY, wred_entry(p4, 2, 10, 20, 100)),
    )
    assert server.state.forward == {(1, MAC_A): 5}
    assert server.state.wred == {2: WredProfile(10, 20, 100)}
    # Modify to drop: the packet path drops on a missing key.
    drop = forward_entry(p4, 1, MAC_A, None)
    drop.action.action.action_id = p4.action("CassiniIngress.drop").id
    primary.write(update(MODIFY, drop))
    assert server.state.forward == {}
    primary.write(
        update(DELETE, forward_entry(p4, 1, MAC_A, None)),
        update(DELETE, wred_entry(p4, 2, 0, 0, 0)),
    )
    assert server.state.wred == {}
    assert primary.read(table_entity(p4runtime_pb2.TableEntry())) == []


def test_duplicate_insert_and_missing_modify_delete(primary: Client, p4: P4InfoIndex) -> None:
    entry = forward_entry(p4, 1, MAC_A, 2)
    primary.write(update(INSERT, entry))
    cases = [
        (update(INSERT, entry), code_pb2.ALREADY_EXISTS),
        (update(MODIFY, forward_entry(p4, 9, MAC_A, 2)), code_pb2.NOT_FOUND),
        (update(DELETE, forward_entry(p4, 9, MAC_A, None)), code_pb2.NOT_FOUND),
    ]
    for one, code in cases:
        with pytest.raises(grpc.RpcError) as info:
            primary.write(one)
        ((got, message),) = write_errors(info.value)
        assert got == code, message
        assert "logical_forward" in message


def _bad_updates(p4: P4InfoIndex) -> list[tuple[str, Any, int, str]]:
    """(label, update, expected code, word the message must contain)."""
    bad_table = forward_entry(p4, 1, MAC_A, 2)
    bad_table.table_id = 33554999
    bad_action = forward_entry(p4, 1, MAC_A, 2)
    bad_action.action.action.action_id = p4.action("CassiniEgress.set_wred").id
    wide_port = forward_entry(p4, 1, MAC_A, b"\x02\x00")  # 512 needs 10 bits
    wide_key = forward_entry(p4, b"\x00\x00\x02\x00", MAC_A, 2)  # padded, and still too wide
    long_mac = forward_entry(p4, 1, b"\x01" + MAC_A, 2)
    missing_field = forward_entry(p4, 1, MAC_A, 2)
    del missing_field.match[1]
    bad_field_id = forward_entry(p4, 1, MAC_A, 2)
    bad_field_id.match[1].field_id = 9
    ternary = forward_entry(p4, 1, MAC_A, 2)
    ternary.match[1].ternary.value, ternary.match[1].ternary.mask = MAC_A, b"\xff" * 6
    missing_param = forward_entry(p4, 1, MAC_A, 2)
    del missing_param.action.action.params[0]
    extra_param = forward_entry(p4, 1, MAC_A, 2)
    extra_param.action.action.params.add(param_id=7, value=b"\x01")
    with_priority = forward_entry(p4, 1, MAC_A, 2)
    with_priority.priority = 3
    no_action = forward_entry(p4, 1, MAC_A, None)
    empty_value = forward_entry(p4, b"", MAC_A, 2)
    default_only = wred_entry(p4, 1, 1, 2, 3)
    default_only.action.action.Clear()
    default_only.action.action.action_id = p4.action("NoAction").id
    const_default = p4runtime_pb2.TableEntry(
        table_id=p4.table("logical_forward").id, is_default_action=True
    )
    const_default.action.action.action_id = p4.action("CassiniIngress.drop").id
    insert_default = p4runtime_pb2.TableEntry(
        table_id=p4.table("wred_profile").id, is_default_action=True
    )
    invalid = code_pb2.INVALID_ARGUMENT
    return [
        ("unknown table", update(INSERT, bad_table), invalid, "33554999"),
        ("action of another table", update(INSERT, bad_action), invalid, "set_wred"),
        ("param too wide", update(INSERT, wide_port), invalid, "port"),
        ("padded key too wide", update(INSERT, wide_key), invalid, "ingress_port"),
        ("mac too long", update(INSERT, long_mac), invalid, "dst_mac"),
        ("exact field missing", update(INSERT, missing_field), invalid, "dst_mac"),
        ("unknown field id", update(INSERT, bad_field_id), invalid, "id 9"),
        ("ternary on exact", update(INSERT, ternary), invalid, "dst_mac"),
        ("missing param", update(INSERT, missing_param), invalid, "port"),
        ("unknown param", update(INSERT, extra_param), invalid, "id 7"),
        ("priority on exact table", update(INSERT, with_priority), invalid, "priority"),
        ("insert without action", update(INSERT, no_action), invalid, "action"),
        ("empty bytestring", update(INSERT, empty_value), invalid, "ingress_port"),
        (
            "@defaultonly action in entry",
            update(INSERT, default_only),
            code_pb2.PERMISSION_DENIED,
            "NoAction",
        ),
        (
            "const default action",
            update(MODIFY, const_default),
            code_pb2.PERMISSION_DENIED,
            "const",
        ),
        ("insert of default entry", update(INSERT, insert_default), invalid, "default"),
    ]


@pytest.mark.parametrize("index", range(16))
def test_bad_updates_are_refused_with_a_message_naming_the_field(
    server: RunningServer, primary: Client, p4: P4InfoIndex, index: int
) -> None:
    label, bad, code, word = _bad_updates(p4)[index]
    with pytest.raises(grpc.RpcError) as info:
        primary.write(bad)
    ((got, message),) = write_errors(info.value)
    assert got == code, f"{label}: {code_pb2.Code.Name(got)} {message}"
    assert word in message, f"{label}: {message}"
    assert server.state.forward == {} and server.state.wred == {}


def test_batch_applies_good_updates_and_reports_each(
    server: RunningServer, primary: Client, p4: P4InfoIndex
) -> None:
    bad = forward_entry(p4, 2, MAC_A, b"\x7f\xff")
    with pytest.raises(grpc.RpcError) as info:
        primary.write(
            update(INSERT, forward_entry(p4, 1, MAC_A, 3)),
            update(INSERT, bad),
            update(INSERT, forward_entry(p4, 3, MAC_B, 4)),
        )
    errors = write_errors(info.value)
    assert [code for code, _ in errors] == [code_pb2.OK, code_pb2.INVALID_ARGUMENT, code_pb2.OK]
    assert errors[0][1] == "" and "port" in errors[1][1]
    assert server.state.forward == {(1, MAC_A): 3, (3, MAC_B): 4}


def test_rollback_on_error_applies_nothing(
    server: RunningServer, primary: Client, p4: P4InfoIndex
) -> None:
    primary.write(update(INSERT, forward_entry(p4, 9, MAC_B, 9)))
    rollback = p4runtime_pb2.WriteRequest.ROLLBACK_ON_ERROR
    with pytest.raises(grpc.RpcError) as info:
        primary.write(
            update(INSERT, forward_entry(p4, 1, MAC_A, 3)),
            update(DELETE, forward_entry(p4, 9, MAC_B, None)),
            update(INSERT, forward_entry(p4, 1, MAC_A, 3)),  # duplicate of the first
            atomicity=rollback,
        )
    codes = [code for code, _ in write_errors(info.value)]
    assert codes == [code_pb2.ABORTED, code_pb2.ABORTED, code_pb2.ALREADY_EXISTS]
    assert server.state.forward == {(9, MAC_B): 9}
    assert len(primary.read(table_entity(p4runtime_pb2.TableEntry()))) == 1


def test_rollback_restores_modified_entries_and_sends_nothing_to_the_dataplane(
    p4: P4InfoIndex,
) -> None:
    """A rolled-back batch never reaches the packet path: no emptied table, no counter reset."""
    recorder = RecordingDataplane()
    with serve(DEVICE_ID, dataplane=recorder) as running:
        client = Client(running.address)
        client.arbitrate(1)
        client.set_pipeline(p4.p4info)
        client.write(update(INSERT, forward_entry(p4, 9, MAC_B, 9)))
        before = list(recorder.batches)
        for atomicity in (
            p4runtime_pb2.WriteRequest.ROLLBACK_ON_ERROR,
            p4runtime_pb2.WriteRequest.DATAPLANE_ATOMIC,
        ):
            with pytest.raises(grpc.RpcError):
                client.write(
                    update(MODIFY, forward_entry(p4, 9, MAC_B, 5)),
                    update(INSERT, forward_entry(p4, 1, MAC_A, 3)),
                    update(INSERT, forward_entry(p4, 1, MAC_A, 3)),  # duplicate: fails
                    atomicity=atomicity,
                )
        assert recorder.batches == before
        (entity,) = client.read(table_entity(p4runtime_pb2.TableEntry()))
        assert entity.table_entry.action.action.params[0].value == b"\x09"  # not 5
        # A good DATAPLANE_ATOMIC batch reaches the packet path as one batch.
        client.write(
            update(INSERT, forward_entry(p4, 1, MAC_A, 3)),
            update(DELETE, forward_entry(p4, 9, MAC_B, None)),
            atomicity=p4runtime_pb2.WriteRequest.DATAPLANE_ATOMIC,
        )
        assert recorder.batches[-1] == [
            ForwardChange(1, MAC_A, 3),
            ForwardChange(9, MAC_B, None),
        ]
        assert not any(isinstance(c, ClearTables) for batch in recorder.batches[1:] for c in batch)
        client.close()


def test_table_size_limit_is_resource_exhausted(clients: Any, p4: P4InfoIndex) -> None:
    small = p4info_pb2.P4Info()
    small.CopyFrom(p4.p4info)
    small.tables[1].size = 2  # wred_profile
    with serve(DEVICE_ID, p4info_check=False) as running:
        client = Client(running.address)
        try:
            client.arbitrate(1)
            client.set_pipeline(small)
            client.write(
                update(INSERT, wred_entry(p4, 1, 1, 2, 3)),
                update(INSERT, wred_entry(p4, 2, 1, 2, 3)),
            )
            with pytest.raises(grpc.RpcError) as info:
                client.write(update(INSERT, wred_entry(p4, 3, 1, 2, 3)))
            ((code, message),) = write_errors(info.value)
            assert code == code_pb2.RESOURCE_EXHAUSTED and "wred_profile" in message
            assert sorted(running.state.wred) == [1, 2]
        finally:
            client.close()


# --- read -------------------------------------------------------------------------------


def test_read_wildcards_and_exact_entries(primary: Client, p4: P4InfoIndex) -> None:
    first = forward_entry(p4, 1, MAC_A, 2)
    first.controller_metadata = 42
    first.metadata = b"from-test"
    padded = forward_entry(p4, b"\x00\x03", MAC_B, b"\x00\x04")  # non-canonical but in range
    wred = wred_entry(p4, 2, 1000, 2000, 10)
    primary.write(update(INSERT, first), update(INSERT, padded), update(INSERT, wred))

    everything = primary.read(table_entity(p4runtime_pb2.TableEntry()))
    assert len(everything) == 3
    forward_id = p4.table("logical_forward").id
    only_forward = primary.read(table_entity(p4runtime_pb2.TableEntry(table_id=forward_id)))
    assert len(only_forward) == 2
    (one,) = primary.read(table_entity(forward_entry(p4, 1, MAC_A, None)))
    assert one.table_entry == first  # what was written, including priority 0 and cookies
    (canonical,) = primary.read(table_entity(forward_entry(p4, 3, MAC_B, None)))
    assert canonical.table_entry.match[0].exact.value == b"\x03"  # shortest form (spec 8.4)
    assert canonical.table_entry.action.action.params[0].value == b"\x04"
    (stored_wred,) = primary.read(
        table_entity(p4runtime_pb2.TableEntry(table_id=p4.table("wred_profile").id))
    )
    assert [p.value for p in stored_wred.table_entry.action.action.params] == [
        b"\x03\xe8",
        b"\x07\xd0",
        b"\x0a",
    ]
    assert primary.read(table_entity(forward_entry(p4, 5, MAC_A, None))) == []
    default = p4runtime_pb2.TableEntry(table_id=forward_id, is_default_action=True)
    (got_default,) = primary.read(table_entity(default))
    assert got_default.table_entry.action.action.action_id == p4.action("CassiniIngress.drop").id
    bad = p4runtime_pb2.TableEntry(table_id=123)
    expect_rpc_error(grpc.StatusCode.INVALID_ARGUMENT, primary.read, table_entity(bad))


def test_counters_read_back_what_the_packet_path_counted(
    server: RunningServer, primary: Client, p4: P4InfoIndex
) -> None:
    rx = p4.counter("CassiniIngress.port_rx")
    marked = p4.counter("CassiniEgress.ecn_marked")
    server.state.counter(rx.name)[5] += (3, 4500)
    server.state.counter(marked.name)[7] += (2, 3000)

    def counter(counter_id: int, index: int | None = None) -> Any:
        entity = p4runtime_pb2.Entity()
        entity.counter_entry.counter_id = counter_id
        if index is not None:
            entity.counter_entry.index.index = index
        return entity

    (cell,) = primary.read(counter(rx.id, 5))
    assert (cell.counter_entry.data.packet_count, cell.counter_entry.data.byte_count) == (3, 4500)
    whole = primary.read(counter(marked.id))
    assert len(whole) == marked.size
    nonzero = {
        e.counter_entry.index.index: e.counter_entry.data.packet_count
        for e in whole
        if e.counter_entry.data.packet_count
    }
    assert nonzero == {7: 2}
    everything = primary.read(counter(0))
    assert len(everything) == sum(c.size for c in p4.counters)
    assert {e.counter_entry.counter_id for e in everything} == {c.id for c in p4.counters}
    expect_rpc_error(grpc.StatusCode.OUT_OF_RANGE, primary.read, counter(rx.id, 512))

    # Writes set one cell, or every cell when the index is unset.
    one = p4runtime_pb2.CounterEntry(counter_id=rx.id)
    one.index.index = 5
    one.data.packet_count, one.data.byte_count = 10, 20
    primary.write(update(MODIFY, one))
    assert server.state.counter(rx.name)[5].tolist() == [10, 20]
    reset = p4runtime_pb2.CounterEntry(counter_id=marked.id)
    reset.data.SetInParent()
    primary.write(update(MODIFY, reset))
    assert not np.any(server.state.counter(marked.name))
    with pytest.raises(grpc.RpcError) as info:
        primary.write(update(INSERT, one))
    assert write_errors(info.value)[0][0] == code_pb2.INVALID_ARGUMENT


# --- servers ------------------------------------------------------------------------------


def test_two_servers_in_one_process_are_independent(p4: P4InfoIndex) -> None:
    with serve(1) as one, serve(2) as two:
        assert one.address != two.address and one.state is not two.state
        a, b = Client(one.address, 1), Client(two.address, 2)
        try:
            for client in (a, b):
                assert client.arbitrate(1).status.code == code_pb2.OK
                client.set_pipeline(p4.p4info)
            a.write(update(INSERT, forward_entry(p4, 1, MAC_A, 2)))
            assert one.state.forward == {(1, MAC_A): 2} and two.state.forward == {}
            assert b.read(table_entity(p4runtime_pb2.TableEntry())) == []
        finally:
            a.close()
            b.close()


def test_busy_port_is_a_user_error(server: RunningServer) -> None:
    with pytest.raises(UserInputError, match=server.address.rsplit(":", 1)[1]):
        serve(DEVICE_ID, address=server.address)


def test_unset_election_id_is_a_backup_with_no_primary(clients: Any) -> None:
    client = clients()
    client.stream = client.stub.StreamChannel(client._requests())
    request = p4runtime_pb2.StreamMessageRequest()
    request.arbitration.device_id = DEVICE_ID  # election_id left unset: never primary
    client.send(request)
    reply = client.next_arbitration()
    assert reply.status.code == code_pb2.NOT_FOUND and not reply.HasField("election_id")


def test_arbitration_pipeline_and_writes_are_logged(
    caplog: pytest.LogCaptureFixture, clients: Any, p4: P4InfoIndex
) -> None:
    caplog.set_level("INFO", logger="emulation.softswitch")
    client = clients()
    client.arbitrate(3)
    client.set_pipeline(p4.p4info)
    client.write(update(INSERT, forward_entry(p4, 1, MAC_A, 2)))
    text = caplog.text
    assert "election id (0,3) is primary" in text
    assert "VERIFY_AND_COMMIT by election id (0,3): 6 tables, 6 actions, 6 counters" in text
    assert "write by election id (0,3): 1 updates, 0 failed" in text
