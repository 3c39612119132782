"""Which links a packet, a flow and a set of flows cross.

Routing is shortest-path, decided hop by hop exactly as the chip's forwarding
entries decide it: a switch picks among its equal-cost next hops toward the
destination server by a stable hash of (switch, node the packet came from,
destination, flow key). (our choice) Hashing on the previous hop rather than
on the whole path is what a table matching <ingress port, destination MAC> can
express, so `Router.path(src, dst)` with the empty flow key is, hop for hop,
the path the chip's entries send the packet on, and the simulator's link
sharing is the switch's link sharing. A non-empty flow key spreads flows the
way a per-flow ECMP fabric would.

Hashes are zlib.crc32 of UTF-8 text, never Python's hash(), so answers are the
same across processes and machines.
"""

from __future__ import annotations

import zlib
from collections import deque
from collections.abc import Iterable, Sequence

from .errors import UserInputError, did_you_mean
from .model import DirectedLink, Topology

Path = tuple[str, ...]

# Memo tables keyed by caller-chosen values (flow keys, placements) are emptied
# when they reach this size, so a search over millions of candidate placements
# cannot grow memory without bound; per-topology tables are naturally bounded.
CACHE_LIMIT = 1 << 16


class Router:
    """Deterministic shortest-path routing over one topology.

    Built once per topology; answers are memoised inside (per destination rack
    distances, per pair ECMP path sets, per flow set link sets), so the
    simulator and the Cassini core can call it in hot loops.

    >>> from topologies.generators import cassini_testbed
    >>> r = Router(cassini_testbed())
    >>> r.path("s01", "s05")
    ('s01', 'tor1', 'agg1', 'tor2', 's05')
    """

    __slots__ = (
        "_topo",
        "_neighbors",
        "_servers",
        "_tor_of",
        "_dist",
        "_next",
        "_path",
        "_paths",
        "_job",
    )

    def __init__(self, topo: Topology) -> None:
        self._topo = topo
        neighbors: dict[str, list[str]] = {n: [] for n in topo.node_names()}
        for link in topo.links:
            neighbors[link.a].append(link.b)
            neighbors[link.b].append(link.a)
        self._neighbors = {n: tuple(sorted(v)) for n, v in neighbors.items()}
        self._servers = frozenset(topo.server_names())
        self._tor_of = {s: self._neighbors[s][0] for s in self._servers if self._neighbors[s]}
        self._dist: dict[str, dict[str, int]] = {}
        self._next: dict[tuple[str, str], Path] = {}
        self._path: dict[tuple[str, str, str], Path] = {}
        self._paths: dict[tuple[str, str], tuple[Path, ...]] = {}
        # link sets of flow sets (one per job placement, for the scheduler)
        self._job: dict[tuple[tuple[tuple[str, str], ...], str], frozenset[DirectedLink]] = {}

    @property
    def topology(self) -> Topology:
        return self._topo

    def tor_of(self, server: str) -> str:
        """The switch a server's NIC is cabled to."""
        self._check_server(server)
        return self._tor_of[server]

    def next_hops(self, node: str, dst: str) -> Path:
        """Equal-cost next hops from switch `node` toward server `dst`, sorted by name."""
        key = (node, dst)
        hops = self._next.get(key)
        if hops is None:
            self._check_server(dst)
            if node not in self._neighbors:
                raise UserInputError(did_you_mean(node, self._neighbors, "node"))
            tor = self._tor_of[dst]
            if node == tor:
                hops = (dst,)
            else:
                dist = self._distances_to(tor)
                here = dist.get(node)
                hops = (
                    ()
                    if here is None
                    else tuple(
                        n
                        for n in self._neighbors[node]
                        if n not in self._servers and dist.get(n) == here - 1
                    )
                )
            self._next[key] = hops
        return hops

    def next_hop(self, node: str, came_from: str, dst: str, flow_key: str = "") -> str | None:
        """The one next hop a switch picks for a packet from `came_from` to `dst`.

        Never sends a packet back where it came from; None if no such hop.
        """
        hops = self.next_hops(node, dst)
        if came_from in hops:
            hops = tuple(h for h in hops if h != came_from)
        if not hops:
            return None
        if len(hops) == 1:
            return hops[0]
        digest = zlib.crc32(f"{node}|{came_from}|{dst}|{flow_key}".encode())
        return hops[digest % len(hops)]

    def path(self, src: str, dst: str, flow_key: str = "") -> Path:
        """Node list src .. dst taken by a flow (src alone if src == dst)."""
        key = (src, dst, flow_key)
        cached = self._path.get(key)
        if cached is not None:
            return cached
        self._check_server(src)
        self._check_server(dst)
        nodes = [src]
        if src != dst:
            prev, node = src, self._tor_of[src]
            limit = len(self._neighbors) + 1
            while node != dst:
                nodes.append(node)
                nxt = self.next_hop(node, prev, dst, flow_key)
                if nxt is None or len(nodes) > limit:
                    raise UserInputError(f"no route from {src} to {dst} (stuck at {node})")
                prev, node = node, nxt
            nodes.append(dst)
        result = tuple(nodes)
        if len(self._path) >= CACHE_LIMIT:
            self._path.clear()
        self._path[key] = result
        return result

    def paths(self, src: str, dst: str) -> tuple[Path, ...]:
        """All equal-cost shortest paths src .. dst, sorted; the ECMP set of the pair."""
        key = (src, dst)
        cached = self._paths.get(key)
        if cached is not None:
            return cached
        self._check_server(src)
        self._check_server(dst)
        if src == dst:
            found: list[Path] = [(src,)]
        else:
            found = []
            stack: list[Path] = [(src, self._tor_of[src])]
            while stack:
                partial = stack.pop()
                last = partial[-1]
                if last == dst:
                    found.append(partial)
                    continue
                for hop in self.next_hops(last, dst):
                    stack.append((*partial, hop))
        result = tuple(sorted(found))
        self._paths[key] = result
        return result

    @staticmethod
    def path_links(path: Sequence[str]) -> tuple[DirectedLink, ...]:
        """The directed links of a node list, in travel order."""
        return tuple((path[i], path[i + 1]) for i in range(len(path) - 1))

    def flow_links(
        self, flows: Iterable[tuple[str, str]], flow_key: str = ""
    ) -> frozenset[DirectedLink]:
        """Directed links (NIC links included) that (src, dst) flows cross, routed with `flow_key`.

        >>> from topologies.generators import cassini_testbed
        >>> sorted(Router(cassini_testbed()).flow_links([("s01", "s02"), ("s02", "s01")]))
        [('s01', 'tor1'), ('s02', 'tor1'), ('tor1', 's01'), ('tor1', 's02')]
        """
        key = (tuple(flows), flow_key)
        cached = self._job.get(key)
        if cached is not None:
            return cached
        links: set[DirectedLink] = set()
        for src, dst in key[0]:
            links.update(self.path_links(self.path(src, dst, flow_key)))
        result = frozenset(links)
        if len(self._job) >= CACHE_LIMIT:
            self._job.clear()
        self._job[key] = result
        return result

    def check_servers(self, names: Iterable[str]) -> None:
        """Refuse a name that is not a server linked to a switch (naming the close ones)."""
        for name in names:
            self._check_server(name)

    def _check_server(self, name: str) -> None:
        if name not in self._servers:
            raise UserInputError(did_you_mean(name, self._servers, "server"))
        if name not in self._tor_of:
            raise UserInputError(f"server {name} is not linked to a switch")

    def _distances_to(self, tor: str) -> dict[str, int]:
        """Hop counts from every switch to `tor`, not passing through servers."""
        dist = self._dist.get(tor)
        if dist is None:
            dist = {tor: 0}
            queue = deque([tor])
            while queue:
                node = queue.popleft()
                for nxt in self._neighbors[node]:
                    if nxt not in dist and nxt not in self._servers:
                        dist[nxt] = dist[node] + 1
                        queue.append(nxt)
            self._dist[tor] = dist
        return dist
