"""Which busy clusters let Cassini place the DLRM + ResNet50 newcomers well?

Run by hand: `.venv/bin/python benchmarks/dynamic_backgrounds.py [--seed 1]
[--top 15] [--models FILE]` (`--models`: other profiles, as in `cassini
simulate`). The dynamic trace fills the default testbed with three 6-GPU
background jobs before DLRM and ResNet50 (3 GPUs each) arrive. This tries
every multiset of three background models from the 12 besides DLRM (364 of
them, about 0.3 s each), simulates Themis and Th+Cassini, and prints the
backgrounds with the largest congestion ratio (Themis's oversubscribed
link-seconds over Th+Cassini's), with DLRM's marked-traffic ratio, and the
distribution over all of them.
"""

from __future__ import annotations

import argparse
import itertools

import numpy as np

from scheduler.simulator import SimSettings
from scheduler.simulator.experiment import run_experiment, speedups
from scheduler.workloads.profiles import load_models, model_names
from scheduler.workloads.traces import dynamic_trace
from topologies.library import load_topology


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--models", metavar="FILE", help="YAML adding or replacing models")
    args = ap.parse_args()
    topo = load_topology("cassini-testbed")
    models = load_models(args.models)
    backgrounds = list(
        itertools.combinations_with_replacement([m for m in model_names(models) if m != "dlrm"], 3)
    )
    rows = []
    for background in backgrounds:
        trace = dynamic_trace(
            topo.total_gpus(), args.seed, background_models=background, models=models
        )
        exp = run_experiment(
            trace,
            topo,
            ["themis", "th+cassini"],
            args.seed,
            SimSettings(seed=args.seed),
            models=models,
            models_label=args.models or "built-in",
        )
        themis, cassini = exp.summaries
        dlrm = themis.per_model_marked_gbit["dlrm"] / max(
            cassini.per_model_marked_gbit["dlrm"], 1e-9
        )
        sp = speedups(exp.summaries)["th+cassini"]
        rows.append((sp["congestion"], dlrm, sp["mean"], ",".join(background)))
    rows.sort(reverse=True)
    print(f"{'background':36s} {'congestion':>10s} {'DLRM marks':>10s} {'mean':>6s}")
    for cong, dlrm, mean, name in rows[: args.top]:
        print(f"{name:36s} {cong:9.2f}x {dlrm:9.2f}x {mean:5.2f}x")
    cong_all = np.array([r[0] for r in rows])
    dlrm_all = np.array([r[1] for r in rows])
    print(
        f"\n{len(rows)} backgrounds: congestion ratio median {np.median(cong_all):.2f}x, "
        f"max {cong_all.max():.2f}x, >= 5x in {int((cong_all >= 5).sum())}; "
        f"DLRM marked-traffic ratio median {np.median(dlrm_all):.2f}x, max {dlrm_all.max():.2f}x, "
        f">= 5x in {int((dlrm_all >= 5).sum())}"
    )


if __name__ == "__main__":
    main()
