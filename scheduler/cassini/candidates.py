"""Equally good placements to choose among, until the base schedulers supply them.

A base scheduler (Themis, Pollux) hands Cassini up to N placements with the
same worker counts. This packer stands in for one: locality first (each job
on as few racks as the free GPUs allow), varying which racks and servers it
uses and the order jobs are packed in, so candidates differ in which jobs end
up sharing uplinks.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from scheduler.workloads.types import Job
from topologies.errors import UserInputError
from topologies.model import Topology

MAX_ATTEMPTS_PER_CANDIDATE = 20


def racks(topo: Topology) -> dict[str, list[str]]:
    """Servers grouped by the switch their NIC is cabled to, in topology order."""
    servers = set(topo.server_names())
    attached: dict[str, str] = {}
    for link in topo.links:
        if link.a in servers and link.b not in servers:
            attached.setdefault(link.a, link.b)
        elif link.b in servers and link.a not in servers:
            attached.setdefault(link.b, link.a)
    grouped: dict[str, list[str]] = {}
    for s in topo.servers:
        if s.name not in attached:
            raise UserInputError(
                f"server {s.name} is not linked to a switch in topology '{topo.name}'"
            )
        grouped.setdefault(attached[s.name], []).append(s.name)
    return grouped


def _pack(
    jobs: Sequence[Job],
    rack_order: Sequence[str],
    rack_servers: dict[str, list[str]],
    gpus: dict[str, int],
) -> dict[str, tuple[str, ...]]:
    """Place jobs in order: one rack if any has room, else the fullest racks first."""
    free = dict(gpus)
    placement: dict[str, tuple[str, ...]] = {}
    for job in jobs:
        room = {r: sum(free[s] for s in rack_servers[r]) for r in rack_order}
        single = [r for r in rack_order if room[r] >= job.workers]
        if single:
            # Best fit: the rack left with the least room, ties by order.
            chosen = [min(single, key=lambda r: room[r])]
        else:
            chosen = sorted((r for r in rack_order if room[r] > 0), key=lambda r: -room[r])
        slots: list[str] = []
        for rack in chosen:
            for server in rack_servers[rack]:
                while free[server] > 0 and len(slots) < job.workers:
                    free[server] -= 1
                    slots.append(server)
            if len(slots) == job.workers:
                break
        placement[job.name] = tuple(slots)
    return placement


def _canonical(placement: dict[str, tuple[str, ...]]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return tuple(sorted((job, tuple(sorted(servers))) for job, servers in placement.items()))


def locality_candidates(
    topo: Topology, jobs: Sequence[Job], n: int = 10, seed: int = 0
) -> list[dict[str, tuple[str, ...]]]:
    """Up to `n` distinct placements, same worker counts, within per-server GPU counts.

    The first candidate packs jobs largest first onto racks in topology
    order; the others shuffle rack order, server order and job order with a
    seeded generator. Fewer than `n` come back when the cluster admits fewer
    distinct packings.
    """
    if n < 1:
        raise UserInputError(f"number of candidates must be >= 1, got {n}")
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        raise UserInputError("job names must be unique")
    for job in jobs:
        if job.workers < 1:
            raise UserInputError(f"job {job.name}: workers must be >= 1, got {job.workers}")
    gpus = {s.name: s.gpus for s in topo.servers}
    needed = sum(j.workers for j in jobs)
    if needed > sum(gpus.values()):
        raise UserInputError(
            f"jobs need {needed} GPUs but topology '{topo.name}' has {sum(gpus.values())}"
        )
    grouped = racks(topo)
    rng = np.random.default_rng(seed)
    ordered_jobs = sorted(jobs, key=lambda j: -j.workers)
    seen: set[tuple[tuple[str, tuple[str, ...]], ...]] = set()
    out: list[dict[str, tuple[str, ...]]] = []
    for attempt in range(n * MAX_ATTEMPTS_PER_CANDIDATE):
        if len(out) >= n:
            break
        if attempt == 0:
            rack_order = list(grouped)
            rack_servers = grouped
            job_order = ordered_jobs
        else:
            rack_order = [str(r) for r in rng.permutation(list(grouped))]
            rack_servers = {
                r: [str(s) for s in rng.permutation(servers)] for r, servers in grouped.items()
            }
            # Largest first keeps packing feasible; shuffle within equal sizes
            # and occasionally swap neighbours to vary who shares a rack.
            keys = rng.random(len(jobs))
            job_order = [
                jobs[i]
                for i in sorted(
                    range(len(jobs)), key=lambda i: (-jobs[i].workers + keys[i] * 1.5, keys[i])
                )
            ]
        placement = _pack(job_order, rack_order, rack_servers, gpus)
        if any(len(placement[j.name]) != j.workers for j in jobs):
            continue
        key = _canonical(placement)
        if key in seen:
            continue
        seen.add(key)
        out.append({j.name: placement[j.name] for j in jobs})
    return out
