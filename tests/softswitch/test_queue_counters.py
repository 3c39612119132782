"""Per (port, queue class) counters, from the packet path to a gNMI client.

Frames of two classes through one slow port, one of them dropped by its class's
limit and two CE-marked by its class's WRED, in both switch programs (the Python
reference and the compiled one): the counts are hand-computed, published into the
shared block, turned into `QueueCounters`, served under the OpenConfig QoS paths by
Get and Subscribe over a real in-process gRPC channel, and read back by the control
plane's `GnmiReader.read_queues`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from controlplane.gnmi import GnmiReader, GnmiUnsupported, QueueCount, queues_path
from emulation.softswitch.datapath_process import DatapathProcess, DatapathSpec
from emulation.softswitch.fast_pipeline import FastSwitchProgram, available
from emulation.softswitch.gnmi_get_encoding import PathCache, proto_notification_bytes
from emulation.softswitch.gnmi_service import MIN_SAMPLE_NS, add_gnmi_service
from emulation.softswitch.gnmi_tree import PathError, notification, qos_tree, select
from emulation.softswitch.p4runtime_service import serve
from emulation.softswitch.port_stats import QueueCounters, port_counters, queue_counters
from emulation.softswitch.reference_program import ReferenceSwitchProgram
from emulation.softswitch.shared_counters import SharedCounters, checked_counter_names
from emulation.softswitch.state import DataplaneState
from emulation.softswitch.switch import SoftwareSwitch
from emulation.softswitch.tm_config import (
    CLASS_COUNTERS,
    ClassSettings,
    ClassWred,
    PortSettings,
    TmConfig,
)

DST = bytes.fromhex("02000000000b")
NAMES = {1: "tor1-eth1", 2: "tor1-eth2"}
FRAME_BYTES = 1000  # 13 cells of 80 bytes


def frame(dscp: int, tag: int) -> bytes:
    packet = (
        Ether(dst="02:00:00:00:00:0b", src="02:00:00:00:00:0a")
        / IP(
            src="10.0.0.1",
            dst="10.0.0.2",
            tos=dscp << 2 | 2,  # ECT(0)
        )
        / UDP(sport=tag, dport=7)
    )
    return bytes(packet / bytes(FRAME_BYTES - len(packet)))


def program(fast: bool, shared: SharedCounters) -> Any:
    """Port 1 (fast) into port 2 (20x slower): class 2 holds at most 30 cells (two
    frames), class 7 marks frames that find more than 5 of its cells queued."""
    tm = TmConfig(
        default_rate_gbps=1.0,
        ports={2: PortSettings(rate_gbps=0.05)},
        classes={
            2: ClassSettings(queue_cells=30),
            7: ClassSettings(wred=ClassWred(min_cells=4, max_cells=5, max_prob_percent=0)),
        },
    )
    state = DataplaneState()
    state.forward[(1, DST)] = 2
    state.queue_by_dscp.update({10: 2, 46: 7})
    kind = FastSwitchProgram if fast else ReferenceSwitchProgram
    return kind(state, tm, [1, 2], seed=1, shared=shared)


def run_two_classes(fast: bool) -> tuple[dict[str, dict[tuple[int, int], int]], list[int]]:
    """Four class-2 frames, then three class-7 ones, handed over at once: the first
    class-2 frame goes straight to the wire, two more queue, the fourth finds 26 + 13
    cells > 30 and is dropped; the class-7 frames find 0, 13 and 26 of their cells,
    so the last two are marked, and all three leave before the two queued class-2
    ones (strict priority). Returns the published counters and the departure order."""
    shared = SharedCounters.create(checked_counter_names())
    try:
        switch = program(fast, shared)
        for tag, dscp in enumerate((10, 10, 10, 10, 46, 46, 46)):
            switch.receive(1, frame(dscp, tag), 0.0)
        switch.advance(1.0)
        order = [Ether(f)[UDP].sport for _, f in switch.tm.transmitted]
        switch.publish_stats()
        return shared.read_class_stats(), order
    finally:
        shared.close()


EXPECTED = {
    "enqueued_packets": {(2, 2): 3, (2, 7): 3},
    "sent_packets": {(2, 2): 3, (2, 7): 3},
    "sent_bytes": {(2, 2): 3 * FRAME_BYTES, (2, 7): 3 * FRAME_BYTES},
    "marked_packets": {(2, 7): 2},
    "dropped_packets": {(2, 2): 1},
}


@pytest.mark.parametrize("fast", [False, True], ids=["reference", "compiled"])
def test_two_classes_through_one_port_are_counted_per_class(fast: bool) -> None:
    if fast:
        assert available(), "the compiled packet path is not built: run scripts/setup.sh"
    stats, order = run_two_classes(fast)
    assert stats == EXPECTED
    assert order == [0, 4, 5, 6, 1, 2]  # frame 3 dropped; class 7 overtook 1 and 2


def test_queue_counters_name_every_class_of_every_port() -> None:
    queues = queue_counters(EXPECTED, NAMES, [1, 2])
    assert len(queues) == 16
    by_key = {(q.port, q.queue_class): q for q in queues}
    assert by_key[(2, 2)] == QueueCounters(2, "tor1-eth2", 2, 3, 3000, 1, 0)
    assert by_key[(2, 7)] == QueueCounters(2, "tor1-eth2", 7, 3, 3000, 0, 2)
    assert by_key[(1, 0)] == QueueCounters(1, "tor1-eth1", 0, 0, 0, 0, 0)


def test_a_bad_queue_name_is_answered_with_the_names_there_are() -> None:
    tree = qos_tree(queue_counters(EXPECTED, NAMES, [2]))
    path = [
        gnmi_pb2.PathElem(name="qos"),
        gnmi_pb2.PathElem(name="interfaces"),
        gnmi_pb2.PathElem(name="interface", key={"interface-id": "tor1-eth2"}),
        gnmi_pb2.PathElem(name="output"),
        gnmi_pb2.PathElem(name="queues"),
        gnmi_pb2.PathElem(name="queue", key={"name": "9"}),
    ]
    with pytest.raises(PathError) as err:
        select(tree, path)
    assert err.value.code == grpc.StatusCode.NOT_FOUND and "'9'" in err.value.message


# --- over a real channel ----------------------------------------------------------------


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, list[QueueCounters]]]:
    """A gNMI server on loopback serving the compiled program's counters of the run above."""
    assert available(), "the compiled packet path is not built: run scripts/setup.sh"
    stats, _ = run_two_classes(fast=True)
    queues = queue_counters(stats, NAMES, [1, 2])
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    add_gnmi_service(server, lambda: port_counters({}, NAMES, [1, 2]), queues=lambda: queues)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}", queues
    finally:
        server.stop(0).wait()


