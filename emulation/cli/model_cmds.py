"""`cassini models | compat`: the models' communication profiles, and one link's compatibility.

`cassini models` lists what each built-in (or `--models FILE`) model sends;
it was `cassini profiles`, one letter from `cassini profile` (which measures
profiles on a fabric): the old name still works for a release, with a note.
"""

from __future__ import annotations

import argparse
import json
import sys

from .common import MAX_WORKERS, add_models_argument, positive_float, positive_int_up_to

OLD_MODELS_NAME = "profiles"
MODELS_HELP = "communication profiles of the built-in models (was `cassini profiles`)"


def register(sub: argparse._SubParsersAction) -> None:
    """Add `models` (and its old name, `profiles`) and `compat`."""
    for name in ("models", OLD_MODELS_NAME):
        # the old name gets no help, so the list of commands shows only the new one
        prof = sub.add_parser(name, help=MODELS_HELP) if name == "models" else sub.add_parser(name)
        prof.add_argument(
            "--workers",
            type=positive_int_up_to(MAX_WORKERS),
            default=4,
            help="workers per job (default 4)",
        )
        prof.add_argument(
            "--nic-gbps", type=positive_float, default=50.0, help="NIC line rate (default 50)"
        )
        add_models_argument(prof)
        prof.add_argument("--json", action="store_true", help="machine-readable output")
        prof.set_defaults(handler=_models, old_name=name == OLD_MODELS_NAME)

    compat = sub.add_parser(
        "compat", help="compatibility score and time-shifts of jobs sharing one link"
    )
    source = compat.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--jobs", help="comma-separated models, optionally MODEL:WORKERS (vgg16,resnet50:2)"
    )
    source.add_argument(
        "--jobs-file", metavar="FILE", help="profiles JSON (the `cassini profiles --json` schema)"
    )
    compat.add_argument(
        "--workers",
        type=positive_int_up_to(MAX_WORKERS),
        default=4,
        help="workers per job for --jobs (default 4)",
    )
    compat.add_argument(
        "--capacity-gbps", type=positive_float, default=50.0, help="link capacity (default 50)"
    )
    compat.add_argument(
        "--precision-deg", type=positive_float, default=5.0, help="angle grid (default 5)"
    )
    compat.add_argument("--solver", default="auto", help="exact, fast or auto (default)")
    add_models_argument(compat)
    compat.add_argument(
        "--no-pace",
        action="store_true",
        help="score at the jobs' own iteration times, rounded onto the circle (the paper)",
    )
    compat.add_argument("--json", action="store_true", help="machine-readable output")
    compat.set_defaults(handler=_compat)


def _models(args: argparse.Namespace) -> int:
    if args.old_name:  # one release: the old name works and says the new one
        print(f"cassini: note: `{OLD_MODELS_NAME}` is now `cassini models`", file=sys.stderr)
    from scheduler.workloads.profile_files import profile_to_dict
    from scheduler.workloads.profiles import GPU_BUSY_GOAL, build_profile, load_models

    models = load_models(args.models, args.jobs_model)
    profiles = [
        build_profile(m, args.workers, nic_gbps=args.nic_gbps, models=models)
        for m in sorted(models)
    ]
    if args.json:
        print(json.dumps([profile_to_dict(p) for p in profiles], indent=2))
        return 0
    print(
        f"{'model':<15}{'parallelism':<12}{'workers':>8}{'batch':>7}{'iter_ms':>10}"
        f"{'up_frac':>9}{'gpu_busy':>9}{'peak_gbps':>11}{'phases':>8}"
    )
    for p in profiles:
        busy = "-" if p.gpu_busy is None else f"{p.gpu_busy:.2f}"
        print(
            f"{p.name:<15}{p.parallelism:<12}{p.workers:>8}{p.batch_size:>7}{p.iteration_ms:>10.1f}"
            f"{p.up_fraction():>9.2f}{busy:>9}{p.peak_gbps:>11.1f}{len(p.phases):>8}"
        )
    below = [p.name for p in profiles if p.gpu_busy is not None and p.gpu_busy < GPU_BUSY_GOAL]
    if below:
        print(
            f"below the testbed's {GPU_BUSY_GOAL:.0%} GPU-busy rule at this size: {', '.join(below)}"
        )
    return 0


def _compat(args: argparse.Namespace) -> int:
    from scheduler.cassini.compatibility import check_capacity_gbps
    from scheduler.cassini.plans import LINK_PLANS, plan_link
    from scheduler.workloads.profile_files import load_profiles_file
    from scheduler.workloads.profiles import load_models, profiles_from_list

    check_capacity_gbps(args.capacity_gbps, "--capacity-gbps")
    if args.jobs_file:
        profiles = list(load_profiles_file(args.jobs_file).values())
    else:
        profiles = profiles_from_list(
            args.jobs, args.workers, load_models(args.models, args.jobs_model)
        )
    link = plan_link(
        profiles, args.capacity_gbps, args.precision_deg, args.solver, pace=not args.no_pace
    )
    sol, free, periods = link.solution, link.free_running_score, link.periods_ms
    own_ms = {p.name: p.iteration_ms for p in profiles}
    if args.json:
        print(json.dumps(link.to_json(), indent=2))
        return 0
    approx = " (approximated: iteration times rounded to fit)" if sol.approximated else ""
    print(
        f"compatibility score {link.best.score:.4f} at the best shifts on a {args.capacity_gbps:g} Gbps link, solver {sol.solver}, {sol.elapsed_ms:.1f} ms"
    )
    print(
        f"running unaligned: expected score {free:.4f}; plan: {LINK_PLANS[link.plan]}\nthe plan's score {link.plan_score:.4f} (the shifts below)"
    )
    print(f"unified circle {sol.perimeter_ms:g} ms{approx}, precision {args.precision_deg:g} deg")
    print(
        f"{'job':<18}{'iter_ms':>10}{'paced_ms':>10}{'stretch':>9}{'ratio':>7}"
        f"{'rotation_deg':>14}{'shift_ms':>10}"
    )
    for p in profiles:
        print(
            f"{p.name:<18}{own_ms[p.name]:>10.1f}{periods[p.name]:>10.1f}"
            f"{link.stretch[p.name]:>9.3f}{link.ratios[p.name]:>7}"
            f"{sol.rotations_deg[p.name]:>14.1f}{sol.shifts_ms[p.name]:>10.1f}"
        )
    return 0
