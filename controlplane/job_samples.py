"""What did each (egress port, job class) send, and how deep did each queue get, per sample?

One record, `JobSample`, from two sources:

- the software target's gNMI STREAM of /cassini/telemetry (`TelemetryStream`):
  its packet loop samples every 10 ms into a ring, the switch's service sends
  one notification per sample, a leaf per count (`samples_from_notification`
  reads it back) or, under /cassini/telemetry/packed, two bytes leaves of
  int64 rows (`packed_sample`; what our collector asks for: 5 updates a
  sample instead of about 150). Without a callback the stream keeps the
  responses as they came and decodes them when asked (`decode_responses`),
  after the run, so that the run's CPU goes to the replicas and the switch;
- P4Runtime counter reads of `job_tx` and `job_ecn_marked` (`CounterSampler`),
  for targets without that stream (bmv2, Tofino): a sample per read, at the
  rate the target sustains (benchmarks/README.md states it), no queue depth
  (the `max_qdepth` register is not read: our choice, left for a target
  that serves register reads).

`SampleCollector` takes the stream where the target serves it, else the
counter reads, in a thread of its own, and keeps every sample and how many
were lost. Counts are per sample (not cumulative) and only non-zero cells
are kept; sums over a collection equal the counters' growth over it.
"""

from __future__ import annotations

import contextlib
import queue
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
import numpy as np
from pygnmi.spec.v080 import gnmi_pb2

from .channels import close_channel
from .gnmi import (
    JOB_LEAVES,
    QUEUE_LEAF,
    TELEMETRY_MIN_SAMPLE_NS,
    TELEMETRY_ROOT,
    GnmiError,
    GnmiReader,
    GnmiUnsupported,
)
from .job_classes import JOB_CLASSES
from .p4names import JOB_ECN_MARKED, JOB_TX
from .session import P4RuntimeSession
from .tls import TlsSettings

Cell = tuple[int, int]  # (egress port, job class)

# The packed form of a sample (our choice; served by emulation/softswitch/gnmi_telemetry.py):
# /cassini/telemetry/packed/cells and .../depths, bytes_val leaves of little-endian int64
# rows, one row per (port, class) that sent and per port that queued; ports are chip ports.
PACKED = "packed"
PACKED_CELLS = "cells"
PACKED_DEPTHS = "depths"
PACKED_CELL_COLUMNS = ("port", "class", "packets", "bytes", "ce-marks")
PACKED_DEPTH_COLUMNS = ("port", "max-queue-depth-cells")
SUBSCRIBE_METHOD = "/gnmi.gNMI/Subscribe"
# (our choice) The collector's stream has the switch look in its ring every 100 ms: the
# same 10 ms samples, ten per look, a tenth of the service's wake-ups; its ring holds 2.56 s.
STREAM_LOOK_S = 0.1


@dataclass(frozen=True)
class JobSample:
    """One sample: per (port, class) that sent in it, (packets, bytes, CE-marked packets);
    per port that queued, the deepest queue in cells (None: the source has no depths)."""

    time_s: float  # the wall clock (Unix epoch seconds) at the sample: iterations.csv's clock
    interval_s: float  # the time this sample covers (10 ms; more after lost samples)
    counts: Mapping[Cell, tuple[int, int, int]]
    max_depth_cells: Mapping[int, int] | None = None
    lost: int = 0  # samples lost just before this one (their counts are in this one)


def port_of(name: str, ports: Mapping[str, int]) -> int | None:
    """The chip port of an interface name: as the target listed it, or `port<N>`.

    >>> port_of("tor1-eth1", {"tor1-eth1": 1}), port_of("port7", {}), port_of("x", {})
    (1, 7, None)
    """
    if name in ports:
        return ports[name]
    found = re.fullmatch(r"port(\d+)", name)
    return int(found.group(1)) if found else None


def telemetry_path(packed: bool = False) -> Any:
    """gnmi.Path /cassini/telemetry (everything the stream serves, a leaf per count) or
    /cassini/telemetry/packed (the same in two bytes leaves)."""
    names = (*TELEMETRY_ROOT, PACKED) if packed else TELEMETRY_ROOT
    return gnmi_pb2.Path(elem=[gnmi_pb2.PathElem(name=n) for n in names])


