"""The P4Runtime server under bad input and load: bounded errors, bounded memory,
streams that cannot starve unary RPCs, reads that fit a message, and the spec's
error codes in the spec's order (P4Runtime 1.4.1; sections cited per test).

Every test here failed before the fix it guards (see the issue's probe figures).
"""

from __future__ import annotations

import json
import queue
import textwrap
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import code_pb2, status_pb2

from controlplane import session as session_module
from controlplane.entries import TableEntry, Update, UpdateType
from controlplane.p4info import P4InfoIndex, load_p4info
from controlplane.proto.p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc
from controlplane.session import P4RuntimeSession, WriteError
from emulation.softswitch.device import MAX_UPDATES_PER_WRITE, Device
from emulation.softswitch.entry_validation import MAX_METADATA_BYTES
from emulation.softswitch.errors import EntryError
from emulation.softswitch.p4runtime_service import RunningServer, serve
from emulation.softswitch.service_limits import ServiceLimits
from emulation.softswitch.state import LocalDataplane
from emulation.softswitch.write_status import (
    DETAILED_FAILURES,
    ERROR_MESSAGE_CHARS,
    write_error_status,
)
from tests.helpers.client_envs import P4RUNTIME_SHELL, run_client
from tests.helpers.p4runtime import (
    DEVICE_ID,
    INSERT,
    Client,
    Set,
    expect_rpc_error,
    forward_entry,
    table_entity,
    update,
    write_errors,
)
from tests.helpers.waiting import wait_for


def _mac(i: int) -> bytes:
    return (0x020000000000 + i).to_bytes(6, "big")


def _forward(i: int, port: int = 2) -> TableEntry:
    return TableEntry(
        "logical_forward",
        {"ingress_port": 1, "dst_mac": _mac(i).hex(":")},
        "set_egress_port",
        {"port": port},
    )


# --- error details (spec 12.5) --------------------------------------------------------


SHELL_WRITE = textwrap.dedent(
    """
    import json
    import sys
    from p4.v1 import p4runtime_pb2
    from p4runtime_sh.p4runtime import P4RuntimeClient, P4RuntimeWriteException

    address, device_id, request_file = sys.argv[1:4]
    request = p4runtime_pb2.WriteRequest.FromString(open(request_file, "rb").read())
    client = P4RuntimeClient(int(device_id), address, (0, 11))  # takes over as primary
    try:
        client.write(request)
        print("WROTE")
    except P4RuntimeWriteException as failed:
        print(json.dumps([[i, e.canonical_code, e.message] for i, e in failed.errors]))
    finally:
        client.tear_down()
    """
)


def test_a_large_failing_batch_keeps_its_details_within_a_default_clients_limit(
    server: RunningServer, primary: Client, p4: P4InfoIndex, tmp_path: Path
) -> None:
    """150 failing updates: p4runtime-shell's own client (default channel options) gets
    one p4.v1.Error per update (before: RESOURCE_EXHAUSTED and no details at all).

    Every update fails: p4runtime-shell 0.0.6's error iterator loops forever on an
    OK entry, so a batch with successes cannot be read with it.
    """
    updates = [update(INSERT, forward_entry(p4, 1, _mac(i), 2)) for i in range(150)]
    primary.write(*updates)
    request = p4runtime_pb2.WriteRequest()
    request.updates.extend(updates)
    (tmp_path / "write.bin").write_bytes(request.SerializeToString())
    # p4runtime-shell's client in its own environment takes over as primary and writes.
    result = run_client(
        P4RUNTIME_SHELL, SHELL_WRITE, server.address, str(DEVICE_ID), "write.bin", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-2000:]
    errors = [tuple(e) for e in json.loads(result.stdout.strip().splitlines()[-1])]
    assert [index for index, _, _ in errors] == list(range(150))
    assert {code for _, code, _ in errors} == {code_pb2.ALREADY_EXISTS}
    messages = [message for _, _, message in errors]
    assert all(0 < len(m) <= ERROR_MESSAGE_CHARS for m in messages[:DETAILED_FAILURES])
    assert all(m == "" for m in messages[DETAILED_FAILURES:])