def test_the_reader_gets_every_queue_with_its_port(
    served: tuple[str, list[QueueCounters]],
) -> None:
    address, _ = served
    with GnmiReader(address, timeout=5.0) as reader:
        queues = reader.read_queues()
    assert len(queues) == 16
    by_key = {(q.port, q.queue_class): q for q in queues}
    assert by_key[(2, 2)] == QueueCount("tor1-eth2", 2, 2, 3, 3000, 1, 0)
    assert by_key[(2, 7)] == QueueCount("tor1-eth2", 2, 7, 3, 3000, 0, 2)
    assert by_key[(1, 5)] == QueueCount("tor1-eth1", 1, 5, 0, 0, 0, 0)


def _path(text: str) -> Any:
    """A gnmi.Path of '/a/b[k=v]/c' (no '/' or ']' inside keys)."""
    elems = []
    for part in text.strip("/").split("/"):
        name, _, keys = part.partition("[")
        key = dict(k.split("=", 1) for k in keys.rstrip("]").split("][") if k)
        elems.append(gnmi_pb2.PathElem(name=name, key=key))
    return gnmi_pb2.Path(elem=elems)


QUEUE_7 = "/qos/interfaces/interface[interface-id=tor1-eth2]/output/queues/queue[name=7]/state"


def test_get_of_one_queue_in_json_ietf_names_our_leaf_by_its_module(
    served: tuple[str, list[QueueCounters]],
) -> None:
    address, _ = served
    with grpc.insecure_channel(address) as channel:
        stub = gnmi_pb2_grpc.gNMIStub(channel)
        request = gnmi_pb2.GetRequest(path=[_path(QUEUE_7)], encoding=gnmi_pb2.JSON_IETF)
        response = stub.Get(request, timeout=5)
    (update,) = response.notification[0].update
    value = json.loads(update.val.json_ietf_val)
    assert value == {
        "name": "7",
        "transmit-pkts": "3",  # counter64: a string in JSON_IETF
        "transmit-octets": "3000",
        "dropped-pkts": "0",
        "cassini-interfaces:ecn-marked-pkts": "2",
    }


def test_subscribe_once_sends_the_queue_leaves(served: tuple[str, list[QueueCounters]]) -> None:
    address, _ = served
    subscription = gnmi_pb2.SubscriptionList(
        mode=gnmi_pb2.SubscriptionList.ONCE,
        subscription=[
            gnmi_pb2.Subscription(
                path=_path(QUEUE_7.replace("[name=7]", "[name=*]") + "/dropped-pkts")
            ),
            gnmi_pb2.Subscription(path=_path(QUEUE_7 + "/ecn-marked-pkts")),
        ],
    )
    with grpc.insecure_channel(address) as channel:
        stub = gnmi_pb2_grpc.gNMIStub(channel)
        responses = list(
            stub.Subscribe(iter([gnmi_pb2.SubscribeRequest(subscribe=subscription)]), timeout=5)
        )
    got = {}
    for response in responses:
        for update in response.update.update:
            elems = update.path.elem
            got[(elems[5].key["name"], elems[-1].name)] = update.val.uint_val
    assert responses[-1].sync_response
    assert len(got) == 9  # dropped-pkts of all 8 queues, ecn-marked-pkts of queue 7
    assert got[("2", "dropped-pkts")] == 1 and got[("7", "dropped-pkts")] == 0
    assert got[("7", "ecn-marked-pkts")] == 2


