"""A small P4Runtime client and the messages the target's tests send with it.

Raw protobufs on purpose: the tests check the target's answer to messages a
friendlier client (`controlplane.session`) would never send.
"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.rpc import status_pb2

from controlplane.p4info import P4InfoIndex
from controlplane.proto.p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

DEVICE_ID = 7
TIMEOUT = 5.0

Set = p4runtime_pb2.SetForwardingPipelineConfigRequest


class Client:
    """One P4Runtime client: a stream for arbitration plus unary calls."""

    def __init__(self, address: str, device_id: int = DEVICE_ID) -> None:
        self.channel = grpc.insecure_channel(address)
        self.stub = p4runtime_pb2_grpc.P4RuntimeStub(self.channel)
        self.device_id = device_id
        self.election_id = (0, 0)
        self._out: queue.Queue[Any] = queue.Queue()
        self.stream: Any = None

    def _requests(self) -> Iterator[Any]:
        while True:
            message = self._out.get()
            if message is None:
                return
            yield message

    def arbitrate(self, election_low: int, device_id: int | None = None, role: str = "") -> Any:
        """Open the stream (first time) and send a MasterArbitrationUpdate; return the reply."""
        if self.stream is None:
            self.stream = self.stub.StreamChannel(self._requests())
        self.election_id = (0, election_low)
        request = p4runtime_pb2.StreamMessageRequest()
        request.arbitration.device_id = self.device_id if device_id is None else device_id
        request.arbitration.election_id.low = election_low
        if role:
            request.arbitration.role.name = role
        self._out.put(request)
        return self.next_arbitration()

    def next_arbitration(self) -> Any:
        response = next(self.stream)
        assert response.HasField("arbitration"), response
        return response.arbitration

    def send(self, message: Any) -> None:
        self._out.put(message)

    def close(self) -> None:
        self._out.put(None)
        if self.stream is not None:
            self.stream.cancel()
        self.channel.close()

    def set_pipeline(
        self, p4info: Any, action: int = Set.VERIFY_AND_COMMIT, cookie: int = 0
    ) -> Any:
        request = Set(device_id=self.device_id, action=action)
        request.election_id.high, request.election_id.low = self.election_id
        request.config.p4info.CopyFrom(p4info)
        request.config.p4_device_config = b"opaque"
        if cookie:
            request.config.cookie.cookie = cookie
        return self.stub.SetForwardingPipelineConfig(request, timeout=TIMEOUT)

    def write(self, *updates: Any, atomicity: int = 0) -> Any:
        request = p4runtime_pb2.WriteRequest(device_id=self.device_id, atomicity=atomicity)
        request.election_id.high, request.election_id.low = self.election_id
        request.updates.extend(updates)
        return self.stub.Write(request, timeout=TIMEOUT)

    def read(self, *entities: Any) -> list[Any]:
        request = p4runtime_pb2.ReadRequest(device_id=self.device_id)
        request.entities.extend(entities)
        return [e for r in self.stub.Read(request, timeout=TIMEOUT) for e in r.entities]


def forward_entry(p4: P4InfoIndex, port: int | bytes, mac: bytes, out: int | bytes | None) -> Any:
    """A logical_forward entry; ints become one-byte values, bytes are sent as given."""
    table = p4.table("CassiniIngress.logical_forward")
    entry = p4runtime_pb2.TableEntry(table_id=table.id)
    entry.match.add(field_id=table.match_field("ingress_port").id).exact.value = (
        port if isinstance(port, bytes) else port.to_bytes(2, "big").lstrip(b"\x00") or b"\x00"
    )
    entry.match.add(field_id=table.match_field("dst_mac").id).exact.value = mac
    if out is not None:
        action = p4.action("CassiniIngress.set_egress_port")
        entry.action.action.action_id = action.id
        value = out if isinstance(out, bytes) else out.to_bytes(2, "big").lstrip(b"\x00") or b"\x00"
        entry.action.action.params.add(param_id=action.param("port").id, value=value)
    return entry


def wred_entry(p4: P4InfoIndex, port: int, low: int, high: int, prob: int) -> Any:
    table = p4.table("CassiniEgress.wred_profile")
    action = p4.action("CassiniEgress.set_wred")
    entry = p4runtime_pb2.TableEntry(table_id=table.id)
    entry.match.add(field_id=table.match_field("egress_port").id).exact.value = port.to_bytes(
        2, "big"
    )
    entry.action.action.action_id = action.id
    for name, value in (("min_cells", low), ("max_cells", high), ("max_prob", prob)):
        entry.action.action.params.add(
            param_id=action.param(name).id, value=value.to_bytes(3, "big")
        )
    return entry


def update(kind: int, entry: Any) -> Any:
    result = p4runtime_pb2.Update(type=kind)
    if isinstance(entry, p4runtime_pb2.TableEntry):
        result.entity.table_entry.CopyFrom(entry)
    else:
        result.entity.counter_entry.CopyFrom(entry)
    return result


INSERT, MODIFY, DELETE = (
    p4runtime_pb2.Update.INSERT,
    p4runtime_pb2.Update.MODIFY,
    p4runtime_pb2.Update.DELETE,
)


def write_errors(err: grpc.RpcError) -> list[tuple[int, str]]:
    """The per-update (code, message) list in grpc-status-details-bin."""
    assert err.code() == grpc.StatusCode.UNKNOWN
    raw = dict(err.trailing_metadata())["grpc-status-details-bin"]
    status = status_pb2.Status.FromString(raw)
    out = []
    for detail in status.details:
        error = p4runtime_pb2.Error()
        assert detail.Unpack(error)
        out.append((error.canonical_code, error.message))
    return out


def table_entity(entry: Any) -> Any:
    entity = p4runtime_pb2.Entity()
    entity.table_entry.CopyFrom(entry)
    return entity


def expect_rpc_error(code: grpc.StatusCode, call: Any, *args: Any, **kwargs: Any) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call(*args, **kwargs)
    assert info.value.code() == code, info.value.details()
    return info.value
