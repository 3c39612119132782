"""`cassini trace generate` and `cassini simulate`: replay the paper's evaluation in software."""

from __future__ import annotations

import argparse
import functools
import json
import sys

from .common import (
    MAX_CANDIDATES,
    MAX_JOBS,
    add_force_argument,
    add_jobs_model_argument,
    add_topology_argument,
    interruptible,
    nonnegative_float,
    nonnegative_int,
    positive_float,
    positive_int_up_to,
)
from .profile_cmds import PROFILES_HELP

DEFAULT_SCHEDULERS = "themis,th+cassini,pollux,po+cassini,random,ideal"
SHARING_HELP = (
    "sharing model JSON (`cassini profile --sharing-out`): a link n jobs share offers "
    "capacity x the measured factor(n) instead of ideal max-min"
)


def register(sub: argparse._SubParsersAction) -> None:
    """Add `trace generate` and `simulate`."""
    trace = sub.add_parser("trace", help="generate workload traces (CSV/JSON)")
    trace_sub = trace.add_subparsers(dest="trace_command", required=True, metavar="ACTION")
    gen = trace_sub.add_parser("generate", help="write a Poisson, dynamic or snapshot trace")
    gen.add_argument(
        "--kind", default="poisson", help="poisson | dynamic | snapshot (default poisson)"
    )
    _trace_options(gen)
    add_topology_argument(gen, purpose="cluster whose GPU count sets the load")
    gen.add_argument("--out", "-o", required=True, help="output file (.csv or .json)")
    add_force_argument(gen)
    gen.add_argument("--json", action="store_true", help="print a machine-readable summary")
    gen.set_defaults(handler=_generate)

    sim = sub.add_parser("simulate", help="run schedulers over a trace in the fluid simulator")
    add_topology_argument(sim)
    sim.add_argument(
        "--trace",
        default="poisson",
        help="poisson | dynamic | snapshot (--jobs at t = 0) | four-jobs | snapshot2 | a trace FILE "
        "(default poisson)",
    )
    _trace_options(sim)
    sim.add_argument(
        "--schedulers",
        default=DEFAULT_SCHEDULERS,
        help=f"comma-separated (default {DEFAULT_SCHEDULERS})",
    )
    sim.add_argument(
        "--policy",
        default="none",
        help="the network side every scheduler runs under: none, crux, echelon "
        "(priority classes; scheduler/policies) (default none)",
    )
    sim.add_argument(
        "--candidates",
        type=positive_int_up_to(MAX_CANDIDATES),
        default=10,
        help="placements per decision for Cassini (default 10)",
    )
    sim.add_argument("--profiles", metavar="FILE", help=PROFILES_HELP)
    sim.add_argument("--sharing", metavar="FILE", help=SHARING_HELP)
    sim.add_argument("--exact", action="store_true", help="no steady-state fast-forward (slower)")
    sim.add_argument(
        "--drift",
        type=jitter_sigma,
        default=0.0,
        help=f"compute-time jitter sigma in [0, {MAX_DRIFT_SIGMA:g}] (a fraction of each "
        "compute phase), enables the 5%% agent rule",
    )
    sim.add_argument(
        "--out",
        "-o",
        required=True,
        help="results folder, written whole or not at all (created; refused if it exists)",
    )
    add_force_argument(sim)
    sim.add_argument(
        "--json", action="store_true", help="print summary.json to stdout, no progress bar"
    )
    sim.set_defaults(handler=_simulate)


# (our choice) A jitter as large as the compute phase itself: past it most draws are
# clipped to nothing or double the phase, and 1e300 ran the simulator into its horizon
# ("simulation passed 864000.0 s without finishing") after the run had started.
MAX_DRIFT_SIGMA = 1.0


def jitter_sigma(text: str) -> float:
    """--drift: a sigma in [0, MAX_DRIFT_SIGMA], or argparse's one line naming it."""
    value = nonnegative_float(text)
    if value > MAX_DRIFT_SIGMA:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_DRIFT_SIGMA:g}, got {text}")
    return value


def _trace_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--load",
        type=positive_float,
        default=0.9,
        help="Poisson load: average fraction of GPUs busy (default 0.9)",
    )
    p.add_argument(
        "--jobs", type=positive_int_up_to(MAX_JOBS), default=60, help="number of jobs (default 60)"
    )
    p.add_argument("--seed", type=nonnegative_int, default=0, help="random seed (default 0)")
    p.add_argument(
        "--models",
        metavar="FILE",
        help="YAML adding or replacing models (measured profiles); traces draw from them too",
    )
    add_jobs_model_argument(p)


