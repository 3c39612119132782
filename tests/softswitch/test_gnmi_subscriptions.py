"""A gNMI Subscribe cannot hold the switch (issue 37): an idle POLL subscription ends, a
STREAM whose client does not read is cancelled, a STREAM's building has a CPU budget,
and the harness's own client always finds a slot.

Real gRPC clients against a real server; every test here failed before the change."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import numpy as np
import pytest
from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc

from controlplane.gnmi import GnmiError
from controlplane.job_samples import TelemetryStream
from emulation.softswitch.gnmi_config import enabled_request
from emulation.softswitch.gnmi_service import GnmiServicer, _as_sent, add_gnmi_service
from emulation.softswitch.gnmi_subscriptions import HARNESS_KEY_METADATA
from emulation.softswitch.gnmi_telemetry import TelemetrySource
from emulation.softswitch.harness_key import harness_key
from emulation.softswitch.log_limit import LogLimiter
from emulation.softswitch.p4runtime_service import serve
from emulation.softswitch.port_stats import PortCounters, port_counters
from emulation.softswitch.raw_requests import raw_service_handler
from emulation.softswitch.service_limits import MAX_SUBSCRIPTIONS, ServiceLimits
from tests.helpers.p4runtime import DEVICE_ID
from tests.helpers.waiting import wait_for
from tests.softswitch.test_gnmi_telemetry import Writer

Codes = grpc.StatusCode
NAMES = {p: f"veth{p}" for p in range(1, 33)}
INTERFACES = gnmi_pb2.Path(elem=[gnmi_pb2.PathElem(name="interfaces")])


def _ports() -> list[PortCounters]:
    return port_counters({"rx_packets": {1: 5}}, NAMES, list(NAMES))


def _held(first: Any, more: Iterator[Any] | None = None) -> Iterator[Any]:
    """The first request, then whatever `more` gives, the client's side kept open."""
    yield first
    if more is not None:
        yield from more
    threading.Event().wait()


def _subscription(mode: int, paths: int = 1, **sub: Any) -> Any:
    return gnmi_pb2.SubscribeRequest(
        subscribe=gnmi_pb2.SubscriptionList(
            mode=mode,
            encoding=gnmi_pb2.PROTO,
            subscription=[gnmi_pb2.Subscription(path=INTERFACES, **sub)] * paths,
        )
    )


def _read_all(call: Any) -> None:
    with contextlib.suppress(grpc.RpcError):
        for _ in call:
            pass


POLL = gnmi_pb2.SubscriptionList.POLL
STREAM = gnmi_pb2.SubscriptionList.STREAM
ONCE = gnmi_pb2.SubscriptionList.ONCE


def test_the_harness_key_is_made_once_and_readable_by_its_owner_alone(tmp_path: Any) -> None:
    key = harness_key(tmp_path)
    assert len(key) == 32 and harness_key(tmp_path) == key
    assert (tmp_path / "harness.key").stat().st_mode & 0o077 == 0


