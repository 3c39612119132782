"""`cassini capacity`: the largest scale S this machine emulates a topology and its jobs at.

Parses flags and calls `emulation.capacity.model` (the cost model, pure) with
this machine's constants (`emulation.capacity.calibration`: cached, or
measured first as root). Nothing is built unless a calibration is needed.
Without `--trace` the load is every server running one replica
(`emulation.capacity.model.fill_jobs`); with one, the schedulers place it and the
heaviest placement counts, as `emulate --scale auto` counts it. Which
calibration was used and when it was taken is said on stderr (`--json`:
`cache`, `taken_at`); a calibration taken under load is refused, not cached.
"""

from __future__ import annotations

import argparse
import json
import sys

from .common import add_models_argument, add_topology_argument, positive_float


def register(sub: argparse._SubParsersAction) -> None:
    """Add `capacity`."""
    cap = sub.add_parser(
        "capacity",
        help="the largest scale S this machine emulates a topology and its jobs at (no run)",
        description="Predict, from this machine's calibration (the software switch's CPU per "
        "frame and the replicas' CPU per emulated Gbit/s), the largest S at which the "
        "fidelity monitor's CPU limits hold, and the CPU predicted at it.",
    )
    add_topology_argument(cap)
    cap.add_argument(
        "--trace",
        default=None,
        help="four-jobs | snapshot2 | snapshot | dynamic | a trace FILE (default: every server "
        "one replica)",
    )
    cap.add_argument(
        "--schedulers",
        default="themis,th+cassini",
        help="who places --trace; the heaviest placement counts (default themis,th+cassini)",
    )
    add_models_argument(cap)
    cap.add_argument(
        "--headroom",
        type=positive_float,
        default=None,
        help="fraction of each fidelity limit the prediction may use (default 0.8)",
    )
    cap.add_argument(
        "--recalibrate", action="store_true", help="measure this machine's cost again (root)"
    )
    cap.add_argument("--json", action="store_true", help="print the choice as JSON")
    cap.set_defaults(handler=_capacity)


def _capacity(args: argparse.Namespace) -> int:
    from emulation.capacity.calibration import choose_scale
    from emulation.capacity.model import HEADROOM, fill_jobs, load_of, plan_load
    from emulation.emulate.runner import EmulateSettings, make_plan
    from scheduler.workloads.profiles import load_models
    from topologies.errors import UserInputError
    from topologies.library import load_topology

    headroom = HEADROOM if args.headroom is None else args.headroom
    if not 0 < headroom <= 1:
        raise UserInputError(f"--headroom: expected a fraction in (0, 1], got {headroom:g}")
    topo = load_topology(args.topology)
    models = load_models(args.models, args.jobs_model)
    if args.trace is None:
        load = load_of(topo, fill_jobs(topo, models))
        what = f"every server running a replica ({len(topo.servers)})"
    else:
        settings = EmulateSettings(
            topology=args.topology,
            trace=args.trace,
            schedulers=tuple(args.schedulers.split(",")),
            models=args.models,
            iterations=1,
        )
        plan = make_plan(settings, topo)
        load = plan_load([d for p in plan.plans for d in p.decisions], topo, models)
        what = f"{plan.label}, placed by {', '.join(p.scheduler for p in plan.plans)}"
    choice, record = choose_scale(load, args.recalibrate, _to_stderr, headroom)
    if args.json:
        print(json.dumps({"topology": args.topology, "load": what} | record, indent=1))
    else:
        print(f"{args.topology}, {what}: {choice.reason}")
    return 0 if choice.scale is not None else 1


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
