"""Waiting for a condition in tests that watch another process or thread."""

from __future__ import annotations

import time
from collections.abc import Callable

# How long a test waits by default for what another process or thread does: far
# longer than it takes even beside busy processes, since a condition that holds
# ends the wait at once and only a failing test waits it out.
WAIT_S = 30.0


def wait_for(condition: Callable[[], bool], timeout: float = WAIT_S) -> bool:
    """Poll `condition` every 10 ms until it holds or `timeout` s pass; its last answer."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.01)
    return condition()
