"""How does an operator take a port of the software switch down and up again?

As on a switch managed over gNMI: a Set of OpenConfig's
`/interfaces/interface[name=NAME]/config/enabled` to false takes the port
down (the packet loop drops every frame sent to it, counted with its tail
drops, and gNMI's oper-status says DOWN), true brings it back. NAME is the
port's name for controllers (`topologies.port_names`: `tor1-eth3`, or
`port<N>`). On the chip a logical link is a loopback cable between two
ports; failing the link is taking both ends down (`emulation.fabric.mininet_net`'s
`configLinkStatus`).

Only that leaf can be set (our choice: it is the one a failure study needs);
any other path, a delete, or a value that is not a boolean is refused with
the reason. `set_enabled` is the client's side.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import grpc
from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc

from topologies.errors import UserInputError

from .gnmi_tree import PathError

# (container, list key, config leaf) of the one settable leaf.
ENABLED_PATH = ("interfaces", "interface", "config", "enabled")
SET_TIMEOUT_S = 10.0


def _bare(name: str) -> str:
    """A path element's name without its module prefix ('openconfig-interfaces:x')."""
    return name.rpartition(":")[2]


def enabled_value(value: Any) -> bool:
    """The boolean a TypedValue holds (bool_val, or JSON true/false).

    >>> enabled_value(gnmi_pb2.TypedValue(bool_val=False)), enabled_value(
    ...     gnmi_pb2.TypedValue(json_val=b"true"))
    (False, True)
    """
    kind = value.WhichOneof("value")
    if kind == "bool_val":
        return bool(value.bool_val)
    if kind in ("json_val", "json_ietf_val"):
        try:
            parsed = json.loads(getattr(value, kind))
        except (ValueError, RecursionError):  # deeply nested JSON is no boolean either
            parsed = None
        if isinstance(parsed, bool):
            return parsed
    raise PathError(
        grpc.StatusCode.INVALID_ARGUMENT, "config/enabled takes a boolean (bool_val or JSON)"
    )


def enabled_changes(request: Any) -> list[tuple[str, bool]]:
    """[(interface name, enabled)] a SetRequest asks for, in its order (replace, then
    update, as gNMI applies them); PathError for anything else it asks."""
    if request.delete:
        raise PathError(
            grpc.StatusCode.UNIMPLEMENTED, "delete is not served: only config/enabled is set"
        )
    changes = []
    for update in [*request.replace, *request.update]:
        elems = [*request.prefix.elem, *update.path.elem]
        names = tuple(_bare(e.name) for e in elems)
        if names != ENABLED_PATH or "name" not in elems[1].key:
            shown = "/" + "/".join(names)
            raise PathError(
                grpc.StatusCode.UNIMPLEMENTED,
                f"{shown} cannot be set: only /interfaces/interface[name=NAME]/config/enabled",
            )
        changes.append((elems[1].key["name"], enabled_value(update.val)))
    return changes


def set_response(request: Any, timestamp_ns: int) -> Any:
    """The SetResponse for a request whose changes were all applied."""
    results = [
        gnmi_pb2.UpdateResult(path=u.path, op=gnmi_pb2.UpdateResult.REPLACE)
        for u in request.replace
    ] + [
        gnmi_pb2.UpdateResult(path=u.path, op=gnmi_pb2.UpdateResult.UPDATE) for u in request.update
    ]
    return gnmi_pb2.SetResponse(prefix=request.prefix, response=results, timestamp=timestamp_ns)


def serve_set(request: Any, context: Any, apply: Callable[[str, bool], None] | None) -> Any:
    """gNMI Set on a switch whose `apply(name, enabled)` changes a port's state (None:
    Set is not served); an unknown name is NOT_FOUND, naming the names there are."""
    if apply is None:
        context.abort(
            grpc.StatusCode.UNIMPLEMENTED,
            "Set is not served: the interface counters are read-only state",
        )
        return None  # abort raises; a test's context may not
    try:
        for name, enabled in enabled_changes(request):
            try:
                apply(name, enabled)
            except UserInputError as err:
                raise PathError(grpc.StatusCode.NOT_FOUND, str(err)) from None
    except PathError as err:
        context.abort(err.code, err.message)
    return set_response(request, time.time_ns())


def enabled_request(name: str, enabled: bool) -> Any:
    """The SetRequest that takes interface `name` down (False) or up (True)."""
    path = gnmi_pb2.Path(
        elem=[
            gnmi_pb2.PathElem(name="interfaces"),
            gnmi_pb2.PathElem(name="interface", key={"name": name}),
            gnmi_pb2.PathElem(name="config"),
            gnmi_pb2.PathElem(name="enabled"),
        ]
    )
    return gnmi_pb2.SetRequest(
        update=[gnmi_pb2.Update(path=path, val=gnmi_pb2.TypedValue(bool_val=enabled))]
    )


def set_enabled(address: str, names: list[str], enabled: bool) -> None:
    """Take the switch's interfaces `names` down or up over gNMI (one Set each, in order);
    a refusal is UserInputError with the switch's reason."""
    from controlplane.channels import close_channel

    channel = grpc.insecure_channel(address)
    try:
        stub = gnmi_pb2_grpc.gNMIStub(channel)
        for name in names:
            try:
                stub.Set(enabled_request(name, enabled), timeout=SET_TIMEOUT_S)
            except grpc.RpcError as err:
                raise UserInputError(
                    f"{'enabling' if enabled else 'disabling'} {name} on {address}: "
                    f"{err.details() or err.code().name}"
                ) from None
    finally:
        close_channel(channel)  # whole even if Ctrl-C lands in the close
