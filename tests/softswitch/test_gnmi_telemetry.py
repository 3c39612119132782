"""The 10 ms per-job telemetry over gNMI STREAM: a ring written here and served by the
gNMI servicer, read by pygnmi and by our own client (sums equal the counters written;
a slow reader is told what it lost); then a real software switch on veths, whose
streamed samples sum to its P4 counters read over P4Runtime."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import numpy as np
import pytest
from pygnmi.client import gNMIclient
from pygnmi.create_gnmi_path import gnmi_path_generator
from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether

from controlplane.entries import TableEntry, Update, UpdateType
from controlplane.job_classes import JOB_CLASSES, JobSockets, job_class_entries
from controlplane.job_samples import JobSample, SampleCollector, TelemetryStream
from controlplane.p4info import load_p4info
from controlplane.p4names import JOB_ECN_MARKED, JOB_TX, PORT_TX
from controlplane.session import P4RuntimeSession
from emulation.fabric.netns import NetnsLab
from emulation.softswitch.gnmi_service import add_gnmi_service
from emulation.softswitch.gnmi_telemetry import (
    TelemetrySource,
    fast_notification,
    sample_notification,
)
from emulation.softswitch.sample_ring import Sample, SampleRing, ring_words
from emulation.softswitch.switch import SoftwareSwitch
from emulation.softswitch.tm_config import TmConfig
from tests.helpers.hosts import make_hosts
from tests.helpers.waiting import wait_for

PORTS = (1, 2)
NAMES = {1: "tor1-eth1", 2: "tor1-eth2"}


class Writer:
    """The packet loop's part: cumulative counts written into the ring."""

    def __init__(self, slots: int = 256) -> None:
        self.ring = SampleRing(np.zeros(ring_words(len(PORTS), slots), np.int64), PORTS, slots)
        cells = len(PORTS) * JOB_CLASSES
        self.packets = np.zeros(cells, np.int64)
        self.bytes = np.zeros(cells, np.int64)
        self.marks = np.zeros(cells, np.int64)

    def write(self, k: int) -> None:
        """Sample k: port 2 sends class 1 (and, every third sample, class 3 marked)."""
        self.packets[1 * JOB_CLASSES + 1] += 2
        self.bytes[1 * JOB_CLASSES + 1] += 3000 + k
        if k % 3 == 0:
            self.packets[1 * JOB_CLASSES + 3] += 1
            self.bytes[1 * JOB_CLASSES + 3] += 1500
            self.marks[1 * JOB_CLASSES + 3] += 1
        depths = np.array([0, k % 5], np.int64)
        self.ring.write(k * 0.01, time.time(), self.packets, self.bytes, self.marks, depths)

    def totals(self) -> dict[tuple[int, int], tuple[int, int, int]]:
        out = {}
        for i, port in enumerate(PORTS):
            for c in range(JOB_CLASSES):
                at = i * JOB_CLASSES + c
                if self.packets[at]:
                    out[(port, c)] = (int(self.packets[at]), int(self.bytes[at]),
                                      int(self.marks[at]))  # fmt: skip
        return out


def sums(samples: list[JobSample]) -> dict[tuple[int, int], tuple[int, int, int]]:
    out: dict[tuple[int, int], list[int]] = {}
    for s in samples:
        for cell, values in s.counts.items():
            total = out.setdefault(cell, [0, 0, 0])
            for i, v in enumerate(values):
                total[i] += v
    return {c: (v[0], v[1], v[2]) for c, v in out.items()}


