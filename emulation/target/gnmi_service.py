"""The gNMI service of the software target (interface counters). Placeholder until built."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .port_stats import PortCounters


def add_gnmi_service(server: Any, source: Callable[[], Sequence[PortCounters]]) -> None:
    """Register the gNMI servicer on `server` (not built yet: registers nothing)."""
