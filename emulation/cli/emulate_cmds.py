"""`cassini emulate`: a trace placed by each scheduler, run as replicas on the fabric, reported.

Parses flags and calls `emulation.emulate.runner.emulate`; shows progress
(rich) on a terminal; prints the per-scheduler table and where the report
is. Ctrl-C or SIGTERM: the replicas stop, the fabric comes down, the report
of what completed is written (marked partial) and the command exits 130 / 143.
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .common import (
    AUTO_SCALE,
    MAX_ITERATIONS,
    MAX_JOBS,
    Interrupted,
    add_force_argument,
    add_models_argument,
    add_scale_argument,
    add_topology_argument,
    nonnegative_int,
    parse_duration,
    positive_float,
    positive_int_up_to,
)
from .fabric_run_cmds import (
    add_policy_argument,
    add_transport_argument,
    check_recalibrate,
    fabric_policy,
)
from .poll_flags import (
    Deferred,
    StoreWithDeferredHelp,
    add_poll_interval_argument,
    poll_interval_or_default,
)
from .profile_cmds import DEFAULT_ITERATIONS as PROFILE_ITERATIONS
from .profile_cmds import PROFILES_HELP
from .simulate_cmds import SHARING_HELP

if TYPE_CHECKING:
    from emulation.emulate.runner import EmulateSettings

DEFAULT_SCHEDULERS = "themis,th+cassini"


def _scheduler_names() -> str:
    """The registry's schedulers and `given`, named when help is shown (the registry
    imports every scheduler)."""
    from emulation.emulate.plan import GIVEN
    from scheduler.baselines import SCHEDULER_NAMES

    return f"{', '.join(SCHEDULER_NAMES)}, or {GIVEN} (runs --schedule as it is)"


def register(sub: argparse._SubParsersAction) -> None:
    """Add `emulate`."""
    emu = sub.add_parser(
        "emulate",
        help="place a trace with each scheduler, run it as replicas on the fabric, report ECN",
        description="Each scheduler places the trace (the simulator's schedulers), its jobs run "
        "as replicas on the emulated fabric with the scheduler's time-shifts, the switch's ECN "
        "marks and the replicas' iteration times are recorded, and a report (summary.json, "
        "CSVs, plots, report.md, report.html) is written to --out.",
    )
    add_topology_argument(emu)
    emu.add_argument(
        "--trace",
        default="four-jobs",
        help="four-jobs (default) | snapshot2 (the paper's snapshot 2) | snapshot | dynamic | "
        "a trace FILE",
    )
    emu.add_argument(
        "--compress",
        type=positive_float,
        default=1.0,
        help="trace seconds per emulated second: arrivals come this much sooner (default 1)",
    )
    emu.add_argument(
        "--jobs", type=positive_int_up_to(MAX_JOBS), default=60, help="jobs of a generated snapshot"
    )
    emu.add_argument(
        "--schedule",
        metavar="FILE",
        help="a schedule (JSON, as `cassini schedule --json` writes it and `fabric run` takes it): "
        "scheduler 'given' runs it as it is, the others on its placement",
    )
    add_models_argument(emu)
    measured = emu.add_mutually_exclusive_group()
    measured.add_argument("--profiles", metavar="FILE", help=PROFILES_HELP)
    measured.add_argument(
        "--profile-first",
        action="store_true",
        help="profile the trace's models alone on the fabric first (`cassini profile`; "
        "DIR/profiles.json) and plan with those profiles",
    )
    emu.add_argument("--sharing", metavar="FILE", help=SHARING_HELP)
    emu.add_argument(
        "--schedulers",
        default=DEFAULT_SCHEDULERS,
        action=StoreWithDeferredHelp,
        deferred={"names": Deferred(_scheduler_names)},
        help="comma-separated: %(names)s (default %(default)s)",
    )
    emu.add_argument("--target", choices=("softswitch", "bmv2"), default="softswitch")
    emu.add_argument("--device-config", metavar="FILE", help="bmv2: the compiled JSON")
    add_scale_argument(emu, auto=True)
    length = emu.add_mutually_exclusive_group()
    length.add_argument(
        "--iterations",
        type=positive_int_up_to(MAX_ITERATIONS),
        default=40,
        help="iterations per job (default 40)",
    )
    length.add_argument(
        "--duration", default=None, help="stop each scheduler's jobs after this long, e.g. 60s"
    )
    emu.add_argument("--drift", default="5%", help="agents' re-align threshold: off, 5%%, 0.1")
    add_transport_argument(emu)
    add_policy_argument(emu)
    emu.add_argument("--seed", type=nonnegative_int, default=0, help="seed (default 0)")
    add_poll_interval_argument(emu)
    emu.add_argument(
        "--prefix", default=None, help="name prefix of the fabric's namespaces and interfaces"
    )
    emu.add_argument("--out", required=True, metavar="DIR", help="results folder")
    add_force_argument(emu)
    emu.add_argument("--json", action="store_true", help="print summary.json, no progress")
    emu.set_defaults(handler=_emulate)


def settings_from(args: argparse.Namespace) -> EmulateSettings:
    from emulation.emulate.runner import EmulateSettings, scheduler_names
    from emulation.fabric.scaling import DEFAULT_SCALE
    from emulation.jobs.agent import parse_drift_threshold
    from topologies.errors import UserInputError

    check_recalibrate(args.scale, args.recalibrate)
    try:
        drift = parse_drift_threshold(args.drift)
    except ValueError as err:
        raise UserInputError(f"--drift: {err}") from None
    from emulation.housekeeping.prefixes import check_prefix

    if args.prefix is not None:
        check_prefix(args.prefix)
    duration = parse_duration(args.duration, "--duration") if args.duration else None
    from emulation.jobs.launch import read_schedule

    schedule = read_schedule(args.schedule) if args.schedule else None
    settings = EmulateSettings(
        topology=args.topology,
        trace=args.trace,
        schedulers=tuple(args.schedulers.split(",")),
        target=args.target,
        scale=DEFAULT_SCALE if args.scale == AUTO_SCALE else args.scale,
        scale_auto=args.scale == AUTO_SCALE,
        recalibrate=args.recalibrate,
        iterations=10**6 if duration is not None else args.iterations,
        duration_s=duration,
        seed=args.seed,
        jobs=args.jobs,
        models=args.models,
        jobs_model=args.jobs_model,
        drift_fraction=drift,
        device_config=args.device_config,
        prefix=args.prefix,
        compress=args.compress,
        schedule=schedule,
        poll_interval_s=poll_interval_or_default(args.poll_interval),
        transport=args.transport,
        policy=fabric_policy(args.policy, args.transport),
        profiles=args.profiles,
        sharing=args.sharing,
    )
    # checked before anything is built, and recorded as the runner reads them
    return dataclasses.replace(settings, schedulers=tuple(scheduler_names(settings)))


def _emulate(args: argparse.Namespace) -> int:
    from emulation.emulate.progress import ProgressLines, emulate_with_bar, to_stderr
    from emulation.emulate.report_text import console_table
    from emulation.emulate.runner import emulate
    from topologies.outputs import staged_folder

    settings = settings_from(args)
    out = Path(args.out)
    # Into a fresh hidden sibling that replaces --out once the report is written (also
    # a partial one, after Ctrl-C): with --force nothing of an older run is mixed in.
    with staged_folder(out, args.force) as stage:
        if args.profile_first:
            settings = _profile_first(settings, stage, quiet=args.json)
        # progress goes to stderr: a bar on a terminal, else a line every few seconds
        if args.json or not sys.stderr.isatty():
            lines = None if args.json else ProgressLines()
            report, stopped = emulate(settings, stage, lines, say=to_stderr, final_dir=out)
        else:
            report, stopped = emulate_with_bar(settings, stage, out)
    if args.json:
        print((out / "summary.json").read_text(), end="")
    else:
        print("\n".join(console_table(report.summary)))
        html = out / report.paths["report_html"].relative_to(stage)
        print(f"report: {html} (and {report.paths['report_md'].name})")
    if stopped is not None:
        signum = signal.Signals[stopped]
        raise Interrupted(signum, f"{stopped}: fabric down, partial report in {out}")
    failed = report.summary["settings"].get("failed")
    if failed:  # one line: the cause; the switch's last log lines are in the report
        cause = failed.splitlines()[0].removesuffix("; last log lines:")
        print(f"cassini: error: {cause}; fabric down, partial report in {out}", file=sys.stderr)
        return 1
    return 0 if not report.summary["partial"] else 1


def _profile_first(settings: EmulateSettings, stage: Path, quiet: bool) -> EmulateSettings:
    """The trace's models profiled alone, into the results folder; the plan uses them."""
    from emulation.emulate.progress import to_stderr
    from emulation.housekeeping.signals import SignalExit, signals_raise
    from emulation.profile.session import profile_trace

    def say(line: str) -> None:
        if not quiet:
            to_stderr(f"profiling {line}")

    try:
        with signals_raise():  # the profiling fabric comes down on SIGTERM too
            found = profile_trace(settings, stage, PROFILE_ITERATIONS, say)
    except SignalExit as stopped:
        raise Interrupted(stopped.signum, f"{stopped.signal_name} while profiling") from None
    return settings if found is None else dataclasses.replace(settings, profiles=str(found))
