"""Which server pairs does a job's traffic run between, and over which links?

A job's parallelism decides its flows; routing (`topologies.routing`) only
routes (src, dst) flows. (our choice) Traffic pattern per parallelism, over
the job's distinct servers in placement order (workers on one server talk
over NVLink/PCIe, not the NIC):

- data: ring AllReduce, server i sends to server i+1 (mod n).
- pipeline: activations i -> i+1 and gradients i+1 -> i between consecutive
  stages, plus the ring of the AllReduce that syncs tied embeddings and the
  data-parallel replicas.
- tensor, hybrid: ring, since tensor-parallel AllReduce is ring-based in NCCL.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence

from topologies import routing
from topologies.errors import UserInputError, did_you_mean
from topologies.model import DirectedLink, Topology
from topologies.routing import Router

from .profiles import PARALLELISMS

Flow = tuple[str, str]


def nic_shares(ends: Sequence[tuple[Hashable, Hashable] | None]) -> list[float]:
    """Each flow's fraction of a worker's NIC demand: 1 / max(flows its source sends,
    flows its destination receives), so a job never oversubscribes its own NICs
    (our choice; `None` is a flow with no ends: all of it).

    >>> nic_shares([(0, 1), (1, 0), (1, 2), (2, 1), (2, 0), None])  # 1 receives from 0 and 2
    [0.5, 0.5, 0.5, 0.5, 0.5, 1.0]
    """
    out_deg = Counter(e[0] for e in ends if e is not None)
    in_deg = Counter(e[1] for e in ends if e is not None)
    return [1.0 if e is None else 1.0 / max(out_deg[e[0]], in_deg[e[1]]) for e in ends]


def job_flows(servers: Sequence[str], parallelism: str) -> tuple[Flow, ...]:
    """(src, dst) server pairs a job on `servers` sends between; see the module docstring.

    >>> job_flows(["s01", "s05", "s13"], "pipeline")
    (('s01', 's05'), ('s05', 's01'), ('s05', 's13'), ('s13', 's05'), ('s13', 's01'))
    >>> job_flows(["s01", "s01", "s02", "s02"], "data")
    (('s01', 's02'), ('s02', 's01'))
    """
    kind = parallelism.strip().lower()
    if kind not in PARALLELISMS:
        raise UserInputError(did_you_mean(parallelism, PARALLELISMS, "parallelism"))
    distinct = list(dict.fromkeys(servers))
    n = len(distinct)
    if n < 2:
        return ()
    ring = [(distinct[i], distinct[(i + 1) % n]) for i in range(n)]
    if kind == "pipeline":
        chain: list[Flow] = []
        for i in range(n - 1):
            chain.append((distinct[i], distinct[i + 1]))
            chain.append((distinct[i + 1], distinct[i]))
        return tuple(dict.fromkeys([*chain, *ring]))
    return tuple(dict.fromkeys(ring))


class JobRouter(Router):
    """Routing for jobs: a job's links are the routes of its flows (`job_flows`).

    What the simulator and the Cassini core are given; everything else is
    `Router`'s.

    >>> from topologies.generators import cassini_testbed
    >>> sorted(JobRouter(cassini_testbed()).job_links(["s01", "s02"], "data"))
    [('s01', 'tor1'), ('s02', 'tor1'), ('tor1', 's01'), ('tor1', 's02')]
    """

    __slots__ = ("_per_job_ecmp", "_placed")

    def __init__(self, topo: Topology, per_job_ecmp: bool = False) -> None:
        """`per_job_ecmp`: route each job's flows with its name as flow key.

        Off by default because the chip forwards on <ingress port, dst MAC>,
        so all jobs between two servers share one path there.
        """
        super().__init__(topo)
        self._per_job_ecmp = per_job_ecmp
        # per (servers, parallelism, flow key): the hot loops ask again and again
        self._placed: dict[tuple[tuple[str, ...], str, str], frozenset[DirectedLink]] = {}

    def job_flows(
        self, servers: Sequence[str], parallelism: str, job_name: str = ""
    ) -> tuple[Flow, ...]:
        """`job_flows` on this topology's servers (an unknown server is refused)."""
        flows = job_flows(servers, parallelism)
        self.check_servers(dict.fromkeys(servers))
        return flows

    def job_links(
        self, servers: Sequence[str], parallelism: str, job_name: str = ""
    ) -> frozenset[DirectedLink]:
        """Directed links (NIC links included) a job's traffic uses."""
        flow_key = job_name if self._per_job_ecmp else ""
        key = (tuple(servers), parallelism, flow_key)
        cached = self._placed.get(key)
        if cached is not None:
            return cached
        links = self.flow_links(self.job_flows(servers, parallelism), flow_key)
        if len(self._placed) >= routing.CACHE_LIMIT:
            self._placed.clear()
        self._placed[key] = links
        return links