def test_the_fast_encoding_equals_the_tree_s() -> None:
    """The whole tree of one sample, encoded from the cells directly, holds the same
    updates as the tree selected leaf by leaf (ports that sent or queued; classes that
    sent; a 64-bit count; the state leaves once)."""
    ports = (1, 2, 30, 31)
    z = np.zeros((len(ports), JOB_CLASSES), np.int64)
    packets, byte_counts, marks = z.copy(), z.copy(), z.copy()
    packets[0, 0], byte_counts[0, 0] = 1, 64
    packets[2, 5], byte_counts[2, 5], marks[2, 5] = 300, 2**40, 7
    packets[2, 15], byte_counts[2, 15] = 2, 3000
    sample = Sample(9, 1.0, 1796000000.0123, 3, ports, packets, byte_counts, marks,
                    np.array([0, 0, 4, 11], np.int64))  # fmt: skip
    prefix = gnmi_pb2.Path(target="chip")
    whole = [list(gnmi_path_generator("/cassini/telemetry").elem)]
    names = {1: "tor1-eth1", 30: "agg1-eth1"}
    slow = sample_notification(sample, names, 2, whole, gnmi_pb2.PROTO, prefix)
    cache: dict[object, tuple[bytes, ...]] = {}
    for _ in range(2):  # the second time from the cache
        fast = fast_notification(sample, names, 2, prefix, cache)

        def key(n: gnmi_pb2.Notification) -> list[tuple[bytes, int]]:
            return sorted((u.path.SerializeToString(deterministic=True), u.val.uint_val)
                          for u in n.update)  # fmt: skip

        assert key(fast) == key(slow)
        assert (fast.timestamp, fast.prefix.target) == (slow.timestamp, "chip")
    assert len(slow.update) == 3 + 2 + (2 + 3 + 2)  # state, 2 depths, the cells: 0s left out


@pytest.fixture
def served() -> Iterator[tuple[str, Writer]]:
    writer = Writer(slots=8)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    add_gnmi_service(server, lambda: [], telemetry=TelemetrySource(lambda: writer.ring, NAMES))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}", writer
    finally:
        server.stop(0).wait()


def test_a_10_ms_stream_sums_to_the_counters_written(served: tuple[str, Writer]) -> None:
    address, writer = served
    got: list[JobSample] = []
    stream = TelemetryStream(address, {v: k for k, v in NAMES.items()}, got.append).start()
    try:
        for k in range(60):
            writer.write(k)
            time.sleep(0.01)
        assert wait_for(lambda: len(got) + stream.lost >= 60), (
            len(got),
            stream.lost,
            stream.error,
        )
    finally:
        stream.stop()
    assert stream.error is None
    assert stream.lost == 0, "a reader looking every 10 ms at an 8-slot ring loses nothing"
    assert len(got) == 60
    assert sums(got) == writer.totals()
    assert [(s.max_depth_cells or {}).get(2, 0) for s in got[:6]] == [0, 1, 2, 3, 4, 0]
    gaps = np.diff([s.time_s for s in got])
    assert np.median(gaps) == pytest.approx(0.01, abs=0.004)


def test_a_slow_reader_is_told_how_many_samples_it_lost(served: tuple[str, Writer]) -> None:
    address, writer = served
    got: list[JobSample] = []
    stream = TelemetryStream(address, {v: k for k, v in NAMES.items()}, got.append).start()
    try:
        for k in range(30):  # 30 samples at once: more than the 8 slots between two looks
            writer.write(k)
        assert wait_for(lambda: len(got) + stream.lost >= 30)
    finally:
        stream.stop()
    assert stream.lost == 22 and len(got) == 8
    assert got[0].lost == 22 and got[0].interval_s == pytest.approx(0.23)
    assert sums(got) == writer.totals()  # lost samples lose resolution, not bytes


def test_pygnmi_subscribes_to_one_port_at_10_ms(served: tuple[str, Writer]) -> None:
    address, writer = served
    host, port = address.rsplit(":", 1)
    path = "/cassini/telemetry/port[name=tor1-eth2]/job[class=1]/state/bytes"
    with gNMIclient(target=(host, int(port)), insecure=True) as client:
        stream = client.subscribe_stream(
            subscribe={"mode": "stream", "encoding": "proto", "subscription": [
                {"path": path, "mode": "sample", "sample_interval": 10_000_000}]}
        )  # fmt: skip
        first = stream.get_update(timeout=5)
        assert first.get("sync_response")
        for k in range(5):
            writer.write(k)
        seen: list[dict[str, Any]] = []
        while len(seen) < 5:
            seen.append(stream.get_update(timeout=5)["update"])
        stream.close()
    paths = {u["path"] for s in seen for u in s["update"]}
    assert paths == {
        "cassini/telemetry/port[name=tor1-eth2]/job[class=1]/state/bytes",
        "cassini/telemetry/state/sample",
        "cassini/telemetry/state/intervals",
        "cassini/telemetry/state/samples-lost",
    }
    byte_counts = [u["val"] for s in seen for u in s["update"] if u["path"].endswith("bytes")]
    assert byte_counts == [3000 + k for k in range(5)]


