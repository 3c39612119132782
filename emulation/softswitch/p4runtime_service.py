"""The P4Runtime gRPC server of the software target.

A thin shell over `Device`: it moves protobufs between gRPC and the device and
turns `EntryError` into gRPC statuses, with per-update `p4.v1.Error` details
in `grpc-status-details-bin` exactly where bmv2 and Stratum put them, so
standard clients (p4runtime-shell, finsy, ONOS) read our errors as theirs.
No client can take it over: each kind of long RPC has a cap
(`service_limits`), a stream must arbitrate in time and read what it is
sent, and a Read is built outside the device lock, a few at a time.

    >>> with serve(device_id=1) as running:     # doctest: +SKIP
    ...     print(running.address)
    127.0.0.1:40123
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import grpc
from google.rpc import code_pb2

from controlplane import protobuf_runtime
from controlplane.p4info import load_p4info
from controlplane.proto.p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc
from controlplane.tls import ServerTlsSettings
from emulation.softswitch.daemon_pool import DaemonPool
from emulation.softswitch.device import Device, Session, StreamEnd
from emulation.softswitch.errors import EntryError
from emulation.softswitch.port_stats import PortCounters, QueueCounters
from emulation.softswitch.raw_requests import MalformedRequest, raw_service_handler
from emulation.softswitch.read_snapshot import BuildGate, Stopping, read_responses
from emulation.softswitch.service_limits import ServiceLimits
from emulation.softswitch.state import Dataplane, DataplaneState, LocalDataplane
from emulation.softswitch.write_status import write_error_status
from topologies.errors import UserInputError

if TYPE_CHECKING:
    from emulation.softswitch.gnmi_telemetry import TelemetrySource

protobuf_runtime.check()  # say so when messages go through pure Python

log = logging.getLogger(__name__)

# How long stop() waits past the grace period for the server to be down.
STOP_WAIT_S = 0.2

_GRPC_CODE = {status.value[0]: status for status in grpc.StatusCode}


def _grpc_code(code: int) -> grpc.StatusCode:
    return _GRPC_CODE.get(code, grpc.StatusCode.UNKNOWN)


# The P4Runtime spec whose semantics the service implements, as Capabilities
# reports it. The stubs are P4Runtime 1.5's (scripts/gen_protos.py), a superset
# on the wire; we report 1.4.1 so clients such as finsy do not send what only
# 1.5 defines (our choice).
P4RUNTIME_API_VERSION = "1.4.1"


def _api_version() -> str:
    """The P4Runtime version we speak."""
    return P4RUNTIME_API_VERSION


class StreamSlots:
    """Who holds the StreamChannel slots: `cap` + 1 for streams that have arbitrated
    (the last one is the spare), and `silent_cap` for streams that have not yet.

    A stream that has not sent a MasterArbitrationUpdate yet is silent. Silent
    streams have slots of their own, so they never take one a controller that
    has arbitrated needs; when every silent slot is taken, a new stream takes
    the oldest silent one's (which is closed). A new stream is refused only
    when every arbitrated slot is held. Who may hold the spare (a client that
    becomes primary) is decided at arbitration (`Arbitration.max_sessions`).
    Seventeen threads reopening silent streams held every slot and locked
    every controller out, 20 tries in 20; with one pool for both kinds they
    still evicted a controller's stream on a busy machine before its
    arbitration arrived. With more silent slots than such threads
    (`ServiceLimits.silent_streams`) a controller's stream is never evicted.

    >>> slots = StreamSlots(1, silent_cap=2)
    >>> a, b, c = Session(), Session(), Session()
    >>> slots.take(a), slots.take(b), slots.take(c) == (True, a), slots.hear(a)
    ((True, None), (True, None), True, False)
    >>> slots.hear(b), slots.hear(c), slots.take(Session())
    (True, True, (False, None))
    """

    def __init__(self, cap: int, silent_cap: int | None = None) -> None:
        self.cap = cap
        self.silent_cap = cap + 1 if silent_cap is None else silent_cap
        self._open: dict[Session, bool] = {}  # oldest first: has it arbitrated (or begun to)?
        self._lock = threading.Lock()

    def take(self, session: Session) -> tuple[bool, Session | None]:
        """(taken, the silent stream closed to make room); (False, None) when every
        arbitrated slot is held."""
        with self._lock:
            heard = sum(self._open.values())
            if heard > self.cap:
                return False, None
            evicted = None
            if len(self._open) - heard >= self.silent_cap:
                evicted = next(s for s, h in self._open.items() if not h)
                del self._open[evicted]
            self._open[session] = False
            return True, evicted

    def hear(self, session: Session) -> bool:
        """Its first MasterArbitrationUpdate arrived: it keeps an arbitrated slot from
        now on; False when its silent slot has already gone to a newer stream, or every
        arbitrated slot is held."""
        with self._lock:
            if session not in self._open or sum(self._open.values()) > self.cap:
                return False
            self._open[session] = True
            return True

    def give(self, session: Session) -> None:
        with self._lock:
            self._open.pop(session, None)


class P4RuntimeServicer(p4runtime_pb2_grpc.P4RuntimeServicer):
    """gRPC methods of one device."""

    def __init__(
        self,
        device: Device,
        limits: ServiceLimits | None = None,
        stopping: threading.Event | None = None,
    ) -> None:
        self.device = device
        self.limits = limits if limits is not None else ServiceLimits()
        self.stopping = stopping if stopping is not None else threading.Event()
        self._slots = StreamSlots(self.limits.max_streams, self.limits.silent_streams)
        self._reads = threading.BoundedSemaphore(self.limits.max_reads)
        self._gate = BuildGate(self.limits.read_builders, self.stopping)

    def _log(self, level: int, message: str, *args: object) -> None:
        self.device.log_limit.log(log, level, message, self.device.device_id, *args)

    def Capabilities(self, request: Any, context: Any) -> Any:  # noqa: N802 (gRPC name)
        return p4runtime_pb2.CapabilitiesResponse(p4runtime_api_version=_api_version())

    def SetForwardingPipelineConfig(self, request: Any, context: Any) -> Any:  # noqa: N802
        try:
            self.device.set_pipeline(request)
        except EntryError as err:
            self._log(logging.INFO, "device %d: pipeline refused: %s", err.message)
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
            self._log(logging.INFO, "device %d: write refused: %s", err.message)
            context.abort(_grpc_code(err.code), err.message)
        if any(r is not None for r in results):
            status = write_error_status(results)
            context.set_trailing_metadata(
                (("grpc-status-details-bin", status.SerializeToString()),)
            )
            context.abort(grpc.StatusCode.UNKNOWN, status.message)
        return p4runtime_pb2.WriteResponse()

    def Read(self, request: Any, context: Any) -> Iterator[Any]:  # noqa: N802
        """The snapshot under the device lock; the responses built outside it, under the gate."""
        if not self._reads.acquire(blocking=False):
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{self.limits.max_reads} Reads are in progress on this target, the most it "
                "serves at once; retry when one has finished",
            )
        try:
            try:
                snapshot = self.device.read(request, self.limits.max_read_entities)
            except EntryError as err:
                self._log(logging.INFO, "device %d: read refused: %s", err.message)
                context.abort(_grpc_code(err.code), err.message)
            try:
                yield from read_responses(snapshot.response_items(), self._gate)
            except Stopping:
                context.abort(grpc.StatusCode.UNAVAILABLE, "the switch is stopping")
        finally:
            self._reads.release()

    def StreamChannel(self, request_iterator: Any, context: Any) -> Iterator[Any]:  # noqa: N802
        session = Session(peer=context.peer(), outbox_limit=self.limits.outbox_messages)
        taken, evicted = self._slots.take(session)
        if not taken:
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"this target serves at most {self.limits.max_streams} StreamChannels at once "
                "(and one more for a client that becomes primary): all are taken by clients "
                "that have arbitrated",
            )
            return  # abort raised
        if evicted is not None:
            self._log(
                logging.INFO,
                "device %d: stream from %s closed: silent while a new stream needed its slot",
                evicted.peer,
            )
            evicted.end(
                code_pb2.RESOURCE_EXHAUSTED,
                "every StreamChannel of this target was taken and this stream had sent no "
                "MasterArbitrationUpdate: its slot went to a newer stream",
            )
        try:
            yield from self._stream(request_iterator, context, session)
        finally:
            self._slots.give(session)

    def _stream(self, request_iterator: Any, context: Any, session: Session) -> Iterator[Any]:
        session.on_overflow = functools.partial(self._drop, session, context)
        # Fires when the RPC ends for any reason (client gone, server stopping).
        context.add_callback(session.end)
        reader = threading.Thread(
            target=self._read_stream,
            args=(request_iterator, session),
            name=f"p4rt-stream-{self.device.device_id}",
            daemon=True,
        )
        reader.start()
        deadline = time.monotonic() + self.limits.first_arbitration_s
        try:
            while True:
                wait = None if session.role is not None else max(0.0, deadline - time.monotonic())
                try:
                    item = session.outbox.get(timeout=wait)
                except queue.Empty:
                    if self.device.expire(session):
                        why = (
                            f"no MasterArbitrationUpdate within "
                            f"{self.limits.first_arbitration_s:g} s of opening the stream; a "
                            "silent stream holds a slot others need"
                        )
                        self._log(
                            logging.INFO, "device %d: stream from %s closed: %s", session.peer, why
                        )
                        context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, why)
                    continue
                if isinstance(item, StreamEnd):
                    if item.code is not None and item.code != code_pb2.OK:
                        context.abort(_grpc_code(item.code), item.message)
                    return
                yield item
        finally:
            self.device.remove_session(session)

    def _drop(self, session: Session, context: Any) -> None:
        """A client lets its stream's messages pile up: it does not read; end its RPC."""
        self._log(
            logging.WARNING,
            "device %d: client %s does not read its stream (%d messages waiting): dropped",
            session.peer,
            session.outbox.qsize(),
        )
        context.cancel()

    def _read_stream(self, request_iterator: Any, session: Session) -> None:
        """Handle what the client sends on its stream until it closes."""
        try:
            for message in request_iterator:
                kind = message.WhichOneof("update")
                if kind == "arbitration":
                    if session.role is None and not self._slots.hear(session):
                        return  # too late: its slot went to a newer stream
                    try:
                        self.device.arbitrate(session, message.arbitration)
                    except EntryError as err:
                        self._log(
                            logging.INFO,
                            "device %d: stream from %s ended: %s",
                            session.peer,
                            err.message,
                        )
                        session.end(err.code, err.message)
                        return
                elif kind == "packet":
                    self.device.packet_out(session, message.packet)
                # digest_ack and other: nothing to acknowledge on this target.
        except MalformedRequest as err:
            self._log(
                logging.INFO, "device %d: stream from %s ended: %s", session.peer, err.message
            )
            session.end(code_pb2.INVALID_ARGUMENT, f"malformed request: {err.message}")
        except grpc.RpcError:
            pass  # the RPC was cancelled: the client went away
        except Exception:  # a bug must not leave the stream hanging
            log.exception("device %d: stream handler failed", self.device.device_id)
        finally:
            session.end()
            # A dropped client's handler may be stuck sending: leave the election now.
            self.device.remove_session(session)


