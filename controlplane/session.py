"""How does the control plane talk to one P4Runtime device?

One `P4RuntimeSession` per device: its own gRPC channel (plaintext, or TLS
with `tls.TlsSettings`), its own StreamChannel with arbitration (a
background thread reads the stream and keeps `is_primary` current),
pipeline push/pull, batched writes whose per-update errors come back as one
`WriteError`, and wildcard reads. There is no module
state, so two sessions to two devices work in one process (p4runtime-shell's
client is module-global, which is why it is not used here).
"""

from __future__ import annotations

import hashlib
import queue
import threading
from collections.abc import Iterable, Iterator, Sequence
from types import TracebackType
from typing import Any

import grpc
from google.rpc import code_pb2

from controlplane.proto.p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from . import protobuf_runtime
from .channels import close_channel
from .entries import CounterSample, TableEntry, Update, UpdateType
from .p4info import P4InfoIndex, index_p4info, load_p4info
from .tls import TlsSettings
from .write_errors import UpdateError, WriteError, failed_whole, full_table, update_errors

protobuf_runtime.check()  # say so when messages go through pure Python

DEFAULT_TIMEOUT_S = 5.0
# A failed Write's trailer holds one p4.v1.Error per update (about 40 bytes each
# even when empty): gRPC's default 16 KiB metadata limit drops the details of
# batches above ~200 updates. Messages stay bounded by the 64 MiB message limit.
CHANNEL_OPTIONS = (
    ("grpc.max_metadata_size", 16 << 20),
    ("grpc.absolute_max_metadata_size", 16 << 20),
    ("grpc.max_receive_message_length", 64 << 20),
    ("grpc.max_send_message_length", 64 << 20),
)


def open_channel(address: str, tls: TlsSettings | None = None) -> grpc.Channel:
    """A channel to `address` with CHANNEL_OPTIONS: TLS with `tls`, plaintext without."""
    if tls is None:
        return grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
    return grpc.secure_channel(
        address, tls.credentials(), options=CHANNEL_OPTIONS + tls.channel_options()
    )


def _last_connect_error(channel: grpc.Channel) -> str:
    """': <why the last attempt failed>' (gRPC's words), or '' if it gives none.

    A failed TLS handshake (an untrusted certificate, a plaintext server, a
    missing client certificate) looks like a timeout to channel_ready_future;
    one RPC that does not wait for the channel returns gRPC's reason.
    """
    probe = channel.unary_unary("/p4.v1.P4Runtime/Capabilities")
    try:
        probe(b"", timeout=1.0)
    except grpc.RpcError as err:
        details = (err.details() or "").strip()
        return f": {details.splitlines()[0][:300]}" if details else ""
    return ""


class ConnectionFailed(RuntimeError):
    """The device could not be reached or refused the session; the message names the address."""


class NotPrimaryError(RuntimeError):
    """A write was attempted by a backup controller (a higher election id holds the device)."""


def pipeline_cookie(index: P4InfoIndex, device_config: bytes = b"") -> int:
    """A 64-bit fingerprint of a pipeline, so a later session can tell whether it is ours."""
    digest = hashlib.sha256(index.p4info.SerializeToString(deterministic=True) + device_config)
    return int.from_bytes(digest.digest()[:8], "big")