@pytest.mark.parametrize(
    ("path", "mode", "interval", "code", "says"),
    [
        ("/cassini/telemetry/port[name=tor9-eth1]", "STREAM", 0, "NOT_FOUND", "tor1-eth1"),
        ("/cassini/telemetry/port/job[class=16]", "STREAM", 0, "NOT_FOUND", "job"),
        ("/cassini/telemetry", "STREAM", 5_000_000, "INVALID_ARGUMENT", "10000000 ns"),
        ("/cassini/telemetry", "ONCE", 0, "UNIMPLEMENTED", "STREAM only"),
    ],
)
def test_bad_telemetry_subscriptions_are_refused(
    served: tuple[str, Writer], path: str, mode: str, interval: int, code: str, says: str
) -> None:
    address, _ = served
    sub = gnmi_pb2.Subscription(
        path=gnmi_path_generator(path), mode=gnmi_pb2.SAMPLE, sample_interval=interval
    )
    request = gnmi_pb2.SubscribeRequest(
        subscribe=gnmi_pb2.SubscriptionList(
            subscription=[sub], mode=gnmi_pb2.SubscriptionList.Mode.Value(mode)
        )
    )
    with grpc.insecure_channel(address) as channel:
        stub = gnmi_pb2_grpc.gNMIStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            list(stub.Subscribe(iter([request]), timeout=5))
        assert err.value.code().name == code
        assert says in err.value.details()
        with pytest.raises(grpc.RpcError) as got:
            stub.Get(gnmi_pb2.GetRequest(path=[gnmi_path_generator("/cassini/telemetry")]))
        assert got.value.code() == grpc.StatusCode.UNIMPLEMENTED


def _frame(src_mac: bytes, dst_mac: bytes, sport: int, dport: int, ect: bool) -> bytes:
    head = Ether(dst=dst_mac.hex(":"), src=src_mac.hex(":")) / IP(
        src="10.0.0.1", dst="10.0.0.2", tos=2 if ect else 0
    )
    return bytes(head / TCP(sport=sport, dport=dport, flags="A") / bytes(300))


@pytest.mark.root
def test_the_switch_streams_samples_that_sum_to_its_p4_counters(lab: NetnsLab) -> None:
    h1, h2 = make_hosts(lab, 2)
    ports = {1: h1.switch_ifname, 2: h2.switch_ifname}
    names = {1: "tor1-eth1", 2: "tor1-eth2"}
    jobs = [JobSockets("a", (("10.0.0.2", 47000),)), JobSockets("b", (("10.0.0.2", 47001),))]
    with SoftwareSwitch(7, ports, "127.0.0.1:0", TmConfig(), interface_names=names) as switch:
        assert switch.grpc_address is not None
        forward = TableEntry(
            "CassiniIngress.logical_forward",
            {"ingress_port": 1, "dst_mac": h2.mac.hex(":")},
            "CassiniIngress.set_egress_port",
            {"port": 2},
        )
        with P4RuntimeSession.connect(switch.grpc_address, 7) as session:
            session.set_pipeline(load_p4info())
            updates = [forward, *job_class_entries(jobs)]
            session.write([Update(UpdateType.INSERT, e) for e in updates])
            collector = SampleCollector(switch.grpc_address, 7, (1, 2)).start()
            assert collector.collected.source == "gnmi-stream"
            sent = 0
            for k in range(40):
                h1.send(_frame(h1.mac, h2.mac, 40000, 47000 + k % 2, True))
                h1.send(_frame(h1.mac, h2.mac, 40001, 9999, False))  # no job: class 0
                sent += 2
                time.sleep(0.003)
            assert wait_for(lambda: session.read_counters(PORT_TX, 2)[0].packets == sent)
            time.sleep(0.1)  # the last frames' sample is streamed
            collected = collector.stop()
            cells = [2 * JOB_CLASSES + c for c in range(JOB_CLASSES)]
            tx = {s.index % JOB_CLASSES: (s.packets, s.bytes)
                  for s in session.read_counters(JOB_TX, indices=cells) if s.packets}  # fmt: skip
            marked = {s.index % JOB_CLASSES: s.packets
                      for s in session.read_counters(JOB_ECN_MARKED, indices=cells)}  # fmt: skip
    assert collected.error is None and collected.lost == 0
    assert set(tx) == {0, 1, 2} and tx[1][0] == 20 and tx[0][0] == 40
    got = sums(collected.samples)
    assert got == {(2, c): (p, b, marked[c]) for c, (p, b) in tx.items()}
    assert collected.rate_hz() == pytest.approx(100, rel=0.2)
