"""Which P4Runtime error does a refused request get?

`EntryError` carries a google.rpc code and a message naming the culprit; the
gRPC service turns it into the RPC's status (or one update's error).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.rpc import code_pb2

from topologies.errors import UserInputError


class EntryError(Exception):
    """A P4Runtime error: a google.rpc code (code_pb2) and a message naming the culprit."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"EntryError({code_pb2.Code.Name(self.code)}, {self.message!r})"


def invalid(message: str) -> EntryError:
    """INVALID_ARGUMENT with `message`."""
    return EntryError(code_pb2.INVALID_ARGUMENT, message)


def known_object(lookup: Callable[[int], Any], object_id: int, what: str) -> Any:
    """The P4Info object of an id, or INVALID_ARGUMENT '<what> <id>'."""
    try:
        return lookup(object_id)
    except UserInputError:
        raise invalid(f"{what} {object_id}") from None
