"""Does Cassini's predicted cost rank placements the way the simulator does?

Run by hand: `.venv/bin/python benchmarks/ranking_fidelity.py [--seeds 1-8]
[--candidates 10] [--models FILE] [--verbose]`. In the dynamic trace, DLRM
and ResNet50 arrive into a full cluster and Themis offers up to
`--candidates` of the 12 placements it rates equal. For each this runs the
simulation with that placement (and the time-shifts Cassini would give it;
so candidate 0, Themis's own pick, runs as Cassini would run it), then
compares Cassini's predicted cost (its ranking value: oversubscription
summed over shared links plus pacing idle) with the congestion the simulator
measures. Per seed it prints, for both congestion measures (oversubscribed
time, and the excess traffic Cassini's score models), the rank correlation
(Spearman) and the measure for Themis's own pick (candidate 0), Cassini's
choice and the best placement on offer: Themis's over the best is the
largest ratio any ranking of these placements could reach.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np
from seed_sweep import seed_list

from scheduler.baselines.augmented import CassiniAugmented
from scheduler.baselines.base import Allocation, ClusterView, ProfileBook
from scheduler.baselines.registry import make_scheduler
from scheduler.simulator import SimSettings, simulate
from scheduler.simulator.experiment import summarise
from scheduler.workloads.profiles import load_models
from scheduler.workloads.traces import dynamic_trace
from scheduler.workloads.traffic import JobRouter
from topologies.library import load_topology

NEWCOMER = "new-dlrm"


@dataclass
class RunCandidate:
    """Th+Cassini, except that the newcomers get candidate `index`, not the best."""

    inner: CassiniAugmented
    index: int
    predicted: list[float]
    chosen: list[int]
    dedicated: bool = False

    @property
    def name(self) -> str:
        return f"candidate-{self.index}"

    @property
    def migration_s(self) -> float:
        return self.inner.migration_s

    def next_tick(self, now_s: float, view: ClusterView) -> float:
        return self.inner.next_tick(now_s, view)

    def decide(self, view: ClusterView) -> Allocation:
        alloc, decision = self.inner.rank(view)
        if decision is None:
            return alloc
        arriving = NEWCOMER in alloc.placement and all(j.name != NEWCOMER for j in view.running())
        if not arriving:
            return self.inner.allocation(alloc, decision.best)
        self.predicted[:] = [-c.value for c in decision.candidates]
        self.chosen[:] = [decision.best.index]
        chosen = decision.candidates[min(self.index, len(decision.candidates) - 1)]
        return self.inner.allocation(alloc, chosen)


def ranks(values: list[float]) -> np.ndarray:
    return np.argsort(np.argsort(np.asarray(values), kind="stable"), kind="stable")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="1-8", type=seed_list)
    ap.add_argument("--candidates", type=int, default=10)
    ap.add_argument("--models", metavar="FILE", help="YAML adding or replacing models")
    ap.add_argument("--verbose", action="store_true", help="print every candidate")
    args = ap.parse_args()
    topo = load_topology("cassini-testbed")
    router = JobRouter(topo)
    models = load_models(args.models)
    book = ProfileBook(models, nic_gbps=topo.nic_gbps())
    for seed in args.seeds:
        trace = dynamic_trace(topo.total_gpus(), seed, models=models)
        predicted: list[float] = []
        chosen: list[int] = []
        measured: dict[str, list[float]] = {"oversubscribed link-s": [], "excess Gbit": []}
        index = 0
        while index == 0 or index < len(predicted):
            inner = make_scheduler("th+cassini", topo, seed, args.candidates, router, book=book)
            assert isinstance(inner, CassiniAugmented)
            sched = RunCandidate(inner, index, predicted, chosen)
            summary = summarise(
                simulate(trace, topo, sched, SimSettings(seed=seed), router, book=book)
            )
            measured["oversubscribed link-s"].append(summary.oversub_link_s)
            measured["excess Gbit"].append(summary.excess_gbit)
            index += 1
        pick = chosen[0]
        print(f"seed {seed}: {len(predicted)} placements, Cassini chose candidate {pick}")
        for label, values in measured.items():
            rho = float(np.corrcoef(ranks(predicted), ranks(values))[0, 1])
            themis, ours, best = values[0], values[pick], min(values)
            print(
                f"  {label:22s} rank correlation {rho:.2f}; Themis's pick {themis:7.1f}, "
                f"Cassini's {ours:7.1f}, best on offer {best:7.1f}: "
                f"ratio {themis / ours:.2f}x, at most {themis / best:.2f}x"
            )
        if args.verbose:
            for i, p in enumerate(predicted):
                cells = "  ".join(f"{label} {v[i]:7.1f}" for label, v in measured.items())
                print(f"    candidate {i}: predicted cost {p:6.3f}  {cells}")


if __name__ == "__main__":
    main()
