"""A dataplane that records what the P4Runtime side sent it, for the target's tests."""

from __future__ import annotations

from collections.abc import Sequence

from emulation.softswitch.state import Change, LocalDataplane


class RecordingDataplane(LocalDataplane):
    """A LocalDataplane that keeps every batch it applies."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[Change]] = []

    def apply(self, changes: Sequence[Change]) -> None:
        self.batches.append(list(changes))
        super().apply(changes)
