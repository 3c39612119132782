"""How tiers stack up and how oversubscribed each tier is.

A tier's rank orders the fabric bottom-up; a link from a switch to a node of a
lower rank is a downlink, to a higher rank an uplink. Oversubscription of a
tier is its total downlink capacity over its total uplink capacity: 2.0 means
the servers below can offer twice what the tier can carry upward.
"""

from __future__ import annotations

from .model import Topology

SERVER_RANK = 0
# ToR, leaf and edge are the same tier under three names; so are agg and spine
# in the sense that they sit on top of the access tier.
TIER_RANK: dict[str, int] = {"tor": 1, "leaf": 1, "edge": 1, "agg": 2, "spine": 2, "core": 3}
KNOWN_TIERS = tuple(TIER_RANK)


def node_ranks(topo: Topology) -> dict[str, int]:
    """Rank of every node; servers are 0."""
    ranks = {s.name: SERVER_RANK for s in topo.servers}
    for sw in topo.switches:
        ranks[sw.name] = TIER_RANK[sw.tier]
    return ranks


def oversubscription(topo: Topology) -> dict[str, float]:
    """Downlink over uplink capacity per tier, for tiers that have uplinks.

    >>> from topologies.generators import cassini_testbed
    >>> oversubscription(cassini_testbed())
    {'tor': 2.0, 'agg': 1.0}
    """
    ranks = node_ranks(topo)
    tier_of = {sw.name: sw.tier for sw in topo.switches}
    down: dict[str, float] = {}
    up: dict[str, float] = {}
    for link in topo.links:
        for here, there in link.directions():
            tier = tier_of.get(here)
            if tier is None:
                continue
            if ranks[there] < ranks[here]:
                down[tier] = down.get(tier, 0.0) + link.gbps
            elif ranks[there] > ranks[here]:
                up[tier] = up.get(tier, 0.0) + link.gbps
    order = sorted({sw.tier for sw in topo.switches}, key=lambda t: (TIER_RANK[t], t))
    return {t: down.get(t, 0.0) / up[t] for t in order if up.get(t, 0.0) > 0}
