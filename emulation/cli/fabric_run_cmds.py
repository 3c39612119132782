"""`cassini fabric run`: a schedule's jobs as replicas on the emulated fabric, measured.

Parses flags and calls the library: `emulation.jobs.launch` checks the
schedule file against the topology and profiles (before anything is
built), `emulation.fabric.emulated.EmulatedFabric` brings the fabric up,
`emulation.jobs.supervisor.run_schedule` runs the replicas while polling the
switch's counters, `write_run` lays out the folder (the output rule of
`topologies.outputs`: written whole or not at all). Ctrl-C or SIGTERM
during the run stops the replicas, writes the folder with what was
recorded so far (summary.json says `interrupted`) and exits 130 / 143.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .common import (
    AUTO_SCALE,
    MAX_ITERATIONS,
    Interrupted,
    add_force_argument,
    add_models_argument,
    add_scale_argument,
    add_topology_argument,
    parse_duration,
    positive_int_up_to,
)
from .poll_flags import add_poll_interval_argument, poll_interval_or_default
from .run_flags import (
    HOST_RATE_POLICIES,
    add_policy_argument,
    add_transport_argument,
    check_recalibrate,
    fabric_policy,
    transport_name,
)

__all__ = [
    "HOST_RATE_POLICIES",
    "add_policy_argument",
    "add_transport_argument",
    "check_recalibrate",
    "fabric_policy",
    "register",
    "transport_name",
]

if TYPE_CHECKING:
    from collections.abc import Sequence

    from emulation.jobs.launch import JobPlan
    from emulation.jobs.run_result import Progress, RunResult
    from topologies.model import Topology


def register(fabric_sub: argparse._SubParsersAction) -> None:
    """Add `fabric run` under the `fabric` subcommand."""
    run = fabric_sub.add_parser(
        "run",
        help="run a schedule's jobs as replicas on the emulated fabric, record ECN and times",
        description="Bring the fabric up, start one replica per worker of the schedule's jobs "
        "(placement, shifts_ms, periods_ms as `cassini schedule --json` prints them), poll "
        "the switch's counters, tear down; results go to --out.",
    )
    run.add_argument("--schedule", required=True, metavar="FILE", help="schedule JSON")
    add_topology_argument(run)
    run.add_argument(
        "--iterations",
        type=positive_int_up_to(MAX_ITERATIONS),
        default=40,
        help="iterations per job (default 40)",
    )
    add_scale_argument(run, auto=True)
    add_transport_argument(run)
    add_policy_argument(run)
    add_models_argument(run)
    run.add_argument(
        "--jobs-file", metavar="FILE", help="profiles JSON (`cassini models --json` schema)"
    )
    run.add_argument(
        "--drift", default="5%", help="agents' re-align threshold: off, 5%% (default), 0.1 ..."
    )
    run.add_argument("--deadline", default=None, help="stop the jobs after this long, e.g. 5m")
    add_poll_interval_argument(run)
    run.add_argument("--out", required=True, metavar="DIR", help="results folder")
    add_force_argument(run)
    run.add_argument("--json", action="store_true", help="print summary.json when done")
    run.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from emulation.fabric.emulated import EmulatedFabric
    from emulation.fabric.options import FabricOptions
    from emulation.housekeeping.signals import SignalExit, signals_raise
    from emulation.jobs.agent import parse_drift_threshold
    from emulation.jobs.launch import parse_schedule, plan_jobs, read_schedule
    from emulation.jobs.run_settings import RunSettings
    from emulation.jobs.supervisor import run_schedule
    from scheduler.workloads.profile_files import load_profiles_file
    from scheduler.workloads.profiles import load_models
    from topologies.errors import UserInputError
    from topologies.library import load_topology
    from topologies.outputs import check_output, staged_folder, write_or_rescue

    check_recalibrate(args.scale, args.recalibrate)
    topo = load_topology(args.topology)
    models = load_models(args.models, args.jobs_model)
    profiles = load_profiles_file(args.jobs_file) if args.jobs_file else None
    schedule = parse_schedule(read_schedule(args.schedule), where=args.schedule)
    jobs = plan_jobs(schedule, topo, profiles, models, where=args.schedule)
    try:
        drift = parse_drift_threshold(args.drift)
    except ValueError as err:
        raise UserInputError(f"--drift: {err}") from None
    settings = RunSettings(
        iterations=args.iterations,
        deadline_s=parse_duration(args.deadline, "--deadline") if args.deadline else None,
        drift_fraction=drift,
        poll_interval_s=poll_interval_or_default(args.poll_interval),
        transport=args.transport,
        policy=fabric_policy(args.policy, args.transport),
    )
    check_output(args.out, "folder", args.force)  # refused before the fabric is built
    scale, scale_choice = args.scale, None
    if scale == AUTO_SCALE:  # before anything is built: the jobs' load is known
        scale, scale_choice = _auto_scale(topo, jobs, args.recalibrate)
    result = None
    try:
        with signals_raise(), staged_folder(args.out, args.force) as stage:
            with EmulatedFabric(topo, FabricOptions(scale=scale)) as fabric:
                print(f"fabric {fabric.prefix} up: {len(jobs)} jobs, "
                      f"{sum(j.workers for j in jobs)} replicas", file=sys.stderr, flush=True)  # fmt: skip
                result = run_schedule(fabric, jobs, settings, stage, progress=_print_progress)
            extra = {} if scale_choice is None else {"scale_choice": scale_choice}
            # a full disk keeps the run's results in the temporary folder, said in one line
            write_or_rescue(lambda folder: _write(result, folder, extra), stage, Path(args.out))
    except SignalExit as stopped:
        raise Interrupted(
            stopped.signum, f"{stopped.signal_name}: {args.out} not written"
        ) from None
    if args.json:
        print(json.dumps(result.summary(), indent=1))
    else:
        _print_result(result, args.out)
    if result.interrupted is not None:
        done = len(result.records)
        signum = 15 if result.interrupted == "SIGTERM" else 2
        raise Interrupted(
            signum,
            f"{result.interrupted} during the run: replicas stopped, fabric down, {args.out} "
            f"written with the {done} iterations recorded so far",
        )
    if result.error is not None:
        print(f"cassini: error: {result.error}", file=sys.stderr)
        return 1
    return 0


def _auto_scale(
    topo: Topology, jobs: Sequence[JobPlan], recalibrate: bool
) -> tuple[float, dict[str, Any]]:
    """The S `--scale auto` chooses for these jobs, said on stderr, and why."""
    from emulation.capacity.calibration import choose_scale
    from emulation.capacity.model import load_of
    from topologies.errors import UserInputError

    load = load_of(topo, [(j.servers, j.profile) for j in jobs])
    choice, record = choose_scale(load, recalibrate, lambda line: print(line, file=sys.stderr))
    if choice.scale is None:
        raise UserInputError(f"--scale auto: {choice.reason}")
    print(f"--scale auto: {choice.reason}", file=sys.stderr, flush=True)
    return choice.scale, record


def _write(result: RunResult, folder: Path, extra: dict[str, Any]) -> None:
    """The run's folder (`write_run`), with `extra` added to summary.json."""
    from emulation.jobs.run_folder import write_run

    write_run(result, folder)
    if extra:
        path = folder / "summary.json"
        path.write_text(json.dumps(json.loads(path.read_text()) | extra, indent=1) + "\n")


