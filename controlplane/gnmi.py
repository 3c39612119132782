"""What are a device's interface counters, read over gNMI?

The leaf names the software target serves under
`/interfaces/interface[name=NAME]/state/counters` are defined here, once:
the OpenConfig ones (as Stratum serves them) and the project's own per-cause
leaves, which no OpenConfig model has (our choice of names, in our own
module `cassini-interfaces`; a leaf is the `PortCounters` field of the same
name with '-' for '_'). `GnmiReader` keeps one channel open and reads every
interface with one Get per call.

Why the generated stubs and not pygnmi's `gNMIclient`: a monitor must tell
"this target has no gNMI" (UNIMPLEMENTED, e.g. bmv2) from "nothing listens
there" (UNAVAILABLE), and pygnmi folds both into one exception with a text
message (after logging it as critical); its connect also issues a
Capabilities call and picks an encoding of its own. With the stubs we ask
for PROTO encoding and get typed integers, no JSON to parse.

    >>> read_interface_counters("127.0.0.1:9559", 2.0)   # doctest: +SKIP
    {'tor1-eth1': {'in-unicast-pkts': 25, 'in-octets': 5000, ..., 'tail-dropped': 0, ...}}

`GnmiReader.read_queues` reads the egress queues (port, queue class) of the
OpenConfig QoS model (`QUEUE_LEAVES`), with each interface's port number.

Interfaces are named as the target names them: the software target after the
topology's chip map (`topologies.port_names`: `tor1-eth1`, or `port<N>` without
a topology), a Stratum switch after its chassis config. Readers match them to
chip ports by number (`Interface.port`), never by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType, TracebackType
from typing import Any

import grpc
from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc

from . import protobuf_runtime
from .channels import close_channel
from .tls import TlsSettings

protobuf_runtime.check()  # say so when messages go through pure Python

# The interface counters of OpenConfig (openconfig-interfaces) that the software target serves.
OPENCONFIG_COUNTER_LEAVES: tuple[str, ...] = (
    "in-unicast-pkts",  # neither broadcast nor multicast
    "in-broadcast-pkts",
    "in-multicast-pkts",
    "in-octets",
    "in-discards",  # forwarding misses, unknown egress ports, receive overruns
    "in-errors",  # malformed frames
    "out-unicast-pkts",
    "out-octets",
    "out-discards",  # tail drops and WRED drops
    "out-errors",  # the host socket refused a frame
)

# Our own leaves, one per loss cause or event (module cassini-interfaces, our choice of names).
CASSINI_COUNTER_LEAVES: tuple[str, ...] = (
    "tail-dropped",  # queue limit or shared buffer full
    "wred-dropped",  # non-ECT frames WRED dropped where it would have marked
    "ecn-marked",  # frames that left CE-marked by this port's WRED
    "forward-misses",  # no logical_forward entry matched (ingress port, dst MAC)
    "to-unknown-port",  # the entry names an egress port the switch does not have
    "rx-overruns",  # dropped by the kernel before the switch read them
    "malformed",  # shorter than an Ethernet header, or a broken IPv4 header
    "pfc-received",  # PFC and 802.3x PAUSE frames received
    "pfc-pauses-sent",  # PFC pause frames sent (refreshes included; one per pause on a cable)
    "pfc-resumes-sent",  # PFC resume (zero-quanta) frames sent
    "pfc-paused-us",  # microseconds the port's ingress was held paused (XOFF to XON)
)

COUNTER_LEAVES: tuple[str, ...] = OPENCONFIG_COUNTER_LEAVES + CASSINI_COUNTER_LEAVES
CASSINI_MODULE = "cassini-interfaces"
# openconfig-p4rt's /interfaces/interface/state/id: the P4Runtime port number of the interface.
PORT_ID_LEAF = "id"
# openconfig-interfaces' state/ifindex: the port's number where state/id is not served.
IFINDEX_LEAF = "ifindex"


# The egress queues (port, queue class) under the OpenConfig QoS model (openconfig-qos):
#   /qos/interfaces/interface[interface-id=NAME]/output/queues/queue[name=N]/state/LEAF
# NAME as under /interfaces (the port's name for controllers), N the queue class 0-7
# (7 served first: strict priority), LEAF one of QUEUE_LEAVES, cumulative since the
# switch started.
QOS_MODULE = "openconfig-qos"
OPENCONFIG_QUEUE_LEAVES: tuple[str, ...] = (
    "transmit-pkts",
    "transmit-octets",
    "dropped-pkts",  # WRED drops of non-ECT frames and tail drops
)
# Ours (module cassini-interfaces): frames the queue sent CE-marked by its WRED.
CASSINI_QUEUE_LEAVES: tuple[str, ...] = ("ecn-marked-pkts",)
QUEUE_LEAVES: tuple[str, ...] = OPENCONFIG_QUEUE_LEAVES + CASSINI_QUEUE_LEAVES


# (our choice) The 10 ms per-job telemetry of issue 25, served by the software target
# from the packet loop's sample ring, STREAM only (see emulation/softswitch/README.md):
#   /cassini/telemetry/state/{sample,intervals,samples-lost}
#   /cassini/telemetry/port[name=NAME]/state/max-queue-depth-cells
#   /cassini/telemetry/port[name=NAME]/job[class=N]/state/{bytes,packets,ce-marks}
# One notification per 10 ms sample, stamped with the sample's wall-clock time; job
# counts are what the (port, class) sent in the sample (not cumulative); a leaf that is
# 0 in a sample is left out of it (a missing leaf is 0).
TELEMETRY_ROOT = ("cassini", "telemetry")
SAMPLE_LEAVES: tuple[str, ...] = ("sample", "intervals", "samples-lost")
JOB_LEAVES: tuple[str, ...] = ("packets", "bytes", "ce-marks")
QUEUE_LEAF = "max-queue-depth-cells"
TELEMETRY_MIN_SAMPLE_NS = 10_000_000  # the ring's own interval: nothing finer exists


class GnmiError(RuntimeError):
    """A gNMI target could not be reached or refused a read; the message names the address."""


class GnmiUnsupported(GnmiError):
    """The target answers gRPC but serves no gNMI (bmv2's simple_switch_grpc does not)."""


@dataclass(frozen=True)
class Interface:
    """One interface's counters as the target reported them (leaf name -> value)."""

    name: str
    port: int | None  # state/id, the P4Runtime port (else state/ifindex); None if neither
    counters: Mapping[str, int]


def interfaces_path() -> Any:
    """gnmi.Path /interfaces/interface[name=*]/state (every interface's state)."""
    return gnmi_pb2.Path(
        elem=[
            gnmi_pb2.PathElem(name="interfaces"),
            gnmi_pb2.PathElem(name="interface", key={"name": "*"}),
            gnmi_pb2.PathElem(name="state"),
        ]
    )


def interfaces_from(response: Any) -> list[Interface]:
    """Interfaces of a PROTO-encoded GetResponse (per-leaf updates), sorted by name.

    Leaves outside `state/counters` other than `state/id` and `state/ifindex`
    are ignored; a counters leaf we do not know is kept under its own name.
    """
    ports: dict[str, int] = {}
    ifindexes: dict[str, int] = {}
    counters: dict[str, dict[str, int]] = {}
    for notification in response.notification:
        prefix = list(notification.prefix.elem)
        for update in notification.update:
            elems = prefix + list(update.path.elem)
            names = [e.name for e in elems]
            if len(elems) < 4 or names[:3] != ["interfaces", "interface", "state"]:
                continue
            name = elems[1].key.get("name", "")
            value = _integer(update.val)
            if value is None:
                continue
            if names[3:] == [PORT_ID_LEAF]:
                ports[name] = value
            elif names[3:] == [IFINDEX_LEAF]:
                ifindexes[name] = value
            elif len(names) == 5 and names[3] == "counters":
                counters.setdefault(name, {})[names[4].split(":")[-1]] = value
    return [
        Interface(
            name, ports.get(name, ifindexes.get(name)), MappingProxyType(counters.get(name, {}))
        )
        for name in sorted(set(counters) | set(ports) | set(ifindexes))
    ]


@dataclass(frozen=True)
class QueueCount:
    """One egress queue's counters (cumulative) as the target reported them."""

    name: str  # the interface, as the target names it
    port: int | None  # its P4Runtime port (state/id, else state/ifindex); None if neither
    queue_class: int  # the queue's name, a queue class 0-7 on the software target
    transmit_pkts: int
    transmit_octets: int
    dropped_pkts: int
    ecn_marked_pkts: int  # ours (cassini-interfaces): 0 from a target without it


def queues_path() -> Any:
    """gnmi.Path /qos/interfaces/interface[interface-id=*]/output/queues/queue[name=*]/state."""
    return gnmi_pb2.Path(
        elem=[
            gnmi_pb2.PathElem(name="qos"),
            gnmi_pb2.PathElem(name="interfaces"),
            gnmi_pb2.PathElem(name="interface", key={"interface-id": "*"}),
            gnmi_pb2.PathElem(name="output"),
            gnmi_pb2.PathElem(name="queues"),
            gnmi_pb2.PathElem(name="queue", key={"name": "*"}),
            gnmi_pb2.PathElem(name="state"),
        ]
    )


def port_number_paths() -> list[Any]:
    """gnmi.Paths of every interface's state/id and state/ifindex (its port number)."""
    return [
        gnmi_pb2.Path(
            elem=[
                gnmi_pb2.PathElem(name="interfaces"),
                gnmi_pb2.PathElem(name="interface", key={"name": "*"}),
                gnmi_pb2.PathElem(name="state"),
                gnmi_pb2.PathElem(name=leaf),
            ]
        )
        for leaf in (PORT_ID_LEAF, IFINDEX_LEAF)
    ]


def queues_from(response: Any) -> list[QueueCount]:
    """Queues of a PROTO-encoded GetResponse of `queues_path()` and `port_number_paths()`,
    sorted by (interface, class); a queue whose name is not a number is left out."""
    ports = {i.name: i.port for i in interfaces_from(response)}
    leaves: dict[tuple[str, int], dict[str, int]] = {}
    for notification in response.notification:
        prefix = list(notification.prefix.elem)
        for update in notification.update:
            elems = prefix + list(update.path.elem)
            names = [e.name.split(":")[-1] for e in elems]
            if len(names) != 8 or names[:7] != [
                "qos", "interfaces", "interface", "output", "queues", "queue", "state"
            ]:  # fmt: skip
                continue
            queue, value = elems[5].key.get("name", ""), _integer(update.val)
            if not queue.isdigit() or value is None:
                continue
            key = (elems[2].key.get("interface-id", ""), int(queue))
            leaves.setdefault(key, {})[names[7]] = value
    return [
        QueueCount(
            name,
            ports.get(name),
            queue_class,
            *(found.get(leaf, 0) for leaf in QUEUE_LEAVES),
        )
        for (name, queue_class), found in sorted(leaves.items())
    ]


def fidelity_path() -> Any:
    """gnmi.Path /fidelity/state (the software target's lateness histograms)."""
    return gnmi_pb2.Path(elem=[gnmi_pb2.PathElem(name="fidelity"), gnmi_pb2.PathElem(name="state")])


def fidelity_from(response: Any) -> dict[str, dict[str, int]]:
    """{histogram: {leaf: value}} of a PROTO-encoded GetResponse of `fidelity_path()`."""
    out: dict[str, dict[str, int]] = {}
    for notification in response.notification:
        prefix = list(notification.prefix.elem)
        for update in notification.update:
            names = [e.name for e in prefix + list(update.path.elem)]
            value = _integer(update.val)
            if len(names) == 4 and names[:2] == ["fidelity", "state"] and value is not None:
                out.setdefault(names[2], {})[names[3]] = value
    return out


def _integer(value: Any) -> int | None:
    kind = value.WhichOneof("value")
    if kind in ("uint_val", "int_val"):
        return int(getattr(value, kind))
    if kind in ("json_val", "json_ietf_val", "string_val"):
        raw = getattr(value, kind)
        text = raw.decode() if isinstance(raw, bytes) else raw
        try:
            return int(text.strip('"'))
        except ValueError:
            return None
    return None


class GnmiReader:
    """One channel to a gNMI target; `read()` returns every interface's counters.

    Use as a context manager; a target that cannot be reached raises
    GnmiError, one without gNMI raises GnmiUnsupported (both on `read`).
    With tls the channel is TLS, as the P4Runtime session's to the same port.
    """

    def __init__(self, address: str, timeout: float = 5.0, tls: TlsSettings | None = None) -> None:
        self.address = address
        self.timeout = timeout
        self.tls = tls
        if tls is None:
            self._channel = grpc.insecure_channel(address)
        else:
            self._channel = grpc.secure_channel(
                address, tls.credentials(), options=tls.channel_options()
            )
        self._stub = gnmi_pb2_grpc.gNMIStub(self._channel)

    def read(self) -> list[Interface]:
        """Every interface's state/id and state/counters leaves (one Get, PROTO encoding)."""
        return interfaces_from(self._get([interfaces_path()], "interface counters"))

    def read_queues(self) -> list[QueueCount]:
        """Every egress queue's counters with its interface's port number (one Get, PROTO
        encoding); GnmiUnsupported from a target that serves no /qos."""
        paths = [queues_path(), *port_number_paths()]
        return queues_from(self._get(paths, "/qos queues", unsupported=grpc.StatusCode.NOT_FOUND))

    def _get(self, paths: list[Any], what: str, unsupported: grpc.StatusCode | None = None) -> Any:
        """The GetResponse of `paths` (PROTO, STATE); GnmiUnsupported for UNIMPLEMENTED
        (or `unsupported`), GnmiError for any other failure."""
        request = gnmi_pb2.GetRequest(
            path=paths, type=gnmi_pb2.GetRequest.STATE, encoding=gnmi_pb2.PROTO
        )
        try:
            return self._stub.Get(request, timeout=self.timeout, wait_for_ready=True)
        except grpc.RpcError as err:
            code = err.code()
            if code in (grpc.StatusCode.UNIMPLEMENTED, unsupported):
                served = "no gNMI" if code == grpc.StatusCode.UNIMPLEMENTED else f"no {what}"
                raise GnmiUnsupported(
                    f"the target at {self.address} serves {served} ({code.name}: {err.details()})"
                ) from None
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                over = " over TLS (does it serve TLS, with a certificate the CA signed?)"
                raise GnmiError(
                    f"no gNMI answer from {self.address}{over if self.tls else ''} "
                    f"within {self.timeout:g} s"
                ) from None
            raise GnmiError(
                f"gNMI Get of {what} at {self.address} failed: {code.name}: {err.details()}"
            ) from None

    def read_fidelity(self) -> dict[str, dict[str, int]]:
        """The packet loop's lateness histograms ({name: {bucket-N: count, max-ns: ns}},
        cumulative); empty from a target that does not serve them (bmv2, Stratum)."""
        request = gnmi_pb2.GetRequest(
            path=[fidelity_path()], type=gnmi_pb2.GetRequest.STATE, encoding=gnmi_pb2.PROTO
        )
        try:
            response = self._stub.Get(request, timeout=self.timeout, wait_for_ready=True)
        except grpc.RpcError as err:
            if err.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNIMPLEMENTED):
                return {}
            raise GnmiError(
                f"gNMI Get of /fidelity at {self.address} failed: "
                f"{err.code().name}: {err.details()}"
            ) from None
        return fidelity_from(response)

    def close(self) -> None:
        close_channel(self._channel)

    def __enter__(self) -> GnmiReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def read_interface_counters(
    address: str, timeout: float = 5.0, tls: TlsSettings | None = None
) -> dict[str, dict[str, int]]:
    """Interface name -> counters leaf -> value, read once from the gNMI target at `address`."""
    with GnmiReader(address, timeout, tls) as reader:
        return {i.name: dict(i.counters) for i in reader.read()}