def test_idle_poll_subscriptions_cannot_keep_the_harness_out() -> None:
    """8 idle POLL subscriptions refused the harness's own telemetry stream
    (RESOURCE_EXHAUSTED) for as long as they were held: a slot is kept for the client
    that sends the harness key, and a POLL nobody polls is ended.

    The eight poll every 0.2 s while the caps are checked, however long a busy
    machine takes for that, and go idle after: their idle time is then the
    only timer in play."""
    limits = ServiceLimits(poll_idle_s=2.0)
    with serve(DEVICE_ID, port_counters=_ports, limits=limits, harness_key="k" * 32) as running:
        channel = grpc.insecure_channel(running.address)
        gnmi = gnmi_pb2_grpc.gNMIStub(channel)
        polled, gone_idle = threading.Event(), threading.Event()

        def polls(until: threading.Event, every_s: float) -> Iterator[Any]:
            while not until.wait(every_s):
                yield gnmi_pb2.SubscribeRequest(poll=gnmi_pb2.Poll())

        idle = [
            gnmi.Subscribe(_held(_subscription(POLL), polls(gone_idle, 0.2)))
            for _ in range(MAX_SUBSCRIPTIONS)
        ]
        try:
            for call in idle:
                assert next(call).HasField("update")  # each is served
            with pytest.raises(grpc.RpcError) as refused:
                list(gnmi.Subscribe(iter([_subscription(ONCE)]), timeout=5))
            assert refused.value.code() == Codes.RESOURCE_EXHAUSTED
            wrong = ((HARNESS_KEY_METADATA, "x" * 32),)
            with pytest.raises(grpc.RpcError) as refused:
                list(gnmi.Subscribe(iter([_subscription(ONCE)]), timeout=5, metadata=wrong))
            assert refused.value.code() == Codes.RESOURCE_EXHAUSTED
            # The harness gets in while all eight are held...
            harness = ((HARNESS_KEY_METADATA, "k" * 32),)
            kept = gnmi.Subscribe(_held(_subscription(POLL), polls(polled, 0.5)), metadata=harness)
            assert next(kept).HasField("update")
            # ... and the eight, once idle, end when their time without a Poll is up (held
            # for ever before the change).
            gone_idle.set()
            began = time.monotonic()
            for call in idle:
                with pytest.raises(grpc.RpcError) as ended:
                    for _ in call:  # the sync_response, then the end
                        pass
                assert ended.value.code() == Codes.DEADLINE_EXCEEDED
                assert "no Poll" in (ended.value.details() or "")
            assert time.monotonic() - began < limits.poll_idle_s + 30
            assert not kept.done()  # one that polls stays
            assert list(gnmi.Subscribe(iter([_subscription(ONCE)]), timeout=5))
        finally:
            polled.set()
            gone_idle.set()
            channel.close()


def test_a_stream_subscriber_that_does_not_read_is_cancelled() -> None:
    """8 STREAM subscriptions of 901 paths, never read, held the service for good."""
    limits = ServiceLimits(stream_stall_s=3.0, max_subscriptions=1)  # longer than a slow check
    reads = [0]

    def counted() -> list[PortCounters]:
        reads[0] += 1
        return _ports()

    with serve(DEVICE_ID, port_counters=counted, limits=limits) as running:
        # A window that does not grow: the responses the client leaves unread back up.
        channel = grpc.insecure_channel(running.address, options=[("grpc.http2.bdp_probe", 0)])
        gnmi = gnmi_pb2_grpc.gNMIStub(channel)
        request = _subscription(STREAM, paths=900, sample_interval=100_000_000)
        call = gnmi.Subscribe(_held(request))
        def slot_free() -> bool:
            try:
                return bool(list(gnmi.Subscribe(iter([_subscription(ONCE)]), timeout=5)))
            except grpc.RpcError as err:
                assert err.code() == Codes.RESOURCE_EXHAUSTED
                return False

        try:
            assert next(call).HasField("update")
            assert not slot_free()  # it holds the one slot
            assert wait_for(slot_free, timeout=30)
            after = reads[0]
            time.sleep(0.5)
            assert reads[0] == after  # nothing is built for it any more
            with pytest.raises(grpc.RpcError) as ended:
                for _ in call:  # what it left unread, then the end
                    pass
            assert ended.value.code() == Codes.CANCELLED
        finally:
            call.cancel()
            channel.close()


