"""`cassini profile`: each model alone on the emulated fabric, its measured profile written.

Parses flags and calls `emulation.profile.session.profile_on_fabric` (each
model alone for a few iterations, its phases read from the switch's 10 ms
samples) and `write_profiles`; the file is what `--profiles` of `simulate`,
`schedule` and `emulate` and `--jobs-file` of `fabric run` read.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from .common import (
    MAX_ITERATIONS,
    MAX_WORKERS,
    Interrupted,
    add_force_argument,
    add_jobs_model_argument,
    add_scale_argument,
    add_topology_argument,
    positive_int_up_to,
)
from .fabric_run_cmds import add_transport_argument

if TYPE_CHECKING:
    from emulation.fabric.emulated import EmulatedFabric
    from emulation.profile.measure import MeasuredProfile
    from emulation.profile.sharing import SharingRun
    from scheduler.workloads.profiles import ModelSpec

PROFILES_HELP = (
    "profiles JSON (`cassini profile --out`): measured profiles replace the derived ones "
    "of their model and worker count"
)
# (our choice) 40: a p95 of 38 intervals, ~10 s a model of 200 ms; 18 intervals let one
# starved burst set the grid period (benchmarks README, measured profiles)
DEFAULT_ITERATIONS = 40


def register(sub: argparse._SubParsersAction) -> None:
    """Add `profile`."""
    prof = sub.add_parser(
        "profile",
        help="run each model alone on the emulated fabric and write its measured profile",
        description="Each model runs alone (unpaced) on the fabric for --iterations; its "
        "iteration time and Up/Down phases are measured from the switch's 10 ms samples and "
        "written to --out (the profiles JSON that --profiles and --jobs-file read).",
    )
    prof.add_argument(
        "--models", required=True, help="comma-separated models to profile, e.g. vgg19,resnet50"
    )
    prof.add_argument(
        "--workers", type=positive_int_up_to(MAX_WORKERS), default=2, help="workers (default 2)"
    )
    prof.add_argument(
        "--iterations",
        type=positive_int_up_to(MAX_ITERATIONS),
        default=DEFAULT_ITERATIONS,
        help=f"iterations per model (default {DEFAULT_ITERATIONS}; the first is left out)",
    )
    add_topology_argument(prof)
    add_scale_argument(prof)
    add_transport_argument(prof)
    prof.add_argument("--models-file", metavar="FILE", help="YAML adding or replacing models")
    add_jobs_model_argument(prof)
    prof.add_argument("--runs", metavar="DIR", help="keep each model's run folder here")
    prof.add_argument(
        "--sharing",
        metavar="K,K",
        help="also run K jobs of the (one) model, 2 workers each, through one ToR uplink "
        "(K in 2-4, e.g. 2,3,4) and write the sharing model to --sharing-out",
    )
    prof.add_argument("--sharing-out", metavar="FILE", help="the sharing model JSON")
    prof.add_argument("--out", required=True, metavar="FILE", help="the profiles JSON to write")
    add_force_argument(prof)
    prof.add_argument("--json", action="store_true", help="print the profiles JSON")
    prof.set_defaults(handler=_profile)


def parse_models(text: str, specs: Mapping[str, ModelSpec], workers: int) -> list[str]:
    """The comma-separated models, each checked: known, and measurable (data parallel, two
    workers or more: one Up phase per iteration is what `emulation.profile` reads)."""
    from scheduler.workloads.profiles import normalize_model_name
    from topologies.errors import UserInputError, did_you_mean

    names = [normalize_model_name(m) for m in text.split(",") if m.strip()]
    if not names:
        raise UserInputError("--models names no model")
    if workers < 2:
        raise UserInputError("--workers 1: a job of one worker sends nothing to measure")
    for name in names:
        if name not in specs:
            raise UserInputError(f"--models: {did_you_mean(name, sorted(specs), 'model')}")
        if specs[name].parallelism != "data":
            raise UserInputError(
                f"--models: '{name}' is {specs[name].parallelism} parallel; only data-parallel "
                "models are measured (one Up phase per iteration)"
            )
    return list(dict.fromkeys(names))


def _profile(args: argparse.Namespace) -> int:
    from emulation.housekeeping.signals import SignalExit, signals_raise
    from emulation.jobs.run_settings import RunSettings
    from emulation.profile.request import check_request
    from emulation.profile.session import profile_on_fabric, write_profiles
    from emulation.profile.sharing import measure_sharing, write_sharing_model
    from scheduler.workloads.profiles import load_models
    from topologies.library import load_topology
    from topologies.outputs import check_output, scratch_folder, staged_folder

    specs = load_models(args.models_file, args.jobs_model)
    models = parse_models(args.models, specs, args.workers)
    out = json_output(args.out, args.force, "--out")
    settings = RunSettings(iterations=args.iterations, transport=args.transport)

    def say(line: str) -> None:
        if not args.json:
            print(f"profiling {line}", file=sys.stderr, flush=True)

    counts, sharing_out = _sharing_flags(args, models)
    # what cannot be measured is refused before a fabric is built (it was found after)
    check_request(load_topology(args.topology), args.workers, args.iterations, counts)
    if args.runs is not None:
        check_output(args.runs, "folder", args.force, "--runs")
    found: list[SharingRun] = []

    def sharing(fabric: EmulatedFabric, measured: list[MeasuredProfile]) -> None:
        say(f"sharing: {', '.join(map(str, counts))} jobs of {models[0]} through one link")
        found.extend(
            measure_sharing(fabric, models[0], counts, settings, runs / "sharing",
                            measured[0].up_ms.mean)
        )  # fmt: skip

    kept = "" if args.runs is None else f"; {args.runs} not written"
    try:
        # the run folders are staged like any results folder: nothing is written
        # through a link planted in --runs, and a full disk is one line
        with (
            signals_raise(),
            (
                staged_folder(args.runs, args.force, "--runs")
                if args.runs is not None
                else scratch_folder("--runs")
            ) as runs,
        ):
            measured = profile_on_fabric(
                args.topology, {args.workers: models}, settings, runs, args.scale, specs, say,
                then=sharing if counts else None,
            )  # fmt: skip
    except SignalExit as stopped:
        raise Interrupted(
            stopped.signum, f"{stopped.signal_name}: {out} not written{kept}"
        ) from None
    write_profiles(out, measured)
    if sharing_out is not None:
        write_sharing_model(sharing_out, models[0], found)
    if args.json:
        print(out.read_text(), end="")
        return 0
    print(f"{'model':<15}{'workers':>8}{'iter ms':>9}{'p95':>8}{'period':>8}{'up ms':>8}"
          f"{'up p99':>8}{'offset':>8}{'off p99':>8}{'gbps':>7}  link")  # fmt: skip
    for m in measured:
        print(f"{m.model:<15}{m.workers:>8}{m.iteration_ms.mean:>9.1f}{m.iteration_ms.p95:>8.1f}"
              f"{m.period_ms:>8.1f}{m.up_ms.mean:>8.1f}{m.up_ms.p99:>8.1f}"
              f"{m.up_offset_ms.mean:>8.1f}{m.up_offset_ms.p99:>8.1f}{m.up_gbps:>7.1f}  "
              f"{m.link}")  # fmt: skip
    print(f"wrote {out}")
    for run in found:
        for f in run.by_active:
            print(f"{run.jobs} jobs on {run.link}: {f.active} Up at once in {f.samples} samples, "
                  f"link {f.utilisation:.0%} used, Jain {f.fairness:.3f}")  # fmt: skip
        print(f"{run.jobs} jobs: Up phase {run.stretch:.2f}x as long as alone")
    if sharing_out is not None:
        print(f"wrote {sharing_out}")
    return 0


def _sharing_flags(args: argparse.Namespace, models: list[str]) -> tuple[list[int], Path | None]:
    """--sharing's job counts and --sharing-out, checked before any fabric."""
    from topologies.errors import UserInputError

    if args.sharing is None:
        if args.sharing_out is not None:
            raise UserInputError("--sharing-out: give --sharing too (the job counts to run)")
        return [], None
    try:
        counts = [int(c) for c in args.sharing.split(",") if c.strip()]
    except ValueError:
        raise UserInputError(f"--sharing {args.sharing!r}: job counts like 2,3,4") from None
    if not counts or any(not 2 <= c <= 4 for c in counts):
        raise UserInputError(f"--sharing {args.sharing!r}: job counts between 2 and 4")
    if len(models) != 1 or args.workers != 2:
        raise UserInputError("--sharing: one model (--models M) and --workers 2")
    if args.sharing_out is None:
        raise UserInputError("--sharing: give --sharing-out FILE for the sharing model")
    return counts, json_output(args.sharing_out, args.force, "--sharing-out")


def json_output(path: str, force: bool, flag: str) -> Path:
    """A JSON file to write, by the output rule; another suffix is refused (`--out p.txt`
    was written as JSON under a name that says otherwise)."""
    from topologies.errors import UserInputError
    from topologies.outputs import check_output

    if Path(path).suffix.lower() != ".json":
        raise UserInputError(f"{flag} {path}: the file is JSON; name it .json (e.g. profiles.json)")
    return check_output(path, "file", force, flag)
