"""Does this process build and parse protobuf messages with the compiled (upb) implementation?

Every P4Runtime and gNMI message the project builds or parses goes through
protobuf; the pure-Python implementation is about 34x slower at it (issue 24:
4,300 table entries a second encoded and parsed against 146,000). The client
(controlplane.session) and the switch's services check once, at import, and
say so on stderr when the implementation is not upb, then carry on (our
choice: slow is still correct).

>>> implementation() in {"upb", "python", "cpp"}
True
"""

from __future__ import annotations

import sys
from typing import TextIO

FAST = "upb"
_checked = False


def implementation() -> str:
    """'upb' (compiled), 'python' (pure Python) or 'cpp' (the older compiled one)."""
    from google.protobuf.internal import api_implementation

    return str(api_implementation.Type())


def check(stream: TextIO | None = None, *, force: bool = False) -> bool:
    """True when protobuf is compiled; otherwise say so on `stream` (stderr), once per process."""
    global _checked
    found = implementation()
    if found == FAST:
        return True
    if force or not _checked:
        _checked = True
        print(
            f"cassini: protobuf runs its {found!r} implementation, not {FAST!r}: P4Runtime and "
            "gNMI messages are built and parsed about 30x slower (install a protobuf>=6.31 "
            "wheel for this platform and unset PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION)",
            file=stream or sys.stderr,
        )
    return False
