"""The polls' fast paths (issue 24): a counter Read built from dicts and a PROTO gNMI Get
built from cached paths send what the message-by-message builders sent, and a value
that changed between two polls is seen in the second."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import replace
from typing import Any

import grpc
import numpy as np
import pytest
from pygnmi.create_gnmi_path import gnmi_path_generator
from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc

from controlplane.p4info import CounterInfo, P4InfoIndex, load_p4info
from controlplane.proto.p4.v1 import p4runtime_pb2
from emulation.softswitch.arbitration import Session
from emulation.softswitch.counter_entries import (
    COUNTER_ENTITY_MAX_BYTES,
    counter_entity_fields,
    counter_rows,
)
from emulation.softswitch.device import Device
from emulation.softswitch.gnmi_get_encoding import PathCache, proto_notification
from emulation.softswitch.gnmi_service import GnmiServicer, add_gnmi_service
from emulation.softswitch.gnmi_tree import interfaces_tree, leaves, notification, select
from emulation.softswitch.port_stats import PortCounters, port_counters
from emulation.softswitch.read_snapshot import READ_CHUNK, BuildGate, read_responses
from emulation.softswitch.state import LocalDataplane
from tests.helpers.p4runtime import DEVICE_ID, MODIFY, Set

PORTS = [1, 2, 17]
NAMES = {1: "tor1-eth1", 2: "tor1-eth2", 17: "agg1-eth3"}


# --- counters -------------------------------------------------------------------------


def _device(p4: P4InfoIndex) -> Device:
    device = Device(DEVICE_ID, LocalDataplane(), p4)
    arbitration = p4runtime_pb2.MasterArbitrationUpdate(device_id=DEVICE_ID)
    arbitration.election_id.low = 1
    device.arbitrate(Session(), arbitration)
    push = Set(device_id=DEVICE_ID, action=Set.VERIFY_AND_COMMIT)
    push.election_id.low = 1
    push.config.p4info.CopyFrom(p4.p4info)
    device.set_pipeline(push)
    return device


def _set_cell(device: Device, counter: CounterInfo, cell: int, packets: int, octets: int) -> None:
    request = p4runtime_pb2.WriteRequest(device_id=DEVICE_ID)
    request.election_id.low = 1
    entry = request.updates.add(type=MODIFY).entity.counter_entry
    entry.counter_id, entry.index.index = counter.id, cell
    entry.data.packet_count, entry.data.byte_count = packets, octets
    assert device.write(request) == [None]


def _poll(device: Device, counters: list[CounterInfo], cells: list[int]) -> list[Any]:
    """The ReadResponses of a telemetry poll (one entity per counter and cell), over the wire."""
    request = p4runtime_pb2.ReadRequest(device_id=DEVICE_ID)
    for counter in counters:
        for cell in cells:
            entry = request.entities.add().counter_entry
            entry.counter_id, entry.index.index = counter.id, cell
    gate = BuildGate(1, threading.Event())
    snapshot = device.read(request)
    return [
        p4runtime_pb2.ReadResponse.FromString(r.SerializeToString())
        for r in read_responses(snapshot.response_items(), gate)
    ]


def test_a_counter_changed_between_two_polls_is_seen_in_the_second() -> None:
    p4 = load_p4info()
    device = _device(p4)
    port_tx, ecn = p4.counter("CassiniEgress.port_tx"), p4.counter("CassiniEgress.ecn_marked")
    _set_cell(device, port_tx, 17, 5, 500)
    first = _poll(device, [port_tx, ecn], PORTS)
    _set_cell(device, port_tx, 17, 9, 4_000_000_000_000)  # past 32 bits
    _set_cell(device, ecn, 2, 1, 64)
    second = _poll(device, [port_tx, ecn], PORTS)

    def cells(responses: list[Any]) -> dict[tuple[int, int], tuple[int, int]]:
        assert len(responses) == 1
        got = {}
        for e in responses[0].entities:
            c = e.counter_entry
            assert c.HasField("data") and c.HasField("index")
            got[(c.counter_id, c.index.index)] = (c.data.packet_count, c.data.byte_count)
        return got

    zero = (0, 0)
    assert cells(first) == {
        (port_tx.id, 1): zero,
        (port_tx.id, 2): zero,
        (port_tx.id, 17): (5, 500),
        (ecn.id, 1): zero,
        (ecn.id, 2): zero,
        (ecn.id, 17): zero,
    }
    assert cells(second)[(port_tx.id, 17)] == (9, 4_000_000_000_000)
    assert cells(second)[(ecn.id, 2)] == (1, 64)
    # Entities come in the order the request named them.
    order = [(e.counter_entry.counter_id, e.counter_entry.index.index) for e in second[0].entities]
    assert order == [(port_tx.id, p) for p in PORTS] + [(ecn.id, p) for p in PORTS]


def test_counter_fields_are_the_entity_the_message_builder_made() -> None:
    """Field by field, as counter_entries built it before; data is present (empty) even
    for a counter that counts neither unit, and a unit not counted is left unset."""
    cells = {"c": np.array([[3, 300], [4, 2**63 - 1]], dtype=np.int64)}
    for unit, packets, octets in [
        ("BOTH", True, True),
        ("PACKETS", True, False),
        ("BYTES", False, True),
        ("NONE", False, False),
    ]:
        counter = CounterInfo(id=4242, name="c", alias="c", unit=unit, size=2)
        query = p4runtime_pb2.CounterEntry(counter_id=counter.id)
        built = [
            p4runtime_pb2.Entity(**f)
            for f in counter_entity_fields(counter_rows([counter], query), cells)
        ]
        expected = []
        for i, (p, b) in enumerate([(3, 300), (4, 2**63 - 1)]):
            entity = p4runtime_pb2.Entity()
            entity.counter_entry.counter_id, entity.counter_entry.index.index = 4242, i
            entity.counter_entry.data.SetInParent()
            if packets:
                entity.counter_entry.data.packet_count = p
            if octets:
                entity.counter_entry.data.byte_count = b
            expected.append(entity)
        assert [e.SerializeToString() for e in built] == [e.SerializeToString() for e in expected]
        assert all(e.ByteSize() <= COUNTER_ENTITY_MAX_BYTES for e in built)


def test_the_largest_counter_entity_fits_the_bound() -> None:
    entity = p4runtime_pb2.Entity()
    entry = entity.counter_entry
    entry.counter_id, entry.index.index = 2**32 - 1, 2**63 - 1
    entry.data.packet_count = entry.data.byte_count = -1  # int64: the longest varint
    assert entity.ByteSize() <= COUNTER_ENTITY_MAX_BYTES


def test_a_wildcard_read_of_a_job_counter_comes_in_chunks_with_every_cell() -> None:
    p4 = load_p4info()
    device = _device(p4)
    job_tx = p4.counter("CassiniEgress.job_tx")
    _set_cell(device, job_tx, job_tx.size - 1, 7, 70)
    request = p4runtime_pb2.ReadRequest(device_id=DEVICE_ID)
    request.entities.add().counter_entry.counter_id = job_tx.id
    responses = list(
        read_responses(device.read(request).response_items(), BuildGate(1, threading.Event()))
    )
    assert [len(r.entities) for r in responses[:-1]] == [READ_CHUNK] * (len(responses) - 1)
    entities = [e.counter_entry for r in responses for e in r.entities]
    assert [e.index.index for e in entities] == list(range(job_tx.size))
    assert (entities[-1].data.packet_count, entities[-1].data.byte_count) == (7, 70)


# --- gNMI Get -------------------------------------------------------------------------


def _ports(rx: int = 7) -> list[PortCounters]:
    stats = {
        "rx_packets": {1: rx, 2: 3},
        "tx_bytes": {17: 2**40 + 1},
        "ecn_marked": {2: 9},
    }
    return port_counters(stats, NAMES, PORTS)


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/interfaces",
        "/interfaces/interface",
        "/interfaces/interface[name=*]",
        "/interfaces/interface[name=agg1-eth3]/state",
        "/interfaces/interface[name=tor1-eth2]/state/counters/in-unicast-pkts",
        "/interfaces/interface[name=*]/state/oper-status",
    ],
)
def test_cached_notification_equals_the_tree_builders(path: str) -> None:
    tree = interfaces_tree(_ports())
    matches = select(tree, list(gnmi_path_generator(path).elem))
    prefix = gnmi_pb2.Path(target="fabric", origin="openconfig")
    cache = PathCache()
    held = []
    for _ in range(2):  # the second from the cache
        fast = proto_notification(matches, 123, prefix, cache)
        slow = notification(matches, gnmi_pb2.PROTO, 123, prefix)
        assert len(fast.update) > 0
        assert fast == slow
        assert fast.SerializeToString() == slow.SerializeToString()
        held.append(len(cache))
    assert held[0] == held[1] > 0


def test_a_container_that_changed_its_children_is_encoded_as_it_is_now() -> None:
    """A cached container whose leaves changed (a leaf added, one gone) is not served
    from the cache's old list of children."""
    tree = interfaces_tree(_ports())
    cache = PathCache()
    matches = select(tree, [])
    assert proto_notification(matches, 1, None, cache) == notification(matches, gnmi_pb2.PROTO, 1)
    state = tree["interfaces"]["interface"].entries["tor1-eth2"]["state"]
    state["counters"]["extra-leaf"] = 5
    del state["counters"]["in-octets"]
    fast = proto_notification(matches, 1, None, cache)
    assert fast == notification(matches, gnmi_pb2.PROTO, 1)
    assert "extra-leaf" in str(fast) and len(fast.update) == len(leaves(matches[0]))


