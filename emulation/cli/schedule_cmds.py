"""`cassini schedule`: the placement and time-shifts Algorithm 2 chooses for a trace."""

from __future__ import annotations

import argparse
import json
import sys
import time

from .common import (
    MAX_CANDIDATES,
    MAX_PROCESSES,
    add_models_argument,
    add_topology_argument,
    nonnegative_int,
    positive_float,
    positive_int_up_to,
)
from .profile_cmds import PROFILES_HELP

# The name `schedule --trace` used for the fixed example before it was
# `four-jobs`; elsewhere "snapshot" is a generated trace (kept as an alias).
OLD_EXAMPLE_NAME = "snapshot"


def register(sub: argparse._SubParsersAction) -> None:
    """Add `schedule`."""
    sched = sub.add_parser("schedule", help="choose a placement and time-shifts (Algorithm 2)")
    add_topology_argument(sched)
    sched.add_argument(
        "--trace",
        default="four-jobs",
        help="trace file (CSV/JSON), 'four-jobs' (default: VGG19, VGG16, WideResNet101 "
        "and BERT on 6 GPUs each; 'snapshot' is an old name for it) or 'snapshot2' (the "
        "paper's snapshot 2: VGG19 and VGG16 on 10 GPUs each, ResNet50 on 4)",
    )
    sched.add_argument(
        "--candidates",
        type=positive_int_up_to(MAX_CANDIDATES),
        default=10,
        help="placements to choose among (default 10)",
    )
    sched.add_argument(
        "--precision-deg", type=positive_float, default=5.0, help="angle grid (default 5)"
    )
    sched.add_argument("--solver", default="auto", help="exact, fast or auto (default)")
    sched.add_argument(
        "--aggregate",
        default="total",
        help="rank candidates by total oversubscription plus pacing idle (default), "
        "or the mean (paper), min or p10 of link scores",
    )
    sched.add_argument(
        "--cycles",
        default="consistent",
        help="affinity-graph cycles: 'consistent' keeps cycles whose shifts agree (default), 'paper' discards any",
    )
    sched.add_argument(
        "--seed", type=nonnegative_int, default=0, help="seed of the candidate generator"
    )
    add_models_argument(sched)
    sched.add_argument("--profiles", metavar="FILE", help=PROFILES_HELP)
    sched.add_argument(
        "--no-pace",
        action="store_true",
        help="score at the jobs' own iteration times, rounded onto each circle (the paper)",
    )
    sched.add_argument(
        "--processes",
        type=positive_int_up_to(MAX_PROCESSES),
        default=1,
        help="evaluate candidates in N processes",
    )
    sched.add_argument("--json", action="store_true", help="machine-readable output")
    sched.set_defaults(handler=_schedule)


def _schedule(args: argparse.Namespace) -> int:
    from scheduler.cassini.schedule import schedule_trace
    from scheduler.workloads.profile_files import with_measured_profiles
    from scheduler.workloads.profiles import load_models
    from scheduler.workloads.traces import resolve_trace
    from topologies.library import load_topology

    started = time.perf_counter()
    topo = load_topology(args.topology)
    models = with_measured_profiles(load_models(args.models, args.jobs_model), args.profiles)
    spec = args.trace
    if spec == OLD_EXAMPLE_NAME:
        print(
            "cassini: note: 'schedule --trace snapshot' is now '--trace four-jobs' (the default); "
            "elsewhere 'snapshot' means --jobs random jobs at t = 0",
            file=sys.stderr,
        )
        spec = "four-jobs"
    # Only the fixed examples are generated here: a generated trace has arrivals over time.
    trace, _ = resolve_trace(
        spec, topo.total_gpus(), models=models, kinds=("four-jobs", "snapshot2")
    )
    result = schedule_trace(
        trace,
        topo,
        spec,
        models,
        candidates=args.candidates,
        seed=args.seed,
        precision_deg=args.precision_deg,
        solver=args.solver,
        aggregate=args.aggregate,
        processes=args.processes,
        cycles=args.cycles,
        pace=not args.no_pace,
    )
    decision, jobs, skipped = result.decision, result.jobs, result.skipped
    elapsed = (time.perf_counter() - started) * 1e3
    best = decision.best
    if args.json:
        print(json.dumps(result.to_json(elapsed), indent=2))
        return 0
    print(
        f"topology {topo.name}: {len(jobs)} jobs on {result.gpus_used} of {result.gpus} GPUs, "
        f"{result.candidates} candidates, {elapsed:.1f} ms"
    )
    if skipped:
        print(f"not placed (cluster full): {', '.join(skipped)}")
    fallback = (
        "  (every candidate was discarded; best score used anyway)" if decision.fallback else ""
    )
    print(
        f"chosen: candidate {best.index}, score {best.score:.4f}, cost {-best.value:.4f}, "
        f"shift rule {best.rule}{fallback}"
    )
    print(
        f"\n{'job':<18}{'model':<15}{'workers':>8}  {'shift_ms':>9}  {'paced_ms':>9}"
        f"  {'stretch':>7}  {'circle':>14}  servers"
    )
    for j in jobs:
        servers = ",".join(best.placement[j.name])
        paced = best.periods_ms.get(j.name)
        paced_text = f"{paced:>9.1f}" if paced is not None else f"{'free':>9}"
        circle = ""
        if paced is not None and j.name in best.ratios:
            circle = f"{best.ratios[j.name]} x {best.circles_ms[j.name]:.1f}"
        stretch = f"{paced / j.profile.iteration_ms:.3f}" if paced is not None else ""
        print(
            f"{j.name:<18}{j.profile.model:<15}{j.workers:>8}  {best.shifts_ms[j.name]:>9.1f}  {paced_text}"
            f"  {stretch:>7}  {circle:>14}  {servers}"
        )
    print("\nshared links of the chosen placement:" + ("" if best.link_scores else " none"))
    for link, score in best.link_scores.items():
        print(f"  {link:<16} {score:.4f}")
    print(f"\n{'candidate':>9}  {'score':>7}  {'cost':>7}  {'shared':>6}  {'rule':<19} status")
    for c in decision.candidates:
        status = (
            f"discarded: {c.discarded}"
            if c.discarded
            else ("chosen" if c.index == best.index else "ok")
        )
        print(
            f"{c.index:>9}  {c.score:>7.4f}  {-c.value:>7.4f}  {len(c.link_scores):>6}  {c.rule:<19} {status}"
        )
    return 0