def test_a_stream_spends_at_most_its_share_of_a_core_building_samples() -> None:
    """Each round of a STREAM's samples costs 50 ms of its thread's CPU here (a fake
    clock): at a 5% share it rests 0.95 s after each, not 100 ms (20 rounds in 2 s before
    the change). The rest is a wall-clock wait, which a busy machine can only lengthen:
    the test times the gaps between the switch's reads, not how many fit in 2 s."""
    reads: list[float] = []  # when each round read the switch
    spent = itertools.count(0.0, 0.05).__next__  # each look at the clock: 50 ms more

    def counted() -> list[PortCounters]:
        reads.append(time.monotonic())
        return _ports()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    servicer = GnmiServicer(counted, build_cpu=spent)
    service = gnmi_pb2.DESCRIPTOR.services_by_name["gNMI"]
    server.add_generic_rpc_handlers(
        (raw_service_handler(service, servicer, LogLimiter(), {"Get": _as_sent}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    call = gnmi_pb2_grpc.gNMIStub(channel).Subscribe(
        _held(_subscription(STREAM, sample_interval=100_000_000))
    )
    try:
        threading.Thread(target=_read_all, args=(call,), daemon=True).start()
        assert wait_for(lambda: len(reads) >= 5)  # the first ones, then a round a rest
        last_gaps = np.diff(reads[-3:])
        assert min(last_gaps) >= 0.95 - 0.05, last_gaps  # rest: 50 ms * (1 / 5% - 1)
    finally:
        call.cancel()
        channel.close()
        server.stop(0)


def test_the_harness_telemetry_stream_gets_the_kept_slot() -> None:
    """The collector's telemetry STREAM sends the harness key: it gets in while every
    shared slot is held by an idle POLL; without the key it is refused."""
    writer = Writer(slots=8)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    telemetry = TelemetrySource(lambda: writer.ring, {1: "tor1-eth1", 2: "tor1-eth2"})
    add_gnmi_service(server, _ports, telemetry=telemetry, harness_key="k" * 32)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    address = f"127.0.0.1:{port}"
    channel = grpc.insecure_channel(address)
    gnmi = gnmi_pb2_grpc.gNMIStub(channel)
    idle = [gnmi.Subscribe(_held(_subscription(POLL))) for _ in range(MAX_SUBSCRIPTIONS)]
    try:
        for call in idle:
            assert next(call).HasField("update")
        with pytest.raises(GnmiError, match="RESOURCE_EXHAUSTED"):
            TelemetryStream(address, {}, timeout=5).start()
        harness = ((HARNESS_KEY_METADATA, "k" * 32),)
        stream = TelemetryStream(address, {}, timeout=5, metadata=harness).start()
        stream.stop()
    finally:
        for call in idle:
            call.cancel()
        channel.close()
        server.stop(0).wait()


def test_nested_json_and_telemetry_intervals_past_the_maximum_are_invalid_argument(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A Set of config/enabled with deeply nested json_val answered UNKNOWN (RecursionError),
    and a /cassini/telemetry STREAM at sample_interval 2**64 - 1 was accepted, then failed
    with UNKNOWN and two tracebacks in the log."""
    writer = Writer(slots=8)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    telemetry = TelemetrySource(lambda: writer.ring, {1: "tor1-eth1", 2: "tor1-eth2"})
    add_gnmi_service(server, _ports, telemetry=telemetry, set_enabled=lambda name, on: None)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    gnmi = gnmi_pb2_grpc.gNMIStub(channel)
    try:
        request = enabled_request("veth1", True)
        request.update[0].val.CopyFrom(gnmi_pb2.TypedValue(json_val=b"[" * 100_000))
        with pytest.raises(grpc.RpcError) as refused:
            gnmi.Set(request, timeout=5)
        assert refused.value.code() == Codes.INVALID_ARGUMENT
        assert "boolean" in (refused.value.details() or "")
        path = gnmi_pb2.Path(
            elem=[gnmi_pb2.PathElem(name="cassini"), gnmi_pb2.PathElem(name="telemetry")]
        )
        sub = gnmi_pb2.Subscription(path=path, mode=gnmi_pb2.SAMPLE, sample_interval=2**64 - 1)
        subscribe = gnmi_pb2.SubscribeRequest(
            subscribe=gnmi_pb2.SubscriptionList(
                mode=STREAM, encoding=gnmi_pb2.PROTO, subscription=[sub]
            )
        )
        with pytest.raises(grpc.RpcError) as refused:
            list(gnmi.Subscribe(iter([subscribe]), timeout=5))
        assert refused.value.code() == Codes.INVALID_ARGUMENT
        assert "maximum" in (refused.value.details() or "")
    finally:
        channel.close()
        server.stop(0).wait()
    assert not [r for r in caplog.records if r.exc_info]