def _generate(args: argparse.Namespace) -> int:
    from scheduler.workloads.profiles import load_models
    from scheduler.workloads.traces import resolve_trace, write_trace
    from topologies.library import load_topology
    from topologies.outputs import check_output

    topo = load_topology(args.topology)
    models = load_models(args.models)
    jobs, label = resolve_trace(
        args.kind, topo.total_gpus(), args.jobs, args.load, args.seed, models, flag="--kind"
    )
    out = write_trace(jobs, check_output(args.out, "file", args.force))
    info = {
        "file": str(out),
        "jobs": len(jobs),
        "trace": label,
        "topology": topo.name,
        "gpus": topo.total_gpus(),
    }
    if args.json:
        print(json.dumps(info))
    else:
        print(f"wrote {len(jobs)} jobs to {out} ({label}, {topo.name}, {topo.total_gpus()} GPUs)")
    return 0


def _simulate(args: argparse.Namespace) -> int:
    from scheduler.baselines import parse_scheduler_names
    from scheduler.policies import parse_policy
    from scheduler.simulator import SimSettings
    from scheduler.simulator.experiment import run_experiment
    from scheduler.simulator.report import format_ratio, write_outputs
    from scheduler.workloads.profile_files import with_measured_profiles
    from scheduler.workloads.profiles import load_models
    from scheduler.workloads.sharing_model import load_sharing_model
    from scheduler.workloads.traces import TRACE_KINDS, check_fits, resolve_trace
    from topologies.library import load_topology
    from topologies.outputs import check_output, staged_folder, write_or_rescue

    names = parse_scheduler_names(args.schedulers)
    policy = parse_policy(args.policy)
    topo = load_topology(args.topology)
    models = with_measured_profiles(load_models(args.models, args.jobs_model), args.profiles)
    sharing = load_sharing_model(args.sharing)
    jobs, label = resolve_trace(
        args.trace, topo.total_gpus(), args.jobs, args.load, args.seed, models
    )
    check_fits(jobs, topo.total_gpus(), label)
    settings = SimSettings(fast_forward=not args.exact, drift_sigma=args.drift, seed=args.seed)
    run = functools.partial(
        run_experiment,
        jobs,
        topo,
        names,
        args.seed,
        settings,
        args.candidates,
        label,
        models=models,
        models_label=args.models or "built-in",
        trace_kind=args.trace if args.trace in TRACE_KINDS else "file",
        policy=policy,
        sharing=sharing,
    )
    out = check_output(args.out, "folder", args.force)  # a bad --out is one line, first
    nothing = f"{out} not written" + (" (the old folder is kept)" if out.exists() else "")
    with interruptible(nothing), staged_folder(out, args.force) as stage:
        if sys.stderr.isatty() and not args.json:
            from rich.progress import Progress

            with Progress(transient=False) as bar:
                tasks = {n: bar.add_task(n, total=len(jobs)) for n in names}

                def hook(name: str, done: int, total: int) -> None:
                    bar.update(tasks[name], completed=done)

                exp = run(progress=hook)
                for n in names:
                    bar.update(tasks[n], completed=len(jobs))
        else:
            exp = run()
        # a full disk keeps the results in the temporary folder, said in one line
        staged = write_or_rescue(lambda folder: write_outputs(exp, folder), stage, out)
    paths = {name: out / path.relative_to(stage) for name, path in staged.items()}
    if args.json:
        print(paths["summary"].read_text(), end="")
        return 0
    by = {s.name: s for s in exp.summaries}
    print(
        f"{'scheduler':14s} {'mean ms':>8s} {'p99 ms':>8s} {'JCT s':>8s} {'makespan s':>10s} "
        f"{'comm ovh':>8s} {'oversub link-s':>15s} {'marked Gbit':>12s}"
    )
    for n in names:
        x = by[n]
        print(
            f"{n:14s} {x.mean_ms:8.1f} {x.p99_ms:8.1f} {x.mean_jct_s:8.1f} {x.makespan_s:10.1f} "
            f"{x.comm_overhead:8.1%} {x.oversub_link_s:15.1f} {x.marked_gbit:12.1f}"
        )
    for variant, sp in exp.speedups.items():
        print(
            f"{variant} vs {sp['base']}: mean {sp['mean']:.2f}x, p99 {sp['p99']:.2f}x, "
            f"p99 slowdown {sp['p99_slowdown']:.2f}x, congestion {format_ratio(sp['congestion'])}, "
            f"marked {format_ratio(sp['marked'])}"
        )
    print(f"report: {paths['report']}")
    return 0
