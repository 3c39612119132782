"""What does the header byte of each step tell a job's other workers?

Each step of a collective carries one header byte per direction: the
running OR of the workers' "stop after this iteration" wishes and the
largest of their agents' wishes to skip grid slots (`agent.Drift.skip`).
After N-1 steps around the ring every worker holds them all, so a job stops
at a deadline, and re-aligns to its grid, in agreement. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_SKIP = 127  # what a header byte's seven skip bits hold


@dataclass(frozen=True)
class Header:
    """One step's header byte: bit 0 the stop wish, bits 1-7 the slots to skip (our
    choice: at most 127, far more than a drift ever asks for).

    >>> Header.of(Header(True, 3).byte())
    Header(stop=True, skip=3)
    """

    stop: bool = False
    skip: int = 0

    def byte(self) -> int:
        return (min(self.skip, MAX_SKIP) << 1) | int(self.stop)

    @classmethod
    def of(cls, byte: int) -> Header:
        return cls(bool(byte & 1), byte >> 1)

    def merge(self, other: Header) -> Header:
        """Everyone's wishes so far: any stop, the largest skip."""
        return Header(self.stop or other.stop, max(self.skip, other.skip))