def test_a_cache_past_its_limit_still_encodes_every_path() -> None:
    matches = select(interfaces_tree(_ports()), [])
    cache = PathCache(limit=3)
    fast = proto_notification(matches, 1, None, cache)
    assert fast == notification(matches, gnmi_pb2.PROTO, 1)
    assert len(cache) == 3


def test_a_get_sees_values_that_changed_since_the_last_get() -> None:
    """The paths are cached, the values are not: a counter and an interface's oper-status
    that moved between two Gets are the second's."""
    current = {"ports": _ports(rx=7)}
    servicer = GnmiServicer(lambda: current["ports"], clock_ns=lambda: 5)
    request = gnmi_pb2.GetRequest(
        path=[gnmi_path_generator("/interfaces/interface[name=*]")],
        type=gnmi_pb2.GetRequest.STATE,
        encoding=gnmi_pb2.PROTO,
    )

    def values() -> dict[tuple[str, str], Any]:
        response = gnmi_pb2.GetResponse.FromString(servicer.Get(request, None))
        assert len(response.notification) == 1
        out = {}
        for u in response.notification[0].update:
            name = u.path.elem[1].key["name"]
            out[(name, "/".join(e.name for e in u.path.elem[2:]))] = (
                u.val.string_val if u.val.HasField("string_val") else u.val.uint_val
            )
        # Equal to the tree builder's answer on the same ports.
        expected = notification(
            select(interfaces_tree(current["ports"]), list(request.path[0].elem)),
            gnmi_pb2.PROTO,
            5,
            request.prefix,
        )
        assert response.notification[0] == expected
        return out

    first = values()
    assert first[("tor1-eth1", "state/counters/in-unicast-pkts")] == 7
    assert first[("agg1-eth3", "state/counters/out-octets")] == 2**40 + 1
    assert first[("tor1-eth1", "state/oper-status")] == "UP"
    ports = _ports(rx=8)
    current["ports"] = [replace(ports[0], oper_status="DOWN"), *ports[1:]]
    second = values()
    assert second[("tor1-eth1", "state/counters/in-unicast-pkts")] == 8
    assert second[("tor1-eth1", "state/oper-status")] == "DOWN"
    assert second[("tor1-eth1", "state/name")] == "tor1-eth1"
    assert set(second) == set(first)


