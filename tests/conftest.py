"""Hooks for every test: a test marked `root` skips, saying why, unless run as root;
Ctrl-C is Ctrl-C, however the suite was started.

Namespaces, veths and raw sockets need root; without it such a test would
fail on its first `ip` command and read as a bug rather than as a machine
that cannot run it.

A suite started in the background by a non-interactive shell (`make test &`,
a CI runner's job) inherits SIGINT ignored, and so does every process it
starts: the tests that send Ctrl-C to a command then saw it ignored and timed
out (beside two busy processes, started so). Python's own handler is put
back at the start, as a terminal would have it.
"""

from __future__ import annotations

import os
import signal

import pytest

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

ROOT_REASON = "needs root (network namespaces, veth, raw sockets)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.geteuid() == 0:
        return
    needs_root = pytest.mark.skip(reason=ROOT_REASON)
    for item in items:
        if item.get_closest_marker("root") is not None:
            item.add_marker(needs_root)
