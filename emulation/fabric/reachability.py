"""Which server pairs does a reachability check ping, and what did it find?

`EmulatedFabric.check_reachability` pings every ordered server pair once
(`cassini fabric up --check`) and sums the answers up as a `PingCheck`;
`server_pairs_covering_tors` picks fewer pairs that still cross every
ToR-to-ToR path of the chip, for checks that want a sample.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from topologies.chip_mapping import ChipMap


@dataclass(frozen=True)
class PingCheck:
    """What one ping per server pair found: the pairs that got no answer, the RTTs of the rest."""

    pairs: int
    lost: tuple[tuple[str, str], ...]
    rtts_ms: tuple[float, ...]  # sorted

    @property
    def ok(self) -> bool:
        return not self.lost

    def rtt_summary(self) -> dict[str, float | None]:
        """{'min', 'median', 'max'} in ms (None when nothing answered)."""
        rtts = self.rtts_ms
        return {
            "min": rtts[0] if rtts else None,
            "median": statistics.median(rtts) if rtts else None,
            "max": rtts[-1] if rtts else None,
        }

    def as_dict(self) -> dict[str, Any]:
        """The JSON form `cassini fabric up --check --json` prints."""
        return {
            "pairs": self.pairs,
            "reachable": len(self.rtts_ms),
            "lost": [f"{a}->{b}" for a, b in self.lost],
            "rtt_ms": self.rtt_summary(),
        }


def server_pairs_covering_tors(
    fabric_chip: ChipMap, servers: Sequence[str]
) -> list[tuple[str, str]]:
    """One (src, dst) pair per ordered ToR pair, plus one pair inside every rack.

    Servers are rotated within each rack so different pairs use different
    servers; every ToR-to-ToR path of the chip is crossed once in each direction.
    """
    racks: dict[str, list[str]] = {}
    for server in servers:
        racks.setdefault(fabric_chip.switch_of_port[fabric_chip.server_port[server]], []).append(
            server
        )
    tors = list(racks)
    pairs: list[tuple[str, str]] = []
    turn: dict[str, int] = dict.fromkeys(tors, 0)

    def pick(tor: str) -> str:
        members = racks[tor]
        chosen = members[turn[tor] % len(members)]
        turn[tor] += 1
        return chosen

    for a in tors:
        for b in tors:
            if a == b:
                if len(racks[a]) > 1:
                    first = pick(a)
                    second = next(s for s in racks[a] if s != first)
                    pairs.append((first, second))
                continue
            pairs.append((pick(a), pick(b)))
    return pairs
