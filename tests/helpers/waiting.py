"""Waiting for a condition in tests that watch another process or thread."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(condition: Callable[[], bool], timeout: float = 3.0) -> bool:
    """Poll `condition` every 10 ms until it holds or `timeout` s pass; its last answer."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.01)
    return condition()