# --- the Get over gRPC ----------------------------------------------------------------


@pytest.fixture
def gnmi_channel() -> Iterator[grpc.Channel]:
    """A gNMI service of `_ports()` on a real gRPC server, and a channel to it."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    add_gnmi_service(server, _ports)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield channel
    finally:
        server.stop(0).wait()


@pytest.mark.parametrize("encoding", [gnmi_pb2.PROTO, gnmi_pb2.JSON, gnmi_pb2.JSON_IETF])
def test_a_get_over_grpc_sends_the_tree_builders_response(
    gnmi_channel: grpc.Channel, encoding: int
) -> None:
    """The Get's pass-through bytes are, on the wire, the GetResponse the tree's builder
    makes (one Notification per path, in the request's order) serialised."""
    request = gnmi_pb2.GetRequest(
        prefix=gnmi_pb2.Path(target="fabric", origin="openconfig"),
        path=[
            gnmi_path_generator("/interfaces/interface[name=*]"),
            gnmi_path_generator("/interfaces/interface[name=tor1-eth2]/state/oper-status"),
        ],
        type=gnmi_pb2.GetRequest.STATE,
        encoding=encoding,
    )
    raw = gnmi_channel.unary_unary(
        "/gnmi.gNMI/Get", request_serializer=gnmi_pb2.GetRequest.SerializeToString
    )(request, timeout=5)
    got = gnmi_pb2.GetResponse.FromString(raw)
    tree = interfaces_tree(_ports())
    expected = gnmi_pb2.GetResponse(
        notification=[
            notification(select(tree, list(path.elem)), encoding, notice.timestamp, request.prefix)
            for path, notice in zip(request.path, got.notification, strict=True)
        ]
    )
    assert len(expected.notification[0].update) >= len(_ports())
    assert got == expected
    assert raw == expected.SerializeToString()
    # The generated stub reads the same message.
    assert gnmi_pb2_grpc.gNMIStub(gnmi_channel).Get(request, timeout=5).notification[0].update == (
        expected.notification[0].update
    )


def test_a_get_over_grpc_still_refuses_a_bad_path_and_serves_the_other_methods(
    gnmi_channel: grpc.Channel,
) -> None:
    stub = gnmi_pb2_grpc.gNMIStub(gnmi_channel)
    with pytest.raises(grpc.RpcError) as refused:
        stub.Get(gnmi_pb2.GetRequest(path=[gnmi_path_generator("/no-such")]), timeout=5)
    assert refused.value.code() == grpc.StatusCode.NOT_FOUND
    assert (
        gnmi_pb2.PROTO
        in stub.Capabilities(gnmi_pb2.CapabilityRequest(), timeout=5).supported_encodings
    )
