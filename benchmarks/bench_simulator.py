"""How long do all six schedulers take on a 1,000-job Poisson trace, 256 servers?

Run by hand: `.venv/bin/python benchmarks/bench_simulator.py [--jobs N] [--topology T]`.
Prints wall time per scheduler, the total, and the peak RSS of the process.
"""

from __future__ import annotations

import argparse
import resource
import time

from scheduler.simulator import SimSettings
from scheduler.simulator.experiment import run_experiment, speedups
from scheduler.workloads.traces import poisson_trace
from topologies.library import load_topology


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--topology", default="leaf-spine:16:8:16")
    ap.add_argument("--load", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--schedulers", default="themis,th+cassini,pollux,po+cassini,random,ideal")
    ap.add_argument("--exact", action="store_true")
    args = ap.parse_args()
    topo = load_topology(args.topology)
    t0 = time.perf_counter()
    trace = poisson_trace(args.jobs, topo.total_gpus(), args.load, args.seed)
    print(
        f"trace: {len(trace)} jobs, {topo.name}, {topo.total_gpus()} GPUs ({time.perf_counter() - t0:.1f} s)"
    )

    summaries = []
    for name in args.schedulers.split(","):
        exp = run_experiment(
            trace,
            topo,
            [name],
            args.seed,
            SimSettings(fast_forward=not args.exact, seed=args.seed),
            trace_label="poisson",
        )
        s = exp.summaries[0]
        summaries.append(s)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(
            f"{s.name:11s} {s.wall_s:7.1f} s  events {s.events:8d}  fast-forwarded {s.fast_forwarded_s:9.0f} s  "
            f"mean {s.mean_ms:6.1f} ms  p99 {s.p99_ms:6.1f} ms  JCT {s.mean_jct_s:7.1f} s  RSS {rss:.0f} MiB",
            flush=True,
        )
    for v, sp in speedups(summaries).items():
        print(f"{v} vs {sp['base']}: mean {sp['mean']:.2f}x  p99 {sp['p99']:.2f}x")
    total = time.perf_counter() - t0
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"total {total:.1f} s, peak RSS {rss_mib:.0f} MiB")


if __name__ == "__main__":
    main()
