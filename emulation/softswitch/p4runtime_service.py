"""The P4Runtime gRPC server of the software target.

A thin shell over `Device`: it moves protobufs between gRPC and the device and
turns `EntryError` into gRPC statuses, with per-update `p4.v1.Error` details
in `grpc-status-details-bin` exactly where bmv2 and Stratum put them, so
standard clients (p4runtime-shell, finsy, ONOS) read our errors as theirs.

    >>> with serve(device_id=1) as running:     # doctest: +SKIP
    ...     print(running.address)
    127.0.0.1:40123
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import grpc
from google.rpc import code_pb2, status_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from controlplane.p4info import load_p4info
from controlplane.tls import ServerTlsSettings
from emulation.softswitch.device import Device, Session, StreamEnd
from emulation.softswitch.errors import EntryError
from emulation.softswitch.port_stats import PortCounters
from emulation.softswitch.state import Dataplane, DataplaneState, LocalDataplane
from topologies.errors import UserInputError

log = logging.getLogger(__name__)

# A ReadResponse holds at most this many entities and about this many bytes,
# well under the 64 MiB message limit of both sides.
READ_CHUNK = 1000
READ_CHUNK_BYTES = 4 << 20
# (our choice) Each open StreamChannel holds one worker thread for its lifetime
# (sync gRPC): at most MAX_STREAMS of them (more get RESOURCE_EXHAUSTED, spec
# 5.4), and UNARY_WORKERS more threads stay free for Write, Read and the rest.
MAX_STREAMS = 16
UNARY_WORKERS = 16
DEFAULT_MAX_WORKERS = MAX_STREAMS + UNARY_WORKERS
# (our choice) Per-update error details: messages are cut to this length, and only
# the first DETAILED_FAILURES failures carry one, so the trailer of a large
# failing batch stays small enough for clients' metadata limits (16 KiB by default).
ERROR_MESSAGE_CHARS = 160
DETAILED_FAILURES = 10
# How long stop() waits past the grace period for the server to be down.
STOP_WAIT_S = 0.2

_GRPC_CODE = {status.value[0]: status for status in grpc.StatusCode}


def _grpc_code(code: int) -> grpc.StatusCode:
    return _GRPC_CODE.get(code, grpc.StatusCode.UNKNOWN)


def _api_version() -> str:
    """The P4Runtime version of the installed protobufs (the API we speak)."""
    try:
        return metadata.version("p4runtime")
    except metadata.PackageNotFoundError:
        return "1.4.1"


class P4RuntimeServicer(p4runtime_pb2_grpc.P4RuntimeServicer):
    """gRPC methods of one device."""

    def __init__(self, device: Device, max_streams: int = MAX_STREAMS) -> None:
        self.device = device
        self.max_streams = max_streams
        self._streams = 0
        self._streams_lock = threading.Lock()

    def Capabilities(self, request: Any, context: Any) -> Any:  # noqa: N802 (gRPC name)
        return p4runtime_pb2.CapabilitiesResponse(p4runtime_api_version=_api_version())

    def SetForwardingPipelineConfig(self, request: Any, context: Any) -> Any:  # noqa: N802
        try:
            self.device.set_pipeline(request)
        except EntryError as err:
            log.info("device %d: pipeline refused: %s", self.device.device_id, err.message)
            context.abort(_grpc_code(err.code), err.message)
        return p4runtime_pb2.SetForwardingPipelineConfigResponse()

    def GetForwardingPipelineConfig(self, request: Any, context: Any) -> Any:  # noqa: N802
        try:
            return self.device.get_pipeline(request)
        except EntryError as err:
            context.abort(_grpc_code(err.code), err.message)

    def Write(self, request: Any, context: Any) -> Any:  # noqa: N802
        try:
            results = self.device.write(request)
        except EntryError as err:
            log.info("device %d: write refused: %s", self.device.device_id, err.message)
            context.abort(_grpc_code(err.code), err.message)
        failed = [r for r in results if r is not None]
        if failed:
            status = write_error_status(results)
            context.set_trailing_metadata(
                (("grpc-status-details-bin", status.SerializeToString()),)
            )
            context.abort(grpc.StatusCode.UNKNOWN, status.message)
        return p4runtime_pb2.WriteResponse()

    def Read(self, request: Any, context: Any) -> Iterator[Any]:  # noqa: N802
        try:
            found = self.device.read(request)
        except EntryError as err:
            context.abort(_grpc_code(err.code), err.message)
        yield from read_responses(found)

    def StreamChannel(self, request_iterator: Any, context: Any) -> Iterator[Any]:  # noqa: N802
        with self._streams_lock:
            full = self._streams >= self.max_streams
            if not full:
                self._streams += 1
        if full:
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"this target serves at most {self.max_streams} StreamChannels at once",
            )
        try:
            yield from self._stream(request_iterator, context)
        finally:
            with self._streams_lock:
                self._streams -= 1

    def _stream(self, request_iterator: Any, context: Any) -> Iterator[Any]:
        session = Session(peer=context.peer())
        # Fires when the RPC ends for any reason (client gone, server stopping).
        context.add_callback(session.end)
        reader = threading.Thread(
            target=self._read_stream,
            args=(request_iterator, session),
            name=f"p4rt-stream-{self.device.device_id}",
            daemon=True,
        )
        reader.start()
        try:
            while True:
                item = session.outbox.get()
                if isinstance(item, StreamEnd):
                    if item.code is not None and item.code != code_pb2.OK:
                        context.abort(_grpc_code(item.code), item.message)
                    return
                yield item
        finally:
            self.device.remove_session(session)

    def _read_stream(self, request_iterator: Any, session: Session) -> None:
        """Handle what the client sends on its stream until it closes."""
        try:
            for message in request_iterator:
                kind = message.WhichOneof("update")
                if kind == "arbitration":
                    try:
                        self.device.arbitrate(session, message.arbitration)
                    except EntryError as err:
                        log.info(
                            "device %d: stream from %s ended: %s",
                            self.device.device_id,
                            session.peer,
                            err.message,
                        )
                        session.end(err.code, err.message)
                        return
                elif kind == "packet":
                    self.device.packet_out(session, message.packet)
                # digest_ack and other: nothing to acknowledge on this target.
        except grpc.RpcError:
            pass  # the RPC was cancelled: the client went away
        except Exception:  # a bug must not leave the stream hanging
            log.exception("device %d: stream handler failed", self.device.device_id)
        finally:
            session.end()


def read_responses(entities: list[Any]) -> Iterator[Any]:
    """ReadResponses of at most READ_CHUNK entities and about READ_CHUNK_BYTES each."""
    chunk: list[Any] = []
    size = 0
    for entity in entities:
        entity_bytes = entity.ByteSize()
        if chunk and (len(chunk) >= READ_CHUNK or size + entity_bytes > READ_CHUNK_BYTES):
            yield p4runtime_pb2.ReadResponse(entities=chunk)
            chunk, size = [], 0
        chunk.append(entity)
        size += entity_bytes
    yield p4runtime_pb2.ReadResponse(entities=chunk)


def _short(message: str) -> str:
    if len(message) <= ERROR_MESSAGE_CHARS:
        return message
    return message[: ERROR_MESSAGE_CHARS - 3] + "..."


def write_error_status(results: list[EntryError | None]) -> Any:
    """google.rpc.Status with one p4.v1.Error per update, OK for those that succeeded (spec 12.5).

    Every failed update has its code; the first DETAILED_FAILURES have their
    (shortened) message too, so the details stay bounded however many fail.
    """
    failed = [r for r in results if r is not None]
    status = status_pb2.Status(
        code=code_pb2.UNKNOWN,
        message=_short(f"{len(failed)} of {len(results)} updates failed: {failed[0].message}"),
    )
    detailed = 0
    for result in results:
        error = p4runtime_pb2.Error(canonical_code=code_pb2.OK)
        if result is not None:
            error.canonical_code = result.code
            if detailed < DETAILED_FAILURES and result.code != code_pb2.ABORTED:
                error.message = _short(result.message)
                detailed += 1
        status.details.add().Pack(error)
    return status


@dataclass
class RunningServer:
    """A started P4Runtime server; stop() (or leaving the with-block) shuts it down."""

    address: str
    state: DataplaneState | None  # the tables and counters, when they live in this process
    device: Device
    _server: Any = field(repr=False)
    _stopped: bool = field(default=False, repr=False)

    def stop(self, grace: float | None = 0.5) -> None:
        """Close the client streams, then the server; waits at most `grace` + STOP_WAIT_S.

        A handler still parsing a huge request in pure Python cannot be
        interrupted; it is cancelled and not waited for (its process may exit).
        """
        if self._stopped:
            return
        self._stopped = True
        self.device.end_all_sessions()
        done = self._server.stop(grace).wait((grace or 0.0) + STOP_WAIT_S)
        log.info(
            "device %d: P4Runtime server on %s stopped%s",
            self.device.device_id,
            self.address,
            "" if done else " (a request was still being handled)",
        )

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(
    device_id: int,
    address: str = "127.0.0.1:0",
    state: DataplaneState | None = None,
    p4info_check: bool = True,
    max_workers: int = DEFAULT_MAX_WORKERS,
    port_counters: Callable[[], Sequence[PortCounters]] | None = None,
    fidelity: Callable[[], Mapping[str, tuple[tuple[int, ...], float]]] | None = None,
    dataplane: Dataplane | None = None,
    tls: ServerTlsSettings | None = None,
) -> RunningServer:
    """Start a P4Runtime server for one device on `address` (port 0: any free port).

    With p4info_check, only a P4Info matching the Cassini pipeline is accepted;
    without it any P4Info of tables, actions and counters is. The device's
    tables and counters live in `dataplane` (a packet loop in another
    process), or in `state` in this process when no dataplane is given. With
    port_counters, the same server also answers gNMI for the interface
    counters it returns (as Stratum serves both on one port), and with
    fidelity the packet loop's lateness histograms under /fidelity. With tls, the
    port (P4Runtime and gNMI alike) speaks only TLS; without it, a server
    reachable beyond loopback logs a warning, since anyone who reaches it
    can take the primary role.
    """
    if dataplane is None:
        local = LocalDataplane(state)
        dataplane, state = local, local.state
    reference = load_p4info() if p4info_check else None
    device = Device(device_id, dataplane, reference)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=f"p4rt-{device_id}"),
        options=[
            ("grpc.so_reuseport", 0),  # two servers must not share a port silently
            ("grpc.max_receive_message_length", 64 * 1024 * 1024),
            ("grpc.max_send_message_length", 64 * 1024 * 1024),
        ],
    )
    p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(
        P4RuntimeServicer(device, max_streams=max(1, max_workers - UNARY_WORKERS)), server
    )
    if port_counters is not None:
        from emulation.softswitch.gnmi_service import add_gnmi_service

        add_gnmi_service(server, port_counters, fidelity)
    try:
        if tls is None:
            port = server.add_insecure_port(address)
        else:
            port = server.add_secure_port(address, tls.credentials())
    except RuntimeError as err:
        if tls is not None:  # gRPC reports a certificate it cannot use as a failure to bind
            raise UserInputError(
                f"cannot listen for P4Runtime over TLS on {address}: gRPC refused the address "
                "or the certificate and key"
            ) from None
        raise UserInputError(f"cannot listen for P4Runtime on {address}: {err}") from None
    if not port:
        raise UserInputError(
            f"cannot listen for P4Runtime on {address} (in use or not a local address?)"
        )
    host = address.rsplit(":", 1)[0]
    server.start()
    bound = f"{host}:{port}"
    log.info("device %d: P4Runtime server listening on %s (%s)", device_id, bound, _security(tls))
    if tls is None and not is_loopback_address(address):
        log.warning(
            "device %d: P4Runtime on %s has no TLS and is reachable beyond this machine: "
            "anyone who reaches it can control the switch (serve TLS with --grpc-server-ssl, "
            "or bind 127.0.0.1)",
            device_id,
            bound,
        )
    return RunningServer(address=bound, state=state, device=device, _server=server)


def _security(tls: ServerTlsSettings | None) -> str:
    if tls is None:
        return "insecure"
    return "TLS, client certificates required" if tls.require_client_auth else "TLS"


def is_loopback_address(address: str) -> bool:
    """Whether a listening address ('127.0.0.1:9559', '[::1]:0', 'localhost:1') reaches only this machine.

    An empty host, a wildcard (0.0.0.0, [::]) or any other name does not;
    a unix socket does (it is not on the network).

    >>> [is_loopback_address(a) for a in ("127.0.0.1:1", "[::1]:1", "localhost:1", "0.0.0.0:1", ":1")]
    [True, True, True, False, False]
    """
    if address.startswith(("unix:", "unix-abstract:")):
        return True
    host = address.rsplit(":", 1)[0].strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
