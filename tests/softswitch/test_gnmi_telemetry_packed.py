"""The packed form of the 10 ms telemetry (/cassini/telemetry/packed: two bytes leaves a
sample) and the deferred decode of a stream: both give the samples the per-leaf form
gives, decoded one notification at a time."""

from __future__ import annotations

import time

import grpc
import numpy as np
import pytest
from pygnmi.create_gnmi_path import gnmi_path_generator
from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc

from controlplane.job_classes import JOB_CLASSES
from controlplane.job_samples import (
    JobSample,
    TelemetryStream,
    decode_responses,
    packed_sample,
    samples_from_notification,
)
from emulation.softswitch.gnmi_telemetry import fast_notification, packed_notification, packed_paths
from emulation.softswitch.sample_ring import Sample
from tests.helpers.waiting import wait_for
from tests.softswitch.test_gnmi_telemetry import NAMES, Writer, served, sums

__all__ = ["served"]  # the fixture, shared with test_gnmi_telemetry


def _sample() -> Sample:
    ports = (1, 2, 30, 31)
    z = np.zeros((len(ports), JOB_CLASSES), np.int64)
    packets, byte_counts, marks = z.copy(), z.copy(), z.copy()
    packets[0, 0], byte_counts[0, 0] = 1, 64
    packets[2, 5], byte_counts[2, 5], marks[2, 5] = 300, 2**40, 7
    packets[2, 15], byte_counts[2, 15] = 2, 3000
    depths = np.array([0, 0, 4, 11], np.int64)
    return Sample(9, 1.0, 1796000000.0123, 3, ports, packets, byte_counts, marks, depths)


def test_the_packed_form_reads_back_as_the_per_leaf_form() -> None:
    sample = _sample()
    names = {1: "tor1-eth1", 2: "tor1-eth2", 30: "agg1-eth1", 31: "agg1-eth2"}
    leafy = fast_notification(sample, names, 2, None, {})
    packed = packed_notification(sample, 2, None, packed_paths())
    assert len(packed.update) == 5 and len(leafy.update) == 3 + 2 + 7
    from_leaves = samples_from_notification(leafy, {v: k for k, v in names.items()}, 0.01)
    from_packed = packed_sample(packed, 0.01)
    assert from_packed == from_leaves
    assert from_packed is not None
    assert from_packed.counts == {(1, 0): (1, 64, 0), (30, 5): (300, 2**40, 7),
                                  (30, 15): (2, 3000, 0)}  # fmt: skip
    assert from_packed.max_depth_cells == {30: 4, 31: 11}
    assert (from_packed.lost, from_packed.interval_s) == (2, pytest.approx(0.03))


def _same(a: list[JobSample], b: list[JobSample]) -> None:
    assert [(s.time_s, s.interval_s, s.lost) for s in a] == [
        (s.time_s, s.interval_s, s.lost) for s in b
    ]
    assert [dict(s.counts) for s in a] == [dict(s.counts) for s in b]
    assert [dict(s.max_depth_cells or {}) for s in a] == [dict(s.max_depth_cells or {}) for s in b]


def test_a_deferred_packed_stream_decodes_as_a_live_per_leaf_one(
    served: tuple[str, Writer],
) -> None:
    """Two subscribers of one ring: per leaf, each notification decoded as it comes; packed,
    kept as bytes and decoded in one go after the stream ended."""
    address, writer = served
    ports = {v: k for k, v in NAMES.items()}
    live: list[JobSample] = []
    leafy = TelemetryStream(address, ports, live.append, packed=False).start()
    deferred = TelemetryStream(address, ports).start()
    try:
        for k in range(40):
            writer.write(k)
            time.sleep(0.01)
        assert wait_for(lambda: len(live) >= 40 and len(deferred.responses) >= 40)
    finally:
        leafy.stop()
        deferred.stop()
    got = deferred.samples()
    assert len(got) == 40 and deferred.lost == leafy.lost == 0
    _same(got, live)
    assert sums(got) == writer.totals()
    again, lost = decode_responses(
        [gnmi_pb2.SubscribeResponse(update=packed_notification(
            Sample(0, 0.0, 5.0, 1, (2,), *(np.zeros((1, JOB_CLASSES), np.int64),) * 3,
                   np.zeros(1, np.int64)), 0, None, packed_paths())).SerializeToString()],
        ports, 0.01,
    )  # fmt: skip
    assert (len(again), again[0].counts, lost) == (1, {}, 0)


def test_a_stream_that_looks_rarely_still_gets_every_sample_at_its_end(
    served: tuple[str, Writer],
) -> None:
    """The target looks every 0.5 s (`look_s`); the samples written since its last look
    come when the client closes its side."""
    address, writer = served
    stream = TelemetryStream(address, {v: k for k, v in NAMES.items()}, look_s=0.5).start()
    try:
        for k in range(6):  # fewer than the ring's 8 slots
            writer.write(k)
            time.sleep(0.01)
    finally:
        stream.stop()
    got = stream.samples()
    assert (len(got), stream.lost) == (6, 0)
    assert sums(got) == writer.totals()


@pytest.mark.parametrize(
    ("paths", "encoding", "says"),
    [
        (["/cassini/telemetry/packed"], gnmi_pb2.JSON_IETF, "not in JSON_IETF"),
        (["/cassini/telemetry/packed", "/cassini/telemetry/state"], gnmi_pb2.PROTO, "own"),
        (["/cassini/telemetry/packed/bogus"], gnmi_pb2.PROTO, "bogus"),
    ],
)
def test_bad_packed_subscriptions_are_refused(
    served: tuple[str, Writer], paths: list[str], encoding: int, says: str
) -> None:
    address, _ = served
    subs = [gnmi_pb2.Subscription(path=gnmi_path_generator(p), mode=gnmi_pb2.SAMPLE)
            for p in paths]  # fmt: skip
    request = gnmi_pb2.SubscribeRequest(
        subscribe=gnmi_pb2.SubscriptionList(
            subscription=subs, mode=gnmi_pb2.SubscriptionList.STREAM, encoding=encoding
        )
    )
    with grpc.insecure_channel(address) as channel:
        stub = gnmi_pb2_grpc.gNMIStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            list(stub.Subscribe(iter([request]), timeout=5))
    assert err.value.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND)
    assert says in err.value.details()
