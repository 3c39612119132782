"""Fixtures of the emulation's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from emulation.housekeeping.prefixes import new_prefix
from tests.helpers.leftovers import cleanup_all, leftovers


@pytest.fixture
def prefix() -> Iterator[str]:
    """A fresh name prefix; whatever carries it afterwards is removed, and the test fails."""
    name = new_prefix("cas")
    try:
        yield name
    finally:
        left = leftovers(name)
        cleanup_all(name)
        assert left == []