# What one leaf's path means: ("state", leaf), ("depth", port) or ("job", (port, class), i)
# with i the leaf's index in JOB_LEAVES; None for a path that is none of these.
Meaning = tuple[Any, ...] | None


def leaf_meaning(notice_prefix: Any, path: Any, ports: Mapping[str, int]) -> Meaning:
    """What a telemetry update's path names (see `Meaning`)."""
    elems = list(notice_prefix.elem) + list(path.elem)
    names = [e.name.split(":")[-1] for e in elems]
    if names[:2] != list(TELEMETRY_ROOT):
        return None
    if names[2:3] == ["state"] and len(names) == 4:
        return ("state", names[3])
    if len(names) < 5 or names[2] != "port":
        return None
    port = port_of(elems[2].key.get("name", ""), ports)
    if port is None:
        return None
    if names[3:] == ["state", QUEUE_LEAF]:
        return ("depth", port)
    if len(names) == 6 and names[3] == "job" and names[5] in JOB_LEAVES:
        cell = (port, int(elems[3].key.get("class", "0")))
        return ("job", cell, JOB_LEAVES.index(names[5]))
    return None


def samples_from_notification(
    notice: Any,
    ports: Mapping[str, int],
    interval_s: float,
    meanings: dict[bytes, Meaning] | None = None,
) -> JobSample | None:
    """The sample of one PROTO-encoded telemetry notification (None: it only says samples
    were lost; `lost_in` reads that). `meanings` keeps what each path (serialised) names
    from one notification to the next: a stream repeats the same few hundred paths, and
    reading each anew cost 2 ms a notification of 143 updates."""
    meanings = {} if meanings is None else meanings
    prefix = notice.prefix.SerializeToString()
    counts: dict[Cell, list[int]] = {}
    depths: dict[int, int] = {}
    state: dict[str, int] = {}
    for update in notice.update:
        key = prefix + b"/" + update.path.SerializeToString()
        if key in meanings:
            meaning = meanings[key]
        else:
            meaning = meanings[key] = leaf_meaning(notice.prefix, update.path, ports)
        if meaning is None:
            continue
        value = update.val.uint_val
        kind = meaning[0]
        if kind == "job":
            cell = meaning[1]
            found = counts.get(cell)
            if found is None:
                found = counts[cell] = [0] * len(JOB_LEAVES)
            found[meaning[2]] = value
        elif kind == "depth":
            depths[meaning[1]] = value
        else:
            state[meaning[1]] = value
    if "sample" not in state:
        return None
    intervals = max(1, state.get("intervals", 1))
    return JobSample(
        time_s=notice.timestamp / 1e9,
        interval_s=intervals * interval_s,
        counts={c: (v[0], v[1], v[2]) for c, v in counts.items()},
        max_depth_cells=depths,
        lost=state.get("samples-lost", 0),
    )


def packed_sample(notice: Any, interval_s: float) -> JobSample | None:
    """The sample of one notification of the packed form (None: it only says samples
    were lost; `lost_in` reads that)."""
    state: dict[str, int] = {}
    cells = depths = b""
    for update in notice.update:
        leaf = update.path.elem[-1].name if update.path.elem else ""
        if leaf == PACKED_CELLS:
            cells = update.val.bytes_val
        elif leaf == PACKED_DEPTHS:
            depths = update.val.bytes_val
        else:
            state[leaf] = update.val.uint_val
    if "sample" not in state:
        return None
    rows = np.frombuffer(cells, "<i8").reshape(-1, len(PACKED_CELL_COLUMNS)).tolist()
    queued = np.frombuffer(depths, "<i8").reshape(-1, len(PACKED_DEPTH_COLUMNS)).tolist()
    return JobSample(
        time_s=notice.timestamp / 1e9,
        interval_s=max(1, state.get("intervals", 1)) * interval_s,
        counts={(p, c): (n, b, m) for p, c, n, b, m in rows},
        max_depth_cells={p: d for p, d in queued},
        lost=state.get("samples-lost", 0),
    )


def is_packed_notification(notice: Any) -> bool:
    """Is a notification in the packed form (a path through /cassini/telemetry/packed)?"""
    return any(
        len(u.path.elem) > 2 and u.path.elem[2].name.split(":")[-1] == PACKED for u in notice.update
    )


