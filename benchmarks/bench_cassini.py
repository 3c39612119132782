"""All of Algorithm 2 on the default testbed: 10 candidates, one core.

Run: .venv/bin/python benchmarks/bench_cassini.py [--repeats 20]

For several candidate seeds: generate 10 locality candidates for the
built-in example `four-jobs` (4 jobs, 24 GPUs), then time `choose` (routing, per-link
job sets, affinity graph, every shared link's solve, shifts) with a fresh
JobRouter and link cache each run (cold) and the whole thing including the
candidate generation. Prints a Markdown table; the goal is < 200 ms.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

from scheduler.cassini.candidates import locality_candidates
from scheduler.cassini.plans import choose
from scheduler.workloads.profiles import build_profile
from scheduler.workloads.traces import FOUR_JOBS
from scheduler.workloads.traffic import JobRouter
from scheduler.workloads.types import Job
from topologies.library import load_topology
from topologies.model import Topology

# A heavier mix: jobs wider than a rack, so most candidates share many uplinks.
WIDE_JOBS = (("vgg16", 6), ("bert", 6), ("xlm", 4), ("resnet50", 4), ("gpt2", 4))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--topology", default="cassini-testbed")
    args = parser.parse_args()
    topo = load_topology(args.topology)
    for label, spec in (("four-jobs", FOUR_JOBS), ("wide", WIDE_JOBS)):
        run(label, spec, topo, args.repeats, [int(s) for s in args.seeds.split(",")])


def run(
    label: str, spec: tuple[tuple[str, int], ...], topo: Topology, repeats: int, seeds: list[int]
) -> None:
    jobs = [
        Job(f"{m}-{i}", replace(build_profile(m, w), name=f"{m}-{i}"), w)
        for i, (m, w) in enumerate(spec)
    ]
    profiles = {j.name: j.profile for j in jobs}
    caps = topo.capacity_gbps()
    print(
        f"\n### Algorithm 2 on {topo.name}, {label} workload: {len(jobs)} jobs, 10 candidates, 1 process, {repeats} runs\n"
    )
    print(
        "| seed | solver | shared links (sum) | discarded | choose ms (median) | choose ms (max) | end-to-end ms (median) | best score |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for seed in seeds:
        for solver in ("auto", "fast"):
            choose_ms, total_ms = [], []
            decision = None
            for _ in range(repeats):
                start = time.perf_counter()
                cands = locality_candidates(topo, jobs, n=10, seed=seed)
                mid = time.perf_counter()
                decision = choose(cands, profiles, JobRouter(topo), caps, solver=solver)
                end = time.perf_counter()
                choose_ms.append((end - mid) * 1e3)
                total_ms.append((end - start) * 1e3)
            assert decision is not None
            shared = sum(len(c.link_scores) for c in decision.candidates)
            discarded = sum(c.discarded is not None for c in decision.candidates)
            print(
                f"| {seed} | {solver} | {shared} | {discarded} | {statistics.median(choose_ms):.2f} | "
                f"{max(choose_ms):.2f} | {statistics.median(total_ms):.2f} | {decision.best.score:.4f} |"
            )


if __name__ == "__main__":
    main()