class P4RuntimeSession:
    """A controller's session with one device. Use `P4RuntimeSession.connect(...)`."""

    def __init__(
        self,
        address: str,
        device_id: int,
        election_id: tuple[int, int] | None = (0, 1),
        role: str | None = None,
        p4info: P4InfoIndex | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        tls: TlsSettings | None = None,
    ) -> None:
        self.address = address
        self.device_id = device_id
        self.election_id = election_id
        self.role = role or ""
        self.timeout = timeout
        self.tls = tls
        self.p4info: P4InfoIndex = p4info if p4info is not None else load_p4info()
        self._channel: grpc.Channel | None = None
        self._stub: Any = None
        self._requests: queue.Queue[Any] = queue.Queue()
        self._stream: Any = None
        self._reader: threading.Thread | None = None
        self._state_lock = threading.Condition()
        self._arbitrated = False
        self._is_primary = False
        self._primary_election_id: tuple[int, int] | None = None
        self._stream_error: str | None = None
        self._closed = False

    # --- lifecycle -----------------------------------------------------------

    @classmethod
    def connect(
        cls,
        address: str,
        device_id: int,
        election_id: tuple[int, int] | None = (0, 1),
        role: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        p4info: P4InfoIndex | None = None,
        tls: TlsSettings | None = None,
    ) -> P4RuntimeSession:
        """Open the channel and the StreamChannel, and wait for the arbitration answer.

        election_id=None opens a read-only session: no StreamChannel, no
        arbitration (P4Runtime lets any client Read), so a monitor never
        competes with the controller for an election id. With tls the channel
        is TLS (mutual when it carries a client certificate); without it, plaintext.
        """
        session = cls(address, device_id, election_id, role, p4info, timeout, tls)
        try:
            session._open()
        except BaseException:
            session.close()
            raise
        return session

    def _open(self) -> None:
        self._channel = open_channel(self.address, self.tls)
        try:
            grpc.channel_ready_future(self._channel).result(timeout=self.timeout)
        except grpc.FutureTimeoutError:
            if self.tls is None:
                raise ConnectionFailed(
                    f"cannot reach a P4Runtime server at {self.address} within {self.timeout:g} s"
                ) from None
            reason = _last_connect_error(self._channel)
            if "Socket closed" in reason and not self.tls.mutual:
                reason += " (a server that requires client certificates closes the connection)"
            raise ConnectionFailed(
                f"cannot reach a P4Runtime server over TLS at {self.address} within "
                f"{self.timeout:g} s{reason}"
            ) from None
        self._stub = p4runtime_pb2_grpc.P4RuntimeStub(self._channel)
        if self.election_id is None:
            return
        self._stream = self._stub.StreamChannel(self._request_iterator())
        self._reader = threading.Thread(
            target=self._read_stream,
            name=f"p4rt-stream-{self.address}-{self.device_id}",
            daemon=True,
        )
        self._reader.start()
        self._send_arbitration()
        with self._state_lock:
            if not self._state_lock.wait_for(
                lambda: self._arbitrated or self._stream_error is not None, timeout=self.timeout
            ):
                raise ConnectionFailed(
                    f"P4Runtime server at {self.address} sent no arbitration answer "
                    f"for device {self.device_id} within {self.timeout:g} s"
                )
            if self._stream_error is not None:
                raise ConnectionFailed(
                    f"P4Runtime server at {self.address} (device {self.device_id}): "
                    f"{self._stream_error}"
                )

    def _election_proto(self) -> Any:
        if self.election_id is None:
            raise NotPrimaryError(
                f"session to device {self.device_id} at {self.address} is read-only "
                "(connected without an election id)"
            )
        high, low = self.election_id
        return p4runtime_pb2.Uint128(high=high, low=low)

    def _send_arbitration(self) -> None:
        request = p4runtime_pb2.StreamMessageRequest()
        request.arbitration.device_id = self.device_id
        request.arbitration.election_id.CopyFrom(self._election_proto())
        if self.role:
            request.arbitration.role.name = self.role
        self._requests.put(request)

    def _request_iterator(self) -> Iterator[Any]:
        while True:
            item = self._requests.get()
            if item is None:
                return
            yield item

    def _read_stream(self) -> None:
        try:
            for response in self._stream:
                if response.HasField("arbitration"):
                    arb = response.arbitration
                    with self._state_lock:
                        self._arbitrated = True
                        self._is_primary = arb.status.code == code_pb2.OK
                        if arb.HasField("election_id"):
                            self._primary_election_id = (arb.election_id.high, arb.election_id.low)
                        self._state_lock.notify_all()
                elif response.HasField("error"):
                    # Stream errors concern packet-outs, which this controller does not send.
                    continue
        except grpc.RpcError as err:
            with self._state_lock:
                if not self._closed:
                    self._stream_error = f"{err.code().name}: {err.details()}"
                self._is_primary = False
                self._state_lock.notify_all()

    @property
    def is_primary(self) -> bool:
        """True while this session holds the highest election id for the device (and role)."""
        with self._state_lock:
            return self._is_primary

    @property
    def primary_election_id(self) -> tuple[int, int] | None:
        """The primary's election id as last announced by the device."""
        with self._state_lock:
            return self._primary_election_id

    def close(self) -> None:
        """End the stream and the channel; idempotent."""
        with self._state_lock:
            self._closed = True
        try:
            self._requests.put(None)
            if self._stream is not None:
                self._stream.cancel()
            if self._reader is not None:
                self._reader.join(timeout=self.timeout)
        finally:  # a Ctrl-C above still closes the channel (`channels`)
            channel, self._channel = self._channel, None
            if channel is not None:
                close_channel(channel)

    def __enter__(self) -> P4RuntimeSession:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- RPC helpers -----------------------------------------------------------

    def _rpc_failed(self, what: str, err: grpc.RpcError) -> ConnectionFailed:
        return ConnectionFailed(
            f"P4Runtime server at {self.address} (device {self.device_id}): {what} failed: "
            f"{err.code().name}: {err.details()}"
        )

    def _not_primary(self, what: str, err: grpc.RpcError) -> NotPrimaryError:
        return NotPrimaryError(
            f"device {self.device_id} at {self.address} refused {what}: "
            f"this session is not primary ({err.details()})"
        )

    # --- pipeline --------------------------------------------------------------

    def set_pipeline(self, p4info: P4InfoIndex, device_config: bytes = b"") -> None:
        """Push a pipeline (VERIFY_AND_COMMIT); later encodings use its P4Info."""
        request = p4runtime_pb2.SetForwardingPipelineConfigRequest(
            device_id=self.device_id,
            role=self.role,
            action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT,
        )
        request.election_id.CopyFrom(self._election_proto())
        request.config.p4info.CopyFrom(p4info.p4info)
        request.config.p4_device_config = device_config
        request.config.cookie.cookie = pipeline_cookie(p4info, device_config)
        try:
            self._stub.SetForwardingPipelineConfig(request, timeout=self.timeout)
        except grpc.RpcError as err:
            if err.code() == grpc.StatusCode.PERMISSION_DENIED:
                raise self._not_primary("the pipeline", err) from None
            raise self._rpc_failed("SetForwardingPipelineConfig", err) from None
        self.p4info = p4info

    def get_pipeline(self) -> P4InfoIndex | None:
        """The device's P4Info, or None when it has no pipeline yet."""
        request = p4runtime_pb2.GetForwardingPipelineConfigRequest(
            device_id=self.device_id,
            response_type=p4runtime_pb2.GetForwardingPipelineConfigRequest.P4INFO_AND_COOKIE,
        )
        try:
            response = self._stub.GetForwardingPipelineConfig(request, timeout=self.timeout)
        except grpc.RpcError as err:
            if err.code() == grpc.StatusCode.FAILED_PRECONDITION:
                return None  # spec: no pipeline config set
            raise self._rpc_failed("GetForwardingPipelineConfig", err) from None
        if not response.config.HasField("p4info") or not (
            response.config.p4info.tables or response.config.p4info.actions
        ):
            return None
        return index_p4info(response.config.p4info)

    def has_pipeline(self, p4info: P4InfoIndex, device_config: bytes | None = None) -> bool:
        """Whether the device already runs a pipeline with this P4Info (and, given
        `device_config`, that device config: the cookie `set_pipeline` sent says which).

        A device that reports no cookie cannot say which device config it runs,
        so it is taken to run another one and the pipeline is pushed again.
        """
        current = self.get_pipeline()
        if current is None or current.p4info != p4info.p4info:
            return False
        if device_config is None:
            return True
        return self.pipeline_cookie() == pipeline_cookie(p4info, device_config)

    def pipeline_cookie(self) -> int | None:
        """The cookie of the device's pipeline, None when it reports none."""
        request = p4runtime_pb2.GetForwardingPipelineConfigRequest(
            device_id=self.device_id,
            response_type=p4runtime_pb2.GetForwardingPipelineConfigRequest.COOKIE_ONLY,
        )
        try:
            response = self._stub.GetForwardingPipelineConfig(request, timeout=self.timeout)
        except grpc.RpcError as err:
            if err.code() == grpc.StatusCode.FAILED_PRECONDITION:
                return None
            raise self._rpc_failed("GetForwardingPipelineConfig", err) from None
        return response.config.cookie.cookie if response.config.HasField("cookie") else None

    # --- write -----------------------------------------------------------------

    def write(
        self, updates: Sequence[Update], batch_size: int = 500, atomicity: str = "CONTINUE_ON_ERROR"
    ) -> None:
        """Send updates in batches of `batch_size`; raise WriteError listing every failed one.

        Batches after a failing one are still sent (CONTINUE_ON_ERROR semantics
        across the whole sequence), so one bad entry does not hide others.
        `atomicity` (a WriteRequest.Atomicity name) applies to each batch:
        with ROLLBACK_ON_ERROR a failing batch leaves nothing behind.
        """
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        mode = p4runtime_pb2.WriteRequest.Atomicity.Value(atomicity)
        failures: list[UpdateError] = []
        messages: list[str] = []
        full: dict[str, str] = {}  # tables found full during this call: why
        for start in range(0, len(updates), batch_size):
            batch = updates[start : start + batch_size]
            request = p4runtime_pb2.WriteRequest(
                device_id=self.device_id,
                role=self.role,
                atomicity=mode,
            )
            request.election_id.CopyFrom(self._election_proto())
            for update in batch:
                request.updates.append(update.to_proto(self.p4info))
                if update.type is UpdateType.DELETE:  # may make room in a full table
                    full.pop(self.p4info.table(update.entry.table).name, None)
            try:
                self._stub.Write(request, timeout=self.timeout)
            except grpc.RpcError as err:
                if err.code() == grpc.StatusCode.PERMISSION_DENIED:
                    raise self._not_primary("the write", err) from None
                if err.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    raise self._rpc_failed("Write", err) from None
                found, covered = update_errors(err, batch, start)
                failures.extend(found)
                # The updates the details do not cover (a target may cut them to fit
                # a client's metadata limit, or send none).
                rest, at = batch[covered:], start + covered
                if rest and mode in _ALL_OR_NOTHING:  # the batch failed: none of it applied
                    failures.extend(failed_whole(err, rest, at))
                elif rest:  # ask the device what it holds
                    failures.extend(self._unapplied(err, rest, at, full))
                messages.append(f"{err.code().name}: {err.details()}")
        if failures:
            raise WriteError(failures, "; ".join(sorted(set(messages))), total=len(updates))

    def _unapplied(
        self, err: grpc.RpcError, batch: Sequence[Update], offset: int, full: dict[str, str]
    ) -> list[UpdateError]:
        """The updates of a failed batch the device does not reflect, found by reading back.

        Without per-update details a Write's status does not say which updates
        were applied (with CONTINUE_ON_ERROR some usually were): an INSERT or
        MODIFY counts as applied when the entry reads back with its action, a
        DELETE when the entry is gone. Never reports an applied update as failed.
        An absent INSERT into a table holding its P4Info size is RESOURCE_EXHAUSTED
        (`write_errors.full_table`); `full` remembers such tables for the call.
        """
        entities = []
        for update in batch:
            entity = p4runtime_pb2.Entity()
            entity.table_entry.CopyFrom(update.entry.to_proto(self.p4info))
            entity.table_entry.ClearField("action")
            entities.append(entity)
        installed: dict[Any, TableEntry] = {}
        try:
            for found in self._read(entities):
                entry = TableEntry.from_proto(self.p4info, found.table_entry)
                installed[entry.key()] = entry
            known = True
        except ConnectionFailed:
            known = False  # cannot tell: every update stays reported, with the RPC status
        failed = []
        for i, update in enumerate(batch):
            wanted = update.entry.canonical(self.p4info)
            held = installed.get(wanted.key())
            if not known:
                applied = False
            elif update.type is UpdateType.DELETE:
                applied = held is None
            else:
                applied = held is not None and (held.action, held.params) == (
                    wanted.action,
                    wanted.params,
                )
            if applied:
                continue
            why = None
            if known and held is None and update.type is UpdateType.INSERT:
                why = self._full_table(wanted.table, full)
            if why is not None:
                failed.append(UpdateError(offset + i, "RESOURCE_EXHAUSTED", why, update))
            else:
                failed.append(UpdateError(offset + i, err.code().name, err.details() or "", update))
        return failed

    def _full_table(self, table: str, full: dict[str, str]) -> str | None:
        """Why `table` takes no more entries (it holds its P4Info size), or None; one
        read of the table per call of `write` that finds it full."""
        if table not in full:
            size = self.p4info.table(table).size
            if not size:
                return None
            why = full_table(table, size, len(self.read_table(table)))
            if why is None:
                return None
            full[table] = why
        return full[table]

    # --- read ------------------------------------------------------------------

    def _read(self, entities: Sequence[Any]) -> Iterator[Any]:
        request = p4runtime_pb2.ReadRequest(device_id=self.device_id, role=self.role)
        request.entities.extend(entities)
        try:
            for response in self._stub.Read(request, timeout=self.timeout):
                yield from response.entities
        except grpc.RpcError as err:
            raise self._rpc_failed("Read", err) from None

    def read_table(self, table: str | None = None) -> list[TableEntry]:
        """Every entry of one table, or of all tables (wildcard read)."""
        entity = p4runtime_pb2.Entity()
        entity.table_entry.table_id = self.p4info.table(table).id if table else 0
        return [
            TableEntry.from_proto(self.p4info, e.table_entry)
            for e in self._read([entity])
            if e.HasField("table_entry")
        ]

    def read_counters(
        self,
        counter: str | None = None,
        index: int | None = None,
        indices: Iterable[int] | None = None,
        counters: Iterable[str] | None = None,
    ) -> list[CounterSample]:
        """Counter cells: one counter, the `counters` named, or all (wildcard); one index
        or all, or the cells `indices` of each (one entity per cell: a fabric's 72 ports
        of 512-cell counters cost the switch's service a quarter of what every cell
        does, 0.06-0.13 s against 0.23-0.33 s measured). Naming `counters` keeps a
        per-port poll off the 8,192-cell job counters."""
        if counter is not None:
            names: list[str] | None = [counter]
        elif counters is not None:
            names = list(counters)
        else:
            names = None
        infos = (
            [self.p4info.counter(n) for n in names]
            if names is not None
            else list(self.p4info.counters)
        )
        if indices is not None:
            cells = sorted(set(indices))
            entities = [_counter_entity(info.id, i) for info in infos for i in cells]
        elif names is None:
            entities = [_counter_entity(0, index)]
        else:
            entities = [_counter_entity(info.id, index) for info in infos]
        samples = []
        for e in self._read(entities):
            if not e.HasField("counter_entry"):
                continue
            ce = e.counter_entry
            samples.append(
                CounterSample(
                    counter=self.p4info.counter_by_id(ce.counter_id).name,
                    index=ce.index.index,
                    packets=ce.data.packet_count,
                    bytes=ce.data.byte_count,
                )
            )
        return samples


# Atomicities under which a failed Write applies none of its updates.
_ALL_OR_NOTHING = (
    p4runtime_pb2.WriteRequest.ROLLBACK_ON_ERROR,
    p4runtime_pb2.WriteRequest.DATAPLANE_ATOMIC,
)


def _counter_entity(counter_id: int, index: int | None) -> Any:
    """A counter read's entity: one counter (0: every counter), one cell or (None) all."""
    entity = p4runtime_pb2.Entity()
    entity.counter_entry.counter_id = counter_id
    if index is not None:
        entity.counter_entry.index.index = index
    return entity
