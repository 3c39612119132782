"""Which bytes are a request, and what does a client get for bytes that are not one?

grpcio's server parses each request with the deserializer its method was
registered with, and answers one it cannot parse INTERNAL after logging a
six-line traceback at ERROR; the switch grew by about 19 KB per such call,
never released (49,400 malformed Writes in 30 s: 116 MB to 1,045 MB, 18.6 MB
of log). So the switch registers every method of its services with no
deserializer (`raw_service_handler`): the handler gets the request's bytes,
parses them with the message's `FromString` here, and answers bytes that do
not parse INVALID_ARGUMENT, with one rate-limited log line (`LogLimiter`).
A stream's messages are parsed as the handler reads them; one that does
not parse raises `MalformedRequest`, which the handler turns into the end
of its stream with INVALID_ARGUMENT.

>>> from controlplane.proto.p4.v1 import p4runtime_pb2
>>> parse(p4runtime_pb2.WriteRequest, b"\\x08\\x07").device_id
7
>>> parse(p4runtime_pb2.WriteRequest, b"\\xff\\xff")
Traceback (most recent call last):
...
emulation.softswitch.raw_requests.MalformedRequest: 2 bytes that are not a p4.v1.WriteRequest
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.message import DecodeError

from .log_limit import LogLimiter

log = logging.getLogger(__name__)


class MalformedRequest(Exception):
    """Bytes a client sent that are not the request message of its method."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def parse(message_type: Any, data: bytes) -> Any:
    """`data` as a `message_type`; MalformedRequest when it is not one (the protobuf
    runtime's own nesting limit included: a deeply nested message is refused here)."""
    try:
        return message_type.FromString(data)
    except (DecodeError, RecursionError):
        pass  # raised below, outside the handler of the parser's error
    raise MalformedRequest(
        f"{len(data)} bytes that are not a {message_type.DESCRIPTOR.full_name}"
    )


def parsed_stream(message_type: Any, requests: Iterator[bytes]) -> Iterator[Any]:
    """A stream's messages, parsed as they are read (MalformedRequest for one that is not)."""
    for data in requests:
        yield parse(message_type, data)


def raw_service_handler(
    service: Any,
    servicer: object,
    log_limit: LogLimiter,
    serializers: Mapping[str, Callable[[Any], bytes]] | None = None,
) -> grpc.GenericRpcHandler:
    """A handler serving every method of `service` (a ServiceDescriptor) by the method of
    `servicer` of the same name, its requests parsed here (see the module docstring);
    `serializers` replaces a method's response serialiser (one that returns bytes)."""
    serializers = serializers or {}
    handlers = {}
    for method in service.methods:
        request_type = message_factory.GetMessageClass(method.input_type)
        response_type = message_factory.GetMessageClass(method.output_type)
        serialize = serializers.get(method.name, response_type.SerializeToString)
        behaviour = getattr(servicer, method.name)
        name = f"{service.name}.{method.name}"
        handler: Callable[[Any, Any], Any]
        if method.client_streaming:
            make = (
                grpc.stream_stream_rpc_method_handler
                if method.server_streaming
                else grpc.stream_unary_rpc_method_handler
            )
            handler = _streaming(behaviour, request_type)
        else:
            make = (
                grpc.unary_stream_rpc_method_handler
                if method.server_streaming
                else grpc.unary_unary_rpc_method_handler
            )
            handler = _unary(behaviour, request_type, name, log_limit)
        handlers[method.name] = make(
            handler, request_deserializer=None, response_serializer=serialize
        )
    return grpc.method_handlers_generic_handler(service.full_name, handlers)


def _unary(
    behaviour: Callable[[Any, Any], Any], request_type: Any, name: str, log_limit: LogLimiter
) -> Callable[[bytes, Any], Any]:
    def handle(data: bytes, context: Any) -> Any:
        try:
            request = parse(request_type, data)
        except MalformedRequest as err:
            refuse(context, name, err, log_limit)
        return behaviour(request, context)

    return handle


def _streaming(
    behaviour: Callable[[Any, Any], Any], request_type: Any
) -> Callable[[Iterator[bytes], Any], Any]:
    def handle(requests: Iterator[bytes], context: Any) -> Any:
        return behaviour(parsed_stream(request_type, requests), context)

    return handle


def refuse(context: Any, name: str, err: MalformedRequest, log_limit: LogLimiter) -> None:
    """Answer a malformed request INVALID_ARGUMENT (raises), with a rate-limited log line."""
    log_limit.log(
        log, logging.INFO, "malformed %s request from %s: %s", name, context.peer(), err.message
    )
    context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed request: {err.message}")