def test_a_target_without_qos_is_unsupported() -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    add_gnmi_service(server, lambda: port_counters({}, NAMES, [1]))  # no queues
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with GnmiReader(f"127.0.0.1:{port}", timeout=5.0) as reader:
            with pytest.raises(GnmiUnsupported, match="qos"):
                reader.read_queues()
            assert queues_path().elem[0].name == "qos"
    finally:
        server.stop(0).wait()


def test_a_get_in_proto_is_the_tree_notification_byte_for_byte() -> None:
    queues = queue_counters(EXPECTED, NAMES, [1, 2])
    matches = select(qos_tree(queues), _path("/qos").elem)
    prefix = gnmi_pb2.Path(target="s1")
    expected = notification(matches, gnmi_pb2.PROTO, 5, prefix).SerializeToString()
    assert proto_notification_bytes(matches, 5, prefix, PathCache()) == expected
    # Per interface: interface-id twice, then per queue name twice and the four counters.
    assert len(gnmi_pb2.Notification.FromString(expected).update) == 2 * (2 + 8 * 6)


def test_a_stream_subscription_follows_the_counts() -> None:
    counts = [queue_counters(EXPECTED, NAMES, [2])]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    add_gnmi_service(server, lambda: port_counters({}, NAMES, [2]), queues=lambda: counts[0])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    path = _path(QUEUE_7 + "/transmit-pkts")
    subscription = gnmi_pb2.SubscriptionList(
        mode=gnmi_pb2.SubscriptionList.STREAM,
        subscription=[
            gnmi_pb2.Subscription(path=path, mode=gnmi_pb2.SAMPLE, sample_interval=MIN_SAMPLE_NS)
        ],
    )
    seen: list[int] = []
    done = threading.Event()

    def requests() -> Iterator[Any]:  # open until the end: closing it ends a STREAM
        yield gnmi_pb2.SubscribeRequest(subscribe=subscription)
        done.wait(10)

    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = gnmi_pb2_grpc.gNMIStub(channel)
            stream = stub.Subscribe(requests(), timeout=10)
            for response in stream:
                for update in response.update.update:
                    seen.append(update.val.uint_val)
                if response.sync_response:  # the first sample is in: the class sends 4 more
                    stats = {**EXPECTED, "sent_packets": {(2, 2): 3, (2, 7): 7}}
                    counts[0] = queue_counters(stats, NAMES, [2])
                if seen and seen[-1] == 7:
                    stream.cancel()
                    break
    finally:
        done.set()
        server.stop(0).wait()
    assert seen[0] == 3 and seen[-1] == 7


def test_the_switch_serves_what_its_loop_published() -> None:
    """The switch's side, without a packet loop: the counts the loop would publish into
    the shared block go through `SoftwareSwitch.queue_counters` and the P4Runtime server's
    gNMI service (`serve`) to a reader."""
    switch = SoftwareSwitch(1, {1: "veth1", 2: "veth2"}, None, interface_names=NAMES)
    datapath = DatapathProcess(DatapathSpec({1: "veth1", 2: "veth2"}, TmConfig(), ()))
    datapath.shared = SharedCounters.create(checked_counter_names())
    switch.datapath, switch._ports = datapath, [1, 2]
    row = {name: i for i, name in enumerate(CLASS_COUNTERS)}
    datapath.shared.class_stats[row["sent_packets"], 2 * 8 + 5] = 11
    datapath.shared.class_stats[row["dropped_packets"], 1 * 8 + 0] = 4
    server = serve(1, port_counters=switch.port_counters, queue_counters=switch.queue_counters)
    try:
        with GnmiReader(server.address, timeout=5.0) as reader:
            queues = {(q.port, q.queue_class): q for q in reader.read_queues()}
    finally:
        server.stop(0)
        switch.datapath = None
        datapath.shared.close()
    assert len(queues) == 16
    assert queues[(2, 5)].transmit_pkts == 11 and queues[(2, 5)].name == "tor1-eth2"
    assert queues[(1, 0)].dropped_pkts == 4
    assert sum(q.transmit_pkts + q.dropped_pkts for q in queues.values()) == 15