def decode_responses(
    responses: Sequence[bytes],
    ports: Mapping[str, int],
    interval_s: float,
    meanings: dict[bytes, Meaning] | None = None,
) -> tuple[list[JobSample], int]:
    """The samples of a stream's serialised SubscribeResponses (either form) and how many
    samples were lost: what a `TelemetryStream` without a callback decodes after the run."""
    meanings = {} if meanings is None else meanings
    samples, lost = [], 0
    for raw in responses:
        response = gnmi_pb2.SubscribeResponse.FromString(raw)
        if not response.HasField("update"):
            continue
        notice = response.update
        if is_packed_notification(notice):
            sample = packed_sample(notice, interval_s)
        else:
            sample = samples_from_notification(notice, ports, interval_s, meanings)
        if sample is None:
            lost += lost_in(notice)
            continue
        lost += sample.lost
        samples.append(sample)
    return samples, lost


def lost_in(notice: Any) -> int:
    """The samples-lost leaf of a notification (0 if it has none)."""
    for update in notice.update:
        if update.path.elem and update.path.elem[-1].name == "samples-lost":
            return int(update.val.uint_val)
    return 0


class TelemetryStream:
    """A gNMI STREAM subscription to /cassini/telemetry (`packed`: its packed form).

    With `on_sample`, each sample goes to it as it comes (decoded in the
    stream's thread); without, the stream keeps the serialised responses and
    `samples` decodes them (`decode_responses`): during a run the thread only
    appends bytes. `start` returns once the target acknowledged the
    subscription (its sync_response) and raises GnmiUnsupported if the target
    does not serve the path, GnmiError if it cannot be reached; `stop` closes
    our side of the stream, which ends it, and waits for what was in flight.
    """

    def __init__(
        self,
        address: str,
        ports: Mapping[str, int],
        on_sample: Callable[[JobSample], None] | None = None,
        interval_s: float = TELEMETRY_MIN_SAMPLE_NS / 1e9,
        timeout: float = 5.0,
        tls: TlsSettings | None = None,
        packed: bool = True,
        look_s: float | None = None,
        metadata: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.address = address
        self.ports = dict(ports)
        # Sent with the subscription: the harness's key gets it the slot the software
        # switch keeps for the harness (emulation/softswitch/harness_key.py).
        self.metadata = tuple(metadata)
        self.on_sample = on_sample
        self.interval_s = interval_s
        self.timeout = timeout
        self.packed = packed
        # How often the target looks in its ring (the subscription's sample_interval):
        # None, every sample; longer sends the same samples, several per look.
        self.look_s = look_s
        self.lost = 0  # samples the target's ring overwrote before our stream read them
        self.error: str | None = None
        self.responses: list[bytes] = []  # kept as they came, without `on_sample`
        if tls is None:
            self._channel = grpc.insecure_channel(address)
        else:
            self._channel = grpc.secure_channel(
                address, tls.credentials(), options=tls.channel_options()
            )
        self._stop = threading.Event()
        self._ready: queue.Queue[BaseException | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._call: Any = None
        self._meanings: dict[bytes, Meaning] = {}  # paths read so far (`samples_from_notification`)

    def _requests(self) -> Iterator[Any]:
        sub = gnmi_pb2.Subscription(
            path=telemetry_path(self.packed),
            mode=gnmi_pb2.SAMPLE,
            sample_interval=round((self.look_s or self.interval_s) * 1e9),
        )
        yield gnmi_pb2.SubscribeRequest(
            subscribe=gnmi_pb2.SubscriptionList(
                subscription=[sub],
                mode=gnmi_pb2.SubscriptionList.STREAM,
                encoding=gnmi_pb2.PROTO,
            )
        )
        self._stop.wait()  # then our side closes: the target ends the stream

    def start(self) -> TelemetryStream:
        # The responses as bytes (no deserializer): parsed only when and where needed.
        subscribe = self._channel.stream_stream(
            SUBSCRIBE_METHOD,
            request_serializer=gnmi_pb2.SubscribeRequest.SerializeToString,
            response_deserializer=None,
        )
        self._call = subscribe(
            self._requests(), wait_for_ready=True, metadata=self.metadata or None
        )
        self._thread = threading.Thread(target=self._read, name="telemetry-stream", daemon=True)
        self._thread.start()
        try:
            failure = self._ready.get(timeout=self.timeout)
        except queue.Empty:
            failure = GnmiError(f"no telemetry from {self.address} within {self.timeout:g} s")
        except BaseException:  # Ctrl-C: a channel left open hung the exit in its __del__
            self.stop()
            raise
        if failure is not None:
            self.stop()
            raise failure
        return self

    def _read(self) -> None:
        synced = False
        try:
            for raw in self._call:
                if not synced:  # nothing but the sync_response comes before it
                    if gnmi_pb2.SubscribeResponse.FromString(raw).sync_response:
                        synced = True
                        self._ready.put(None)
                    continue
                if self.on_sample is None:
                    self.responses.append(raw)
                    continue
                got, lost = decode_responses([raw], self.ports, self.interval_s, self._meanings)
                self.lost += lost
                for sample in got:
                    self.on_sample(sample)
        except grpc.RpcError as err:
            code = err.code()
            if code == grpc.StatusCode.CANCELLED and self._stop.is_set():
                return
            cls = GnmiUnsupported if code == grpc.StatusCode.UNIMPLEMENTED else GnmiError
            failure = cls(f"telemetry stream from {self.address}: {code.name}: {err.details()}")
            if synced:
                self.error = str(failure)
            else:
                self._ready.put(failure)
        finally:
            if not synced:
                self._ready.put(GnmiError(f"the telemetry stream from {self.address} ended"))

    def samples(self) -> list[JobSample]:
        """The samples of the responses kept (after `stop`; counts their losses in `lost`)."""
        got, lost = decode_responses(self.responses, self.ports, self.interval_s, self._meanings)
        self.responses = []
        self.lost += lost
        return got

    def stop(self) -> None:
        self._stop.set()
        try:
            if self._thread is not None:
                self._thread.join(timeout=self.timeout)
                if self._thread.is_alive() and self._call is not None:
                    self._call.cancel()
                    self._thread.join(timeout=1.0)
        finally:  # a Ctrl-C above still closes the channel (`channels`)
            close_channel(self._channel)


class CounterSampler:
    """Samples from P4Runtime reads of the job counters' cells of `ports` (bmv2, Tofino):
    each `take` reads them and returns what grew since the previous one (None the first
    time: that read is the baseline)."""

    def __init__(
        self,
        session: P4RuntimeSession,
        ports: Sequence[int],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.session = session
        self.cells = [p * JOB_CLASSES + c for p in sorted(set(ports)) for c in range(JOB_CLASSES)]
        self.clock = clock
        self._last: dict[tuple[str, int], tuple[int, int]] | None = None
        self._last_time = 0.0

    def read(self) -> dict[tuple[str, int], tuple[int, int]]:
        """(counter, index) -> (packets, bytes) of both job counters' cells of the ports.

        (our choice) One wildcard read per counter, the cells kept here: the
        software target answered all 8,192 cells of job_tx in 48 ms and 192 cells
        named one by one in 450 ms (benchmarks/bench_job_counter_reads.py)."""
        wanted = set(self.cells)
        out = {}
        for counter in (JOB_TX, JOB_ECN_MARKED):
            for s in self.session.read_counters(counter):
                if s.index in wanted:
                    out[(counter, s.index)] = (s.packets, s.bytes)
        return out

    def take(self) -> JobSample | None:
        now_cells, now = self.read(), self.clock()
        before, self._last = self._last, now_cells
        then, self._last_time = self._last_time, now
        if before is None:
            return None
        return sample_from_counters(before, now_cells, now, now - then)


def sample_from_counters(
    before: Mapping[tuple[str, int], tuple[int, int]],
    after: Mapping[tuple[str, int], tuple[int, int]],
    time_s: float,
    interval_s: float,
) -> JobSample:
    """The sample between two reads of the job counters (a counter that went back, as
    after a reset, counts from zero).

    >>> b = {(JOB_TX, 2 * 16 + 1): (1, 100), (JOB_ECN_MARKED, 2 * 16 + 1): (0, 0)}
    >>> a = {(JOB_TX, 2 * 16 + 1): (4, 700), (JOB_ECN_MARKED, 2 * 16 + 1): (1, 200)}
    >>> sample_from_counters(b, a, 5.0, 0.02).counts
    {(2, 1): (3, 600, 1)}
    """

    def grew(key: tuple[str, int]) -> tuple[int, int]:
        p1, b1 = after.get(key, (0, 0))
        p0, b0 = before.get(key, (0, 0))
        return (p1 - p0, b1 - b0) if p1 >= p0 and b1 >= b0 else (p1, b1)

    counts: dict[Cell, tuple[int, int, int]] = {}
    for counter, index in after:
        if counter != JOB_TX:
            continue
        packets, byte_count = grew((JOB_TX, index))
        marks, _ = grew((JOB_ECN_MARKED, index))
        if packets or marks:
            counts[divmod(index, JOB_CLASSES)] = (packets, byte_count, marks)
    return JobSample(time_s, interval_s, counts, None)


@dataclass
class Collected:
    """What a collection gathered: the samples in order, how many were lost, from where."""

    samples: list[JobSample] = field(default_factory=list)
    lost: int = 0
    source: str = ""  # "gnmi-stream" or "p4runtime-counters"
    error: str | None = None
    why_counters: str | None = None  # why the stream was not taken (None: not tried)

    def rate_hz(self) -> float:
        """Samples per second over the collection (the rate the source sustained)."""
        if len(self.samples) < 2:
            return 0.0
        span = self.samples[-1].time_s - self.samples[0].time_s
        return (len(self.samples) - 1) / span if span > 0 else 0.0


class SampleCollector:
    """Collects samples from a switch in a thread: the gNMI STREAM where the target serves
    it (`gnmi`), else P4Runtime reads of the job counters of `ports` every `interval_s`
    (as fast as the target answers, at most that often). The stream's samples reach
    `collected` in `stop` (decoded after the run); the counter reads' as they come."""

    def __init__(
        self,
        address: str,
        device_id: int,
        ports: Sequence[int],
        gnmi: bool = True,
        interval_s: float = TELEMETRY_MIN_SAMPLE_NS / 1e9,
        timeout_s: float = 5.0,
        tls: TlsSettings | None = None,
        metadata: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.address = address
        self.device_id = device_id
        self.metadata = tuple(metadata)  # sent with the stream (`TelemetryStream`)
        self.ports = tuple(ports)
        self.gnmi = gnmi
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.tls = tls
        self.collected = Collected()
        self._stream: TelemetryStream | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> SampleCollector:
        if self.gnmi:
            try:
                with GnmiReader(self.address, self.timeout_s, self.tls) as reader:
                    names = {i.name: i.port for i in reader.read() if i.port is not None}
                self._stream = TelemetryStream(
                    self.address,
                    names,
                    None,
                    self.interval_s,
                    self.timeout_s,
                    self.tls,
                    look_s=STREAM_LOOK_S,
                    metadata=self.metadata,
                ).start()  # decoded in `stop`, after the run
                self.collected.source = "gnmi-stream"
                return self
            except GnmiUnsupported as err:  # no stream here: counter reads
                self.collected.why_counters = str(err)
        session = P4RuntimeSession.connect(
            self.address, self.device_id, None, timeout=self.timeout_s, tls=self.tls
        )
        sampler = CounterSampler(session, self.ports)
        try:
            sampler.take()  # the baseline, before start returns
        except BaseException:  # the channel is closed here, not by the garbage collector
            session.close()
            raise
        self.collected.source = "p4runtime-counters"
        self._thread = threading.Thread(
            target=self._poll, args=(session, sampler), name="job-counters", daemon=True
        )
        self._thread.start()
        return self

    def _poll(self, session: P4RuntimeSession, sampler: CounterSampler) -> None:
        try:
            due = time.monotonic()
            while True:
                stopping = self._stop.is_set()
                sample = sampler.take()
                if sample is not None:
                    self.collected.samples.append(sample)
                if stopping:
                    return  # that was the last read, after the stop
                due = max(due + self.interval_s, time.monotonic())
                self._stop.wait(max(0.0, due - time.monotonic()))
        except Exception as err:  # reported with what was collected, not raised in a thread
            self.collected.error = f"job counter reads failed: {err}"
        finally:
            with contextlib.suppress(Exception):
                session.close()

    def stop(self) -> Collected:
        """End the collection (one last read or the stream's last samples) and return it."""
        self._stop.set()
        if self._stream is not None:
            self._stream.stop()
            self.collected.samples.extend(self._stream.samples())
            self.collected.lost = self._stream.lost
            self.collected.error = self._stream.error
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s + 5)
        return self.collected
