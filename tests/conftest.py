"""Hooks for every test: a test marked `root` skips, saying why, unless run as root.

Namespaces, veths and raw sockets need root; without it such a test would
fail on its first `ip` command and read as a bug rather than as a machine
that cannot run it.
"""

from __future__ import annotations

import os

import pytest

ROOT_REASON = "needs root (network namespaces, veth, raw sockets)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.geteuid() == 0:
        return
    needs_root = pytest.mark.skip(reason=ROOT_REASON)
    for item in items:
        if item.get_closest_marker("root") is not None:
            item.add_marker(needs_root)
