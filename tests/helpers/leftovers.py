"""What a test left on the machine, as `cassini clean` sees it: switch processes too."""

from __future__ import annotations

from collections.abc import Iterable

from emulation.housekeeping import clean
from emulation.softswitch.processes import is_switch_process


def leftovers(prefixes: str | Iterable[str]) -> list[str]:
    """`emulation.housekeeping.clean.leftovers`, counting switches on the prefixes' interfaces."""
    return clean.leftovers(prefixes, is_switch_process)


def cleanup_all(prefixes: str | Iterable[str]) -> list[str]:
    """`emulation.housekeeping.clean.cleanup_all`, switches on the prefixes' interfaces included."""
    return clean.cleanup_all(prefixes, is_switch_process)
