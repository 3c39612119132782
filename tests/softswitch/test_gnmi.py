"""gNMI interface counters: the pure path and notification functions, then the
server read by pygnmi's own client, then a real software switch on veths."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import replace
from typing import Any

import grpc
import pytest
from pygnmi.client import gNMIclient, gNMIException
from pygnmi.create_gnmi_path import gnmi_path_generator
from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from controlplane.gnmi import (
    CASSINI_COUNTER_LEAVES,
    COUNTER_LEAVES,
    OPENCONFIG_COUNTER_LEAVES,
    GnmiReader,
    GnmiUnsupported,
    interfaces_from,
    read_interface_counters,
)
from emulation.softswitch.gnmi_service import (
    MIN_SAMPLE_NS,
    add_gnmi_service,
    changed,
    stream_plan,
)
from emulation.softswitch.gnmi_tree import (
    PathError,
    interfaces_tree,
    notification,
    render,
    select,
)
from emulation.softswitch.port_stats import PortCounters, port_counters

STATS = {
    "rx_packets": {1: 25, 2: 3},
    "rx_bytes": {1: 5000, 2: 300},
    "tx_packets": {1: 2, 2: 20},
    "tx_bytes": {1: 200, 2: 4000},
    "forward_misses": {1: 4},
    "rx_overruns": {1: 1},
    "malformed": {1: 3},
    "tail_dropped": {2: 6},
    "wred_dropped": {2: 2},
    "ecn_marked": {2: 9},
    "pfc_received": {2: 1},
    "rx_broadcast": {1: 2},
    "rx_multicast": {1: 1},
}
NAMES = {1: "veth1", 2: "veth2"}
Server = tuple[str, int, Callable[[], list[PortCounters]]]  # host, port, source


def fake_ports() -> list[PortCounters]:
    return port_counters(STATS, NAMES, [1, 2])


def leaf_values(c: PortCounters) -> dict[str, int]:
    return {leaf: getattr(c, leaf.replace("-", "_")) for leaf in COUNTER_LEAVES}


def elems(text: str) -> list[gnmi_pb2.PathElem]:
    return list(gnmi_path_generator(text).elem)


# --- pure functions -------------------------------------------------------------------


def test_leaves_are_the_openconfig_names_and_ours() -> None:
    assert OPENCONFIG_COUNTER_LEAVES == (
        "in-unicast-pkts",
        "in-broadcast-pkts",
        "in-multicast-pkts",
        "in-octets",
        "in-discards",
        "in-errors",
        "out-unicast-pkts",
        "out-octets",
        "out-discards",
        "out-errors",
    )
    assert not set(OPENCONFIG_COUNTER_LEAVES) & set(CASSINI_COUNTER_LEAVES)
    c = fake_ports()[0]
    tree = interfaces_tree([c])
    counters = tree["interfaces"]["interface"].entries["veth1"]["state"]["counters"]
    assert counters == leaf_values(c)
    assert counters["in-discards"] == 4 + 1 and counters["in-errors"] == 3
    # OpenConfig's in-unicast-pkts excludes broadcasts and multicasts (25 - 2 - 1).
    assert (counters["in-unicast-pkts"], counters["in-broadcast-pkts"]) == (22, 2)
    assert counters["in-multicast-pkts"] == 1


def test_each_interface_serves_what_a_stratum_switch_serves() -> None:
    tree = interfaces_tree(port_counters(STATS | {"port_down": {2: 1}}, NAMES, [1, 2]))
    entries = tree["interfaces"]["interface"].entries
    state = entries["veth2"]["state"]
    assert set(state) == {"name", "ifindex", "admin-status", "oper-status", "id", "counters"}
    assert (state["name"], state["ifindex"], state["id"]) == ("veth2", 2, 2)
    assert (state["admin-status"], state["oper-status"]) == ("UP", "DOWN")
    assert entries["veth1"]["state"]["oper-status"] == "UP"
    # finsy's port list: every interface's ifindex, by name.
    found = select(tree, elems("/interfaces/interface[name=*]/state/ifindex"))
    assert [(render(m.path), m.value) for m in found] == [
        ("/interfaces/interface[name=veth1]/state/ifindex", 1),
        ("/interfaces/interface[name=veth2]/state/ifindex", 2),
    ]


def test_select_leaf_container_wildcard_and_root() -> None:
    tree = interfaces_tree(fake_ports())
    (leaf,) = select(tree, elems("/interfaces/interface[name=veth2]/state/counters/tail-dropped"))
    assert leaf.value == 6
    assert render(leaf.path) == "/interfaces/interface[name=veth2]/state/counters/tail-dropped"
    both = select(tree, elems("/interfaces/interface[name=*]/state/counters/in-octets"))
    assert [(render(m.path), m.value) for m in both] == [
        ("/interfaces/interface[name=veth1]/state/counters/in-octets", 5000),
        ("/interfaces/interface[name=veth2]/state/counters/in-octets", 300),
    ]
    # A list without a key is every entry, too; a module prefix is accepted.
    keyless = select(tree, elems("/openconfig-interfaces:interfaces/interface/state/id"))
    assert [m.value for m in keyless] == [1, 2]
    (root,) = select(tree, [])
    assert root.path == () and "interfaces" in root.value


@pytest.mark.parametrize(
    ("path", "code", "message"),
    [
        (
            "/interfaces/interface[name=veth3]/state",
            grpc.StatusCode.NOT_FOUND,
            "/interfaces/interface: no interface named 'veth3'. Did you mean 'veth2'? "
            "(known: veth1, veth2)",
        ),
        (
            "/interfaces/interface[name=veth1]/state/counters/in-pkts",
            grpc.StatusCode.NOT_FOUND,
            "no element named 'in-pkts'. Did you mean 'in-unicast-pkts'?",
        ),
        (
            "/interface",
            grpc.StatusCode.NOT_FOUND,
            "/: no element named 'interface'. Did you mean 'interfaces'?",
        ),
        (
            "/interfaces/interface[ifname=veth1]",
            grpc.StatusCode.INVALID_ARGUMENT,
            "/interfaces/interface is keyed by 'name', not by ifname",
        ),
        (
            "/interfaces[name=x]",
            grpc.StatusCode.INVALID_ARGUMENT,
            "/interfaces is not a list: it takes no keys, got [name=x]",
        ),
        (
            "/interfaces/interface[name=veth1]/state/id/x",
            grpc.StatusCode.NOT_FOUND,
            "/interfaces/interface[name=veth1]/state/id is a leaf",
        ),
    ],
)
def test_wrong_paths_name_the_bad_element(path: str, code: grpc.StatusCode, message: str) -> None:
    with pytest.raises(PathError) as err:
        select(interfaces_tree(fake_ports()), elems(path))
    assert err.value.code == code
    assert message in err.value.message


def test_notification_encodings() -> None:
    tree = interfaces_tree(fake_ports())
    matches = select(tree, elems("/interfaces/interface[name=veth2]/state/counters"))
    proto = notification(matches, gnmi_pb2.PROTO, 123)
    assert proto.timestamp == 123
    got = {u.path.elem[-1].name: u.val.uint_val for u in proto.update}
    assert got == leaf_values(fake_ports()[1])
    assert all(u.path.elem[1].key["name"] == "veth2" for u in proto.update)

    (plain,) = notification(matches, gnmi_pb2.JSON, 1).update
    assert json.loads(plain.val.json_val) == leaf_values(fake_ports()[1])
    (ietf,) = notification(matches, gnmi_pb2.JSON_IETF, 1).update
    data = json.loads(ietf.val.json_ietf_val)
    # RFC 7951: counter64 as strings, our leaves qualified by our module.
    assert data["in-octets"] == "300" and data["cassini-interfaces:tail-dropped"] == "6"

    # The reader parses what the server sends.
    state = select(tree, elems("/interfaces/interface[name=*]/state"))
    response = gnmi_pb2.GetResponse(notification=[notification(state, gnmi_pb2.PROTO, 5)])
    read = interfaces_from(response)
    assert [(i.name, i.port) for i in read] == [("veth1", 1), ("veth2", 2)]
    assert dict(read[1].counters) == leaf_values(fake_ports()[1])


def test_stream_plan_and_changes_only() -> None:
    sub_list = gnmi_pb2.SubscriptionList(
        subscription=[
            gnmi_pb2.Subscription(
                path=gnmi_path_generator("/interfaces"),
                mode=gnmi_pb2.SAMPLE,
                sample_interval=250_000_000,
            ),
            gnmi_pb2.Subscription(path=gnmi_path_generator("/interfaces"), mode=gnmi_pb2.ON_CHANGE),
        ]
    )
    sample, on_change = stream_plan(sub_list)
    assert (sample.interval_ns, sample.changes_only) == (250_000_000, False)
    assert (on_change.interval_ns, on_change.changes_only) == (MIN_SAMPLE_NS, True)
    sub_list.subscription[0].sample_interval = 1000
    with pytest.raises(PathError, match="below this target's minimum"):
        stream_plan(sub_list)

    ports = fake_ports()
    path = elems("/interfaces/interface[name=*]/state/counters/out-unicast-pkts")
    sent: dict[str, bytes] = {}
    first = changed(sent, notification(select(interfaces_tree(ports), path), gnmi_pb2.PROTO, 1))
    assert len(first.update) == 2
    ports[1] = replace(ports[1], out_unicast_pkts=21)
    later = changed(sent, notification(select(interfaces_tree(ports), path), gnmi_pb2.PROTO, 2))
    assert [(u.path.elem[1].key["name"], u.val.uint_val) for u in later.update] == [("veth2", 21)]


# --- the server, read by pygnmi's client ------------------------------------------------


@pytest.fixture
def gnmi_server() -> Iterator[Server]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    add_gnmi_service(server, fake_ports)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield "127.0.0.1", port, fake_ports
    finally:
        server.stop(0).wait()


def test_capabilities(gnmi_server: Server) -> None:
    host, port, _ = gnmi_server
    with gNMIclient(target=(host, port), insecure=True) as client:
        caps = client.capabilities()
    assert caps["gnmi_version"] == "0.8.0"
    assert set(caps["supported_encodings"]) == {"json", "json_ietf", "proto"}
    assert "openconfig-interfaces" in {m["name"] for m in caps["supported_models"]}


def test_get_leaf_container_and_everything(gnmi_server: Server) -> None:
    host, port, source = gnmi_server
    expected = {c.name: leaf_values(c) for c in source()}
    before = time.time_ns()
    with gNMIclient(target=(host, port), insecure=True) as client:
        got = client.get(path=["/interfaces/interface[name=veth1]/state/counters/in-unicast-pkts"])
        (note,) = got["notification"]
        assert note["update"] == [
            {"path": "interfaces/interface[name=veth1]/state/counters/in-unicast-pkts", "val": 22}
        ]
        assert before <= note["timestamp"] <= time.time_ns()

        got = client.get(path=["/interfaces/interface[name=*]/state/counters"], encoding="json")
        values = {
            u["path"].split("=")[1].split("]")[0]: u["val"]
            for u in got["notification"][0]["update"]
        }
        assert values == expected

        got = client.get(path=["/interfaces"], encoding="proto")
        leaves = {u["path"]: u["val"] for u in got["notification"][0]["update"]}
        assert leaves["interfaces/interface[name=veth2]/state/counters/out-discards"] == 8
        assert leaves["interfaces/interface[name=veth2]/state/id"] == 2
        counted = {p for p in leaves if "/counters/" in p}
        assert len(counted) == 2 * len(COUNTER_LEAVES)

        with pytest.raises(gNMIException, match="no interface named 'veth9'"):
            client.get(path=["/interfaces/interface[name=veth9]/state/counters"])
        with pytest.raises(gNMIException, match="NOT_FOUND|Did you mean 'in-errors'"):
            client.get(path=["/interfaces/interface[name=veth1]/state/counters/in-error"])
        with pytest.raises(gNMIException, match="UNIMPLEMENTED|Set is not served"):
            client.set(update=[("/interfaces/interface[name=veth1]/state/counters/in-octets", 0)])


def test_read_interface_counters_equals_the_source(gnmi_server: Server) -> None:
    host, port, source = gnmi_server
    assert read_interface_counters(f"{host}:{port}", 2.0) == {
        c.name: leaf_values(c) for c in source()
    }


def test_reader_names_a_target_without_gnmi() -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with (
            GnmiReader(f"127.0.0.1:{port}", 2.0) as reader,
            pytest.raises(GnmiUnsupported, match="serves no gNMI"),
        ):
            reader.read()
    finally:
        server.stop(0).wait()


def _counters_path(name: str, leaf: str) -> str:
    return f"interfaces/interface[name={name}]/state/counters/{leaf}"


def test_subscribe_once_poll_and_stream(gnmi_server: Server) -> None:
    host, port, _ = gnmi_server
    path = _counters_path("veth2", "tail-dropped")
    with gNMIclient(target=(host, port), insecure=True) as client:
        once = list(client.subscribe2(subscribe={"mode": "once", "subscription": [{"path": path}]}))
        assert once[0]["update"]["update"] == [{"path": path, "val": 6}]
        assert once[-1] == {"sync_response": True}

        poll = client.subscribe2(subscribe={"mode": "poll", "subscription": [{"path": path}]})
        for _ in range(2):
            answer = poll.get_update(timeout=5)
            assert answer["sync_response"] is True
            assert answer["update"]["update"] == [{"path": path, "val": 6}]
        poll.close()

        stream = client.subscribe2(
            subscribe={
                "mode": "stream",
                "encoding": "proto",
                "subscription": [{"path": path, "mode": "sample", "sample_interval": 200_000_000}],
            }
        )
        first = stream.get_update(timeout=5)
        assert first["sync_response"] is True
        stamps = [first["update"]["timestamp"]]
        for _ in range(2):
            sample = stream.get_update(timeout=5)
            assert sample["update"]["update"] == [{"path": path, "val": 6}]
            stamps.append(sample["update"]["timestamp"])
        stream.close()
    gaps = [(b - a) / 1e9 for a, b in zip(stamps, stamps[1:], strict=False)]
    assert all(0.15 <= g <= 0.6 for g in gaps), gaps


def _subscribe_once(host: str, port: int, path: str, encoding: int | None) -> list[Any]:
    """The updates of a ONCE subscription to `path` (no encoding field when None)."""
    sub_list = gnmi_pb2.SubscriptionList(
        mode=gnmi_pb2.SubscriptionList.ONCE,
        subscription=[gnmi_pb2.Subscription(path=gnmi_path_generator(path))],
    )
    if encoding is not None:
        sub_list.encoding = encoding
    request = gnmi_pb2.SubscribeRequest(subscribe=sub_list)
    with grpc.insecure_channel(f"{host}:{port}") as channel:
        stub = gnmi_pb2_grpc.gNMIStub(channel)
        answers = list(stub.Subscribe(iter([request]), timeout=5))
    assert answers[-1].sync_response
    return [u for a in answers[:-1] for u in a.update.update]


def test_subscribe_answers_typed_scalars_unless_json_ietf_is_asked(gnmi_server: Server) -> None:
    """The default (JSON, which a request naming no encoding also says) and PROTO answer
    each leaf with its typed scalar, as Stratum does and finsy expects; JSON_IETF as asked."""
    host, port, _ = gnmi_server
    status = "/interfaces/interface[name=*]/state/oper-status"
    for encoding in (None, gnmi_pb2.JSON, gnmi_pb2.PROTO):
        updates = _subscribe_once(host, port, status, encoding)
        assert [
            (u.path.elem[1].key["name"], u.val.WhichOneof("value"), u.val.string_val)
            for u in updates
        ] == [("veth1", "string_val", "UP"), ("veth2", "string_val", "UP")]
        (ifindex, *_) = _subscribe_once(host, port, "/interfaces/interface/state/ifindex", encoding)
        assert (ifindex.val.WhichOneof("value"), ifindex.val.uint_val) == ("uint_val", 1)
    # A container: one update per leaf, each typed.
    counters = _subscribe_once(host, port, "/interfaces/interface[name=veth2]/state/counters", None)
    assert {u.path.elem[-1].name: u.val.uint_val for u in counters} == leaf_values(fake_ports()[1])
    (ietf, *_) = _subscribe_once(
        host, port, "/interfaces/interface[name=veth2]/state/counters", gnmi_pb2.JSON_IETF
    )
    assert json.loads(ietf.val.json_ietf_val)["in-octets"] == "300"
    # A Get answers JSON when it names no encoding (gNMI 3.3.1).
    with grpc.insecure_channel(f"{host}:{port}") as channel:
        got = gnmi_pb2_grpc.gNMIStub(channel).Get(
            gnmi_pb2.GetRequest(path=[gnmi_path_generator(status)]), timeout=5
        )
    assert [u.val.json_val for u in got.notification[0].update] == [b'"UP"', b'"UP"']


def test_subscribe_to_a_wrong_path_fails_before_any_data(gnmi_server: Server) -> None:
    # The stubs, not pygnmi: its subscriber thread re-raises the error it stores.
    host, port, _ = gnmi_server
    request = gnmi_pb2.SubscribeRequest(
        subscribe=gnmi_pb2.SubscriptionList(
            mode=gnmi_pb2.SubscriptionList.ONCE,
            subscription=[
                gnmi_pb2.Subscription(
                    path=gnmi_path_generator(_counters_path("veth7", "in-octets"))
                )
            ],
        )
    )
    with grpc.insecure_channel(f"{host}:{port}") as channel:
        stub = gnmi_pb2_grpc.gNMIStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            list(stub.Subscribe(iter([request]), timeout=5))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert "no interface named 'veth7'. Did you mean 'veth2'?" in err.value.details()


# --- a real software switch --------------------------------------------------------------


def _mac(i: int) -> bytes:
    return bytes.fromhex(f"0200000000{i:02x}")


def _udp(src: bytes, dst: bytes, seq: int) -> bytes:
    head = Ether(dst=dst.hex(":"), src=src.hex(":")) / IP(src="10.0.0.1", dst="10.0.0.2") / UDP()
    return bytes(head / (seq.to_bytes(4, "big") + b"\x00" * 150))


@pytest.mark.root
def test_switch_serves_what_it_forwarded_and_dropped() -> None:
    from controlplane.entries import TableEntry, Update, UpdateType
    from controlplane.p4info import load_p4info
    from controlplane.session import P4RuntimeSession
    from emulation.fabric.netns import NetnsLab
    from emulation.housekeeping.prefixes import new_prefix
    from emulation.softswitch.switch import SoftwareSwitch
    from emulation.softswitch.tm_config import TmConfig
    from tests.helpers.leftovers import leftovers

    lab = NetnsLab(new_prefix())
    try:
        ifs = {}
        socks: dict[int, socket.socket] = {}
        for i in (1, 2):
            ns = lab.namespace(f"h{i}")
            host_if, switch_if = lab.veth(f"h{i}", f"s{i}", ns_a=ns, mac_a=_mac(i).hex(":"))
            ifs[i] = switch_if
            socks[i] = lab.packet_socket(ns, host_if)
        with SoftwareSwitch(1, ifs, "127.0.0.1:0", TmConfig()) as switch:
            assert switch.grpc_address is not None
            entry = TableEntry(
                "CassiniIngress.logical_forward",
                {"ingress_port": 1, "dst_mac": _mac(2).hex(":")},
                "CassiniIngress.set_egress_port",
                {"port": 2},
            )
            with P4RuntimeSession.connect(switch.grpc_address, 1) as session:
                session.set_pipeline(load_p4info())
                session.write([Update(UpdateType.INSERT, entry)])
            for seq in range(12):
                socks[1].send(_udp(_mac(1), _mac(2), seq))
            for seq in range(5):
                socks[1].send(_udp(_mac(1), _mac(0x77), seq))  # no entry: a forwarding miss
            end = time.monotonic() + 30  # ends as soon as the frames are counted
            while time.monotonic() < end:
                stats = switch.stats()
                if stats.get("tx_packets", {}).get(2, 0) >= 12 and (
                    stats.get("forward_misses", {}).get(1, 0) >= 5
                ):
                    break
                time.sleep(0.02)
            host, port = switch.grpc_address.rsplit(":", 1)
            with gNMIclient(target=(host, int(port)), insecure=True) as client:
                got = client.get(
                    path=["/interfaces/interface[name=*]/state/counters"], encoding="proto"
                )
            leaves = {u["path"]: u["val"] for u in got["notification"][0]["update"]}
            # Named by chip port, not by the run's veths (no topology given).
            assert leaves[_counters_path("port1", "in-unicast-pkts")] == 17
            assert leaves[_counters_path("port2", "out-unicast-pkts")] == 12
            assert leaves[_counters_path("port1", "in-discards")] == 5
            assert leaves[_counters_path("port1", "forward-misses")] == 5
            expected = {c.name: leaf_values(c) for c in switch.port_counters()}
            assert read_interface_counters(switch.grpc_address, 2.0) == expected
    finally:
        lab.close()
        assert leftovers(lab.prefix) == []
