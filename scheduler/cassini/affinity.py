"""One time-shift per job from per-link shifts (Algorithm 1, Theorem 1).

A job crossing several shared links gets one optimal shift per link; the
affinity graph (jobs on one side, shared links on the other) tells whether
one shift per job can satisfy all of them at once: always when the graph has
no cycle, and on a cycle only if the shifts happen to agree around it.

Graph nodes: jobs are their names (str), links are `DirectedLink` tuples;
node attribute `kind` is "job" or "link".
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import networkx as nx

from topologies.model import DirectedLink

Node = Hashable

ACYCLIC = "acyclic"
CONSISTENT_CYCLE = "consistent-cycle"
INCONSISTENT_CYCLE = "inconsistent-cycle"


@dataclass(frozen=True)
class ShiftResult:
    """One shift per job on a shared link, and which rule made it valid.

    `rule` is the worst over components: "acyclic" (Theorem 1),
    "consistent-cycle" (our choice: a cycle whose shifts agree within the
    tolerance) or "inconsistent-cycle" (the shifts cannot all hold; the
    candidate should be discarded). `conflicts` describes each violated link.
    """

    shifts_ms: Mapping[str, float]
    rule: str
    components: tuple[tuple[str, ...], ...]
    conflicts: tuple[str, ...] = ()


def link_id(link: DirectedLink) -> str:
    """How links are named in every output: 'a->b'."""
    return f"{link[0]}->{link[1]}"


def jobs_per_link(
    job_links: Mapping[str, frozenset[DirectedLink]],
) -> dict[DirectedLink, tuple[str, ...]]:
    """Invert job -> links into link -> sorted jobs."""
    per_link: dict[DirectedLink, list[str]] = {}
    for job in sorted(job_links):
        for link in job_links[job]:
            per_link.setdefault(link, []).append(job)
    return {link: tuple(jobs) for link, jobs in sorted(per_link.items())}


def build_affinity_graph(job_links: Mapping[str, frozenset[DirectedLink]]) -> nx.Graph:
    """Bipartite graph: jobs that share a link <-> links carrying more than one job.

    >>> g = build_affinity_graph({"a": frozenset({("x", "y")}), "b": frozenset({("x", "y"), ("y", "z")})})
    >>> sorted(map(str, g.nodes)), g.number_of_edges()
    (["('x', 'y')", 'a', 'b'], 2)
    """
    graph = nx.Graph()
    for link, jobs in jobs_per_link(job_links).items():
        if len(jobs) < 2:
            continue
        graph.add_node(link, kind="link")
        for job in jobs:
            graph.add_node(job, kind="job")
            graph.add_edge(job, link)
    return graph


def find_cycle(graph: nx.Graph) -> list[Node] | None:
    """The nodes of one cycle (job, link, job, link, ...), or None if the graph is a forest."""
    try:
        edges = nx.find_cycle(graph)
    except nx.NetworkXNoCycle:
        return None
    return [edge[0] for edge in edges]


def _circular_gap(a: float, b: float, period: float) -> float:
    d = (a - b) % period
    return min(d, period - d)


def _sort_key(node: Node) -> str:
    return str(node)


def unique_shifts(
    graph: nx.Graph,
    link_shifts: Mapping[DirectedLink, Mapping[str, float]],
    iteration_ms: Mapping[str, float],
    tolerance_ms: float = 1.0,
) -> ShiftResult:
    """Algorithm 1: BFS per component from its first job (by name) at t = 0.

    Going job j -> link l -> job k: t_k = t_j - w(j,l) + w(k,l) mod T_k, fixed
    at the first visit. Every edge is then checked: t_k must equal
    c_l + w(k,l) mod T_k with c_l = t_j - w(j,l) of the job that reached l
    first. Tree edges hold by construction, so only cycles can fail.

    >>> g = build_affinity_graph({"a": frozenset({"L"}), "b": frozenset({"L"})})
    >>> unique_shifts(g, {"L": {"a": 10.0, "b": 40.0}}, {"a": 100.0, "b": 100.0}).shifts_ms
    {'a': 0.0, 'b': 30.0}
    """
    shifts: dict[str, float] = {}
    components: list[tuple[str, ...]] = []
    conflicts: list[str] = []
    has_cycle = False
    job_nodes = sorted((n for n, kind in graph.nodes(data="kind") if kind == "job"), key=_sort_key)
    for start in job_nodes:
        if start in shifts:
            continue
        shifts[start] = 0.0
        offsets: dict[Any, float] = {}  # link node -> c_l
        members = [start]
        queue = deque([start])
        while queue:
            job = queue.popleft()
            for link in sorted(graph.neighbors(job), key=_sort_key):
                weights = link_shifts[link]
                if link not in offsets:
                    offsets[link] = shifts[job] - weights[job]
                for other in sorted(graph.neighbors(link), key=_sort_key):
                    if other not in shifts:
                        shifts[other] = (offsets[link] + weights[other]) % iteration_ms[other]
                        members.append(other)
                        queue.append(other)
        component = graph.subgraph([*members, *offsets])
        if component.number_of_edges() >= component.number_of_nodes():
            has_cycle = True
        for link, offset in sorted(offsets.items(), key=lambda kv: _sort_key(kv[0])):
            for job in sorted(graph.neighbors(link), key=_sort_key):
                wanted = (offset + link_shifts[link][job]) % iteration_ms[job]
                gap = _circular_gap(shifts[job], wanted, iteration_ms[job])
                if gap > tolerance_ms:
                    conflicts.append(
                        f"{job} on {link_id(link) if isinstance(link, tuple) else link}: shift {shifts[job]:.1f} ms vs {wanted:.1f} ms wanted (off by {gap:.1f} ms)"
                    )
        components.append(tuple(sorted(members)))
    rule = INCONSISTENT_CYCLE if conflicts else CONSISTENT_CYCLE if has_cycle else ACYCLIC
    return ShiftResult(
        shifts_ms=shifts, rule=rule, components=tuple(components), conflicts=tuple(conflicts)
    )