def _print_progress(p: Progress) -> None:
    print(
        f"t={p.elapsed_s:6.1f}s  iterations {p.records}/{p.expected}  ecn_marked={p.ecn_marked}",
        file=sys.stderr,
        flush=True,
    )


def _print_result(result: RunResult, out: str) -> None:
    print(f"{'job':<16}{'model':<14}{'workers':>8}{'iters':>7}{'mean_ms':>10}{'p99_ms':>10}"
          f"{'profile_ms':>11}{'ce_marks':>10}{'adjust':>8}")  # fmt: skip
    for s in result.summaries:
        mean = "-" if s.mean_iteration_ms is None else f"{s.mean_iteration_ms:.1f}"
        p99 = "-" if s.p99_iteration_ms is None else f"{s.p99_iteration_ms:.1f}"
        ce = "-" if s.ce_marks is None else str(s.ce_marks)
        print(f"{s.name:<16}{s.model:<14}{s.workers:>8}{s.iterations:>7}{mean:>10}{p99:>10}"
              f"{s.profile_iteration_ms:>11.1f}{ce:>10}{s.adjustments:>8}")  # fmt: skip
    host = "-" if result.host_ce_marks is None else str(result.host_ce_marks)
    fid = result.fidelity
    switch_cpu = fid.get("switch_cpu_cores")
    switch_text = "unknown (the switch died)" if switch_cpu is None else f"{switch_cpu} cores"
    print(f"switch ecn_marked {result.switch_ecn_marked}, host CE marks {host}; "
          f"{result.duration_s:.1f} s; switch CPU {switch_text}, "
          f"replicas {fid.get('replicas_cpu_cores')} cores, machine {fid.get('machine_cpu')}")  # fmt: skip
    print(f"wrote {out}/ (iterations.csv, summary.json, ecn.csv, ecn-links.csv, schedule.json, "
          "profiles.json, emulation-profile.txt, replicas/)")  # fmt: skip