def test_the_session_never_reports_an_applied_update_as_failed(
    server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """500 updates, 300 failing: exactly those 300 are reported, with the details of
    the prefix the trailer holds and read back from the device for the rest, or all
    read back when the client's metadata limit drops the details.

    The failing updates differ from what the device holds: read back, an INSERT
    of an entry already there as asked looks applied (and is not reported)."""
    with P4RuntimeSession.connect(server.address, DEVICE_ID) as session:
        session.set_pipeline(load_p4info())
        session.write([Update(UpdateType.INSERT, _forward(i)) for i in range(300)])
        batch = [Update(UpdateType.INSERT, _forward(i, port=3)) for i in range(500)]
        with pytest.raises(WriteError) as failed:
            session.write(batch)
        assert [d.index for d in failed.value.details] == list(range(300))
        codes = [d.code for d in failed.value.details]
        detailed = codes.index("UNKNOWN")  # the first update the details did not cover
        assert 100 < detailed < 300 and set(codes[:detailed]) == {"ALREADY_EXISTS"}
        assert set(codes[detailed:]) == {"UNKNOWN"}
    # A client whose metadata limit drops the details: it reads back instead.
    small = tuple(
        (k, 2 << 10 if "metadata" in k else v) for k, v in session_module.CHANNEL_OPTIONS
    )
    monkeypatch.setattr(session_module, "CHANNEL_OPTIONS", small)
    with P4RuntimeSession.connect(server.address, DEVICE_ID) as session:
        batch = [Update(UpdateType.INSERT, _forward(i, port=4)) for i in range(200, 700)]
        with pytest.raises(WriteError) as failed:
            session.write(batch)
        assert "RESOURCE_EXHAUSTED" in str(failed.value)
        # 200..499 existed (to ports 2, 3) and stay; 500..699 were applied by this very Write.
        assert [d.index for d in failed.value.details] == list(range(300))
        held = {e.match["dst_mac"]: e.params["port"] for e in session.read_table("logical_forward")}
        assert len(held) == 700 and sum(port == 4 for port in held.values()) == 200


def test_a_large_failing_batch_reaches_a_default_client_with_a_prefix_of_its_details(
    primary: Client, server: RunningServer, p4: P4InfoIndex
) -> None:
    """A batch of 500 with one failure, or of 250 failing, exceeded a default client's
    metadata limit: RESOURCE_EXHAUSTED instead of the per-update results."""
    primary.write(*[update(INSERT, forward_entry(p4, 1, _mac(i), 2)) for i in range(500)])
    channel = grpc.insecure_channel(server.address)  # default options, as p4runtime-shell's
    stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
    try:
        one_failing = [update(INSERT, forward_entry(p4, 1, _mac(i), 2)) for i in range(1000, 1499)]
        one_failing.append(update(INSERT, forward_entry(p4, 1, _mac(7), 2)))  # exists
        all_failing = [update(INSERT, forward_entry(p4, 1, _mac(i), 2)) for i in range(250)]
        for updates, failing in [(one_failing, "499")] + [(all_failing, "0, 1, 2")] * 5:
            request = p4runtime_pb2.WriteRequest(device_id=DEVICE_ID)
            request.election_id.high, request.election_id.low = primary.election_id
            request.updates.extend(updates)
            with pytest.raises(grpc.RpcError) as failed:
                stub.Write(request, timeout=10)
            assert failed.value.code() == grpc.StatusCode.UNKNOWN, failed.value.details()
            raw = dict(failed.value.trailing_metadata())["grpc-status-details-bin"]
            status = status_pb2.Status.FromString(raw)
            assert 100 < len(status.details) < len(updates)  # positional: the first ones
            error = p4runtime_pb2.Error()
            assert status.details[0].Unpack(error)
            assert error.canonical_code == (code_pb2.OK if failing == "499" else 6)
            assert f"failing: update {failing}" in (failed.value.details() or "")
            assert status.message == failed.value.details()
    finally:
        channel.close()


def test_error_details_reach_a_default_client_whatever_the_batch_and_its_messages() -> None:
    """Batches of 1 to 10,000 updates whose messages gRPC must percent-encode three
    times over: the trailer always reaches a client with gRPC's default limits, which
    refuse some trailers past 8 KiB and all past 16 KiB."""
    statuses = {}
    for size in (1, 100, 10_000):
        results: list[EntryError | None] = [
            EntryError(code_pb2.ALREADY_EXISTS, "ü%" * 300) if i % 3 else None for i in range(size)
        ]
        results[-1] = EntryError(code_pb2.NOT_FOUND, "%ü" * 300)
        statuses[str(size)] = (results, write_error_status(results))

    def fail(request: bytes, context: Any) -> bytes:
        _, status = statuses[request.decode()]
        context.set_trailing_metadata((("grpc-status-details-bin", status.SerializeToString()),))
        context.abort(grpc.StatusCode.UNKNOWN, status.message)

    handler = grpc.unary_unary_rpc_method_handler(fail)
    server = grpc.server(futures.ThreadPoolExecutor(2))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("t.T", {"W": handler}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")  # gRPC's default limits
    call = channel.unary_unary("/t.T/W")
    try:
        for size, (results, status) in statuses.items():
            for _ in range(10):  # past 8 KiB a default client refuses at random
                with pytest.raises(grpc.RpcError) as failed:
                    call(size.encode(), timeout=5)
                assert failed.value.code() == grpc.StatusCode.UNKNOWN, failed.value.details()
            raw = dict(failed.value.trailing_metadata())["grpc-status-details-bin"]
            assert raw == status.SerializeToString()
            codes = []
            for detail in status.details:
                error = p4runtime_pb2.Error()
                assert detail.Unpack(error)
                codes.append(error.canonical_code)
            assert 0 < len(codes) <= len(results)
            assert codes == [r.code if r else code_pb2.OK for r in results[: len(codes)]]
    finally:
        channel.close()
        server.stop(0)


# --- memory and size (spec 12, 11) --------------------------------------------------


def test_a_write_above_the_cap_is_resource_exhausted(primary: Client, p4: P4InfoIndex) -> None:
    one = update(INSERT, forward_entry(p4, 1, _mac(1), 2))
    request = p4runtime_pb2.WriteRequest(device_id=DEVICE_ID)
    request.election_id.high, request.election_id.low = primary.election_id
    request.updates.extend([one] * (MAX_UPDATES_PER_WRITE + 1))
    with pytest.raises(grpc.RpcError) as failed:
        primary.stub.Write(request, timeout=30)
    assert failed.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert str(MAX_UPDATES_PER_WRITE) in (failed.value.details() or "")
    assert primary.read(table_entity(p4runtime_pb2.TableEntry())) == []


def test_failures_keep_no_traceback(p4: P4InfoIndex) -> None:
    """Each failure kept its exception and traceback (~5 KB): 100k failures took 1.5 GB."""
    device = Device(DEVICE_ID, LocalDataplane(), p4)
    session = _arbitrated(device)
    _push(device, p4)
    request = p4runtime_pb2.WriteRequest(device_id=DEVICE_ID)
    request.election_id.low = 1
    request.updates.extend([update(INSERT, forward_entry(p4, 1, b"\x01" * 7, 2))] * 50)  # 56 bits
    results = device.write(request)
    assert all(r is not None and r.__traceback__ is None for r in results)
    assert session.role == ""


def _arbitrated(device: Device) -> Any:
    from emulation.softswitch.device import Session

    session = Session(peer="test")
    arbitration = p4runtime_pb2.MasterArbitrationUpdate(device_id=DEVICE_ID)
    arbitration.election_id.low = 1
    device.arbitrate(session, arbitration)
    return session


def _push(device: Device, p4: P4InfoIndex) -> None:
    request = Set(device_id=DEVICE_ID, action=Set.VERIFY_AND_COMMIT)
    request.election_id.low = 1
    request.config.p4info.CopyFrom(p4.p4info)
    device.set_pipeline(request)


def test_large_metadata_is_refused_and_wildcard_reads_are_chunked_by_bytes(
    primary: Client, p4: P4InfoIndex
) -> None:
    """2,000 entries with 4 KiB of metadata each: a wildcard Read returns them all
    (before: chunks of 1,000 entries; with 1 MiB each, beyond any message limit)."""
    too_big = forward_entry(p4, 1, _mac(9999), 2)
    too_big.metadata = b"x" * (MAX_METADATA_BYTES + 1)
    with pytest.raises(grpc.RpcError) as failed:
        primary.write(update(INSERT, too_big))
    ((code, message),) = write_errors(failed.value)
    assert code == code_pb2.RESOURCE_EXHAUSTED and str(MAX_METADATA_BYTES) in message
    entries = []
    for i in range(2000):
        entry = forward_entry(p4, 1, _mac(i), 2)
        entry.metadata = bytes([i % 256]) * MAX_METADATA_BYTES
        entries.append(update(INSERT, entry))
    for start in range(0, 2000, 500):
        primary.write(*entries[start : start + 500])
    request = p4runtime_pb2.ReadRequest(device_id=DEVICE_ID)
    request.entities.append(table_entity(p4runtime_pb2.TableEntry()))
    responses = list(primary.stub.Read(request, timeout=30))
    assert sum(len(r.entities) for r in responses) == 2000
    assert len(responses) >= 2 and all(r.ByteSize() < 5 << 20 for r in responses)


# --- streams (spec 5.4) -------------------------------------------------------------


def test_idle_streams_cannot_starve_unary_rpcs() -> None:
    """32 idle StreamChannels used to take every worker: Capabilities then hung.

    `silent_streams` slots are served to streams that have not arbitrated; each
    silent stream past them takes the oldest silent one's slot, which is closed
    at once (as many as were served). The silent
    ones get 120 s to arbitrate, so none is closed for its time while the test
    runs, however busy the machine: starved, Capabilities would wait that long."""
    limits = ServiceLimits(first_arbitration_s=120.0)
    server = serve(DEVICE_ID, limits=limits)
    channel = grpc.insecure_channel(server.address)
    stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
    outboxes: list[queue.Queue[Any]] = []
    streams = []

    def requests(box: queue.Queue[Any]) -> Iterator[Any]:
        while (item := box.get()) is not None:
            yield item

    try:
        for _ in range(2 * limits.silent_streams):
            box: queue.Queue[Any] = queue.Queue()
            outboxes.append(box)
            streams.append(stub.StreamChannel(requests(box)))
        refused = limits.silent_streams
        assert wait_for(lambda: sum(s.done() for s in streams) >= refused)  # all arrived
        began = time.monotonic()
        served_within = limits.first_arbitration_s / 3
        stub.Capabilities(p4runtime_pb2.CapabilitiesRequest(), timeout=served_within)
        assert time.monotonic() - began < limits.first_arbitration_s / 2
        done = [s for s in streams if s.done()]
        assert len(done) == refused
        assert {s.code() for s in done} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
    finally:
        for box in outboxes:
            box.put(None)
        for stream in streams:
            stream.cancel()
        channel.close()
        server.stop(grace=0)


# --- spec order and codes -----------------------------------------------------------


def test_a_backup_writing_before_any_pipeline_is_permission_denied(
    server: RunningServer, p4: P4InfoIndex
) -> None:
    """Spec 12.2: the primary is checked before the pipeline (was FAILED_PRECONDITION)."""
    main, backup = Client(server.address), Client(server.address)
    try:
        main.arbitrate(5)
        backup.arbitrate(2)
        expect_rpc_error(
            grpc.StatusCode.PERMISSION_DENIED,
            backup.write,
            update(INSERT, forward_entry(p4, 1, _mac(1), 2)),
        )
        expect_rpc_error(
            grpc.StatusCode.FAILED_PRECONDITION,
            main.write,
            update(INSERT, forward_entry(p4, 1, _mac(1), 2)),
        )
    finally:
        main.close()
        backup.close()


def test_a_write_for_an_unknown_role_is_not_found(primary: Client, p4: P4InfoIndex) -> None:
    """Spec 15: a role no client arbitrated for does not exist (was PERMISSION_DENIED)."""
    request = p4runtime_pb2.WriteRequest(device_id=DEVICE_ID, role="nobody")
    request.election_id.high, request.election_id.low = primary.election_id
    request.updates.append(update(INSERT, forward_entry(p4, 1, _mac(1), 2)))
    with pytest.raises(grpc.RpcError) as failed:
        primary.stub.Write(request, timeout=5)
    assert failed.value.code() == grpc.StatusCode.NOT_FOUND
    assert "nobody" in (failed.value.details() or "")


def test_an_unknown_atomicity_is_invalid(primary: Client, p4: P4InfoIndex) -> None:
    """Spec 12.1: atomicity is an enum; 7 was accepted."""
    expect_rpc_error(
        grpc.StatusCode.INVALID_ARGUMENT,
        primary.write,
        update(INSERT, forward_entry(p4, 1, _mac(1), 2)),
        atomicity=7,
    )


def test_an_unknown_pipeline_action_is_invalid(primary: Client, p4: P4InfoIndex) -> None:
    """Spec 13: action 99 returned UNKNOWN with a traceback."""
    error = expect_rpc_error(
        grpc.StatusCode.INVALID_ARGUMENT, primary.set_pipeline, p4.p4info, action=99
    )
    assert "99" in (error.details() or "") and "Traceback" not in (error.details() or "")


def test_reading_a_register_the_pipeline_lacks_is_not_found(primary: Client) -> None:
    """Spec 11.1: a Read naming an object that is not in the P4Info (was OK, empty)."""
    entity = p4runtime_pb2.Entity()
    entity.register_entry.register_id = 0x05000001
    error = expect_rpc_error(grpc.StatusCode.NOT_FOUND, primary.read, entity)
    assert "register" in (error.details() or "")
    wildcard = p4runtime_pb2.Entity()
    wildcard.register_entry.register_id = 0
    assert primary.read(wildcard) == []


def test_a_packet_out_before_arbitration_gets_a_stream_error(server: RunningServer) -> None:
    """Spec 16.1: only the primary may send PacketOut (one was accepted from anyone)."""
    client = Client(server.address)
    try:
        client.stream = client.stub.StreamChannel(client._requests())
        message = p4runtime_pb2.StreamMessageRequest()
        message.packet.payload = b"\x00" * 64
        client.send(message)
        response = next(client.stream)
        assert response.HasField("error"), response
        assert response.error.canonical_code == code_pb2.PERMISSION_DENIED
        assert response.error.packet_out.packet_out.payload == b"\x00" * 64
    finally:
        client.close()


def test_reading_the_max_qdepth_register_says_where_it_is_sampled(
    primary: Client, p4: P4InfoIndex
) -> None:
    """The Cassini register exists, but its reader is the loop's own 10 ms sampler."""
    entity = p4runtime_pb2.Entity()
    entity.register_entry.register_id = p4.p4info.registers[0].preamble.id
    error = expect_rpc_error(grpc.StatusCode.UNIMPLEMENTED, primary.read, entity)
    assert "max_qdepth" in (error.details() or "") and "sample" in (error.details() or "")
