"""Base schedulers the paper compares Cassini against, and their Cassini-augmented forms.

`make_scheduler(name, topology, ...)` builds one by its CLI name.
"""

from __future__ import annotations

from .registry import SCHEDULER_NAMES, make_scheduler, parse_scheduler_names

__all__ = ["SCHEDULER_NAMES", "make_scheduler", "parse_scheduler_names"]
