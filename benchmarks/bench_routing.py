"""How fast routing and chip mapping answer on the sizes the harness uses.

Run by hand: `python benchmarks/bench_routing.py`. Prints wall times; the
simulator and the Cassini core call `Router.path` / `JobRouter.job_links` in hot
loops, so the cached-call rate is the figure that matters.
"""

from __future__ import annotations

import random
import time
from itertools import permutations

from scheduler.workloads.traffic import JobRouter
from topologies.chip_mapping import forwarding_entries, forwarding_table, map_to_chip, walk
from topologies.generators import cassini_testbed, fat_tree, leaf_spine
from topologies.routing import Router


def _timed(label: str, calls: int, fn: object) -> None:
    start = time.perf_counter()
    fn()  # type: ignore[operator]
    elapsed = time.perf_counter() - start
    rate = calls / elapsed if elapsed > 0 else float("inf")
    print(f"  {label:<44s} {elapsed * 1e3:9.1f} ms  {rate:12,.0f} /s")


def bench_router(name: str, topo_factory: object) -> None:
    topo = topo_factory()  # type: ignore[operator]
    names = topo.server_names()
    pairs = list(permutations(names, 2))
    print(f"{name}: {len(names)} servers, {len(topo.switches)} switches, {len(pairs)} pairs")
    router = JobRouter(topo)
    _timed("Router(topo)", 1, lambda: Router(topo))
    _timed("path, all pairs, cold", len(pairs), lambda: [router.path(a, b) for a, b in pairs])
    _timed("path, all pairs, cached", len(pairs), lambda: [router.path(a, b) for a, b in pairs])
    rng = random.Random(1)
    jobs = [rng.sample(names, 8) for _ in range(2000)]
    _timed(
        "job_links, 2000 8-server rings, cold",
        len(jobs),
        lambda: [router.job_links(j, "data", f"j{i}") for i, j in enumerate(jobs)],
    )
    _timed(
        "job_links, 2000 8-server rings, cached",
        len(jobs),
        lambda: [router.job_links(j, "data", f"j{i}") for i, j in enumerate(jobs)],
    )


def bench_chip(name: str, topo_factory: object) -> None:
    topo = topo_factory()  # type: ignore[operator]
    chip = map_to_chip(topo)
    router = Router(topo)
    start = time.perf_counter()
    entries = forwarding_entries(topo, chip, router)
    build_ms = (time.perf_counter() - start) * 1e3
    table = forwarding_table(entries)
    pairs = list(permutations(topo.server_names(), 2))
    start = time.perf_counter()
    for a, b in pairs:
        walk(topo, chip, table, a, b)
    walk_ms = (time.perf_counter() - start) * 1e3
    print(
        f"{name}: {len(chip.ports())} chip ports, {len(entries)} entries built in "
        f"{build_ms:.1f} ms; walked {len(pairs)} pairs in {walk_ms:.1f} ms"
    )


if __name__ == "__main__":
    bench_router("cassini-testbed", cassini_testbed)
    bench_router("leaf-spine:16:8:16", lambda: leaf_spine(16, 8, 16))
    bench_router("fat-tree:8", lambda: fat_tree(8))
    bench_chip("cassini-testbed", cassini_testbed)
    bench_chip("fat-tree:4", lambda: fat_tree(4))
    bench_chip("leaf-spine:8:8:24", lambda: leaf_spine(8, 8, 24))