@dataclass
class RunningServer:
    """A started P4Runtime server; stop() (or leaving the with-block) shuts it down."""

    address: str
    state: DataplaneState | None  # the tables and counters, when they live in this process
    device: Device
    _server: Any = field(repr=False)
    _pool: DaemonPool = field(repr=False)
    _stopping: threading.Event = field(repr=False)
    _stopped: bool = field(default=False, repr=False)

    def stop(self, grace: float | None = 0.5) -> None:
        """Close the client streams, then the server; waits at most `grace` + STOP_WAIT_S.

        Reads being built stop between two responses. A handler still parsing
        a huge request in pure Python cannot be interrupted; it is cancelled
        and not waited for: its thread is a daemon, so the process may exit.
        """
        if self._stopped:
            return
        self._stopped = True
        self._stopping.set()
        self.device.end_all_sessions()
        done = self._server.stop(grace).wait((grace or 0.0) + STOP_WAIT_S)
        self._pool.shutdown(wait=False)
        self.device.log_limit.flush(log)
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
    limits: ServiceLimits | None = None,
    port_counters: Callable[[], Sequence[PortCounters]] | None = None,
    fidelity: Callable[[], Mapping[str, tuple[tuple[int, ...], float]]] | None = None,
    dataplane: Dataplane | None = None,
    tls: ServerTlsSettings | None = None,
    telemetry: TelemetrySource | None = None,
    set_enabled: Callable[[str, bool], None] | None = None,
    queue_counters: Callable[[], Sequence[QueueCounters]] | None = None,
    harness_key: str | None = None,
) -> RunningServer:
    """Start a P4Runtime server for one device on `address` (port 0: any free port).

    With p4info_check, only a P4Info matching the Cassini pipeline is accepted;
    without it any P4Info of tables, actions and counters is. The device's
    tables and counters live in `dataplane` (a packet loop in another
    process), or in `state` in this process when no dataplane is given. With
    port_counters, the same server also answers gNMI for the interface
    counters it returns (as Stratum serves both on one port), and with
    fidelity the packet loop's lateness histograms under /fidelity, with
    telemetry its 10 ms per-job samples under /cassini/telemetry, with
    set_enabled a gNMI Set of a port's config/enabled (`gnmi_config`), with
    queue_counters the egress queues under /qos. With tls, the
    port (P4Runtime and gNMI alike) speaks only TLS; without it, a server
    reachable beyond loopback logs a warning, since anyone who reaches it
    can take the primary role. `limits` caps what clients may hold at once; a
    gNMI client that sends `harness_key` gets a Subscribe slot kept for it.
    """
    limits = limits if limits is not None else ServiceLimits()
    if dataplane is None:
        local = LocalDataplane(state)
        dataplane, state = local, local.state
    reference = load_p4info() if p4info_check else None
    device = Device(device_id, dataplane, reference, max_sessions=limits.max_streams)
    pool = DaemonPool(limits.workers, f"p4rt-{device_id}")
    stopping = threading.Event()
    server = grpc.server(
        pool,
        options=[
            ("grpc.so_reuseport", 0),  # two servers must not share a port silently
            ("grpc.max_receive_message_length", 64 * 1024 * 1024),
            ("grpc.max_send_message_length", 64 * 1024 * 1024),
        ],
    )
    # Requests are parsed by the service, not by grpcio (`raw_requests` says why).
    service = p4runtime_pb2.DESCRIPTOR.services_by_name["P4Runtime"]
    servicer = P4RuntimeServicer(device, limits, stopping)
    server.add_generic_rpc_handlers((raw_service_handler(service, servicer, device.log_limit),))
    if port_counters is not None:
        from emulation.softswitch.gnmi_service import add_gnmi_service

        add_gnmi_service(
            server,
            port_counters,
            fidelity,
            limits,
            telemetry,
            set_enabled,
            queue_counters,
            log_limit=device.log_limit,
            harness_key=harness_key,
        )
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
    return RunningServer(
        address=bound,
        state=state,
        device=device,
        _server=server,
        _pool=pool,
        _stopping=stopping,
    )


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
