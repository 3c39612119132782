"""How does one trace go from the schedulers to an ECN measurement report, on one fabric?

    from emulation.emulate.runner import EmulateSettings, emulate

    report = emulate(EmulateSettings(trace="four-jobs", schedulers=("themis", "th+cassini")),
                     "results/")

1. `plan.plan_trace`: every scheduler decides on the trace (the simulator's
   own schedulers, so there is one scheduling code path) and the fluid
   simulator predicts each job's iteration time for those decisions.
2. One fabric (`EmulatedFabric`, the chosen target) is brought up and
   programmed once. Per scheduler, in turn: the fabric is idle (no replica
   left, queues drained: `DRAIN_S`), the counters are read as the baseline
   by the runner's first snapshot, and `emulation.jobs.supervisor.run_schedule`
   runs that scheduler's placement and shifts as replicas, polling the
   switch's counters and the CPU.
3. `report.write_report` writes the summary, CSVs, plots and pages.

A Ctrl-C or SIGTERM stops the running replicas, tears the fabric down and
still writes the report of what completed, marked partial; a failed job is
reported (the run is partial) and the next scheduler runs. A full disk ends
the runs; the report of what completed, with their folders, is written to a
fresh folder in the temporary folder instead, and the one-line error says where.

Jobs that arrive and leave over time (the dynamic trace, or such a file):
every decision of the scheduler that changes something for the jobs in the
fabric, at an arrival, a departure or a tick, is applied at its trace time
divided by `compress` (scaled time is real time, so a trace can be
compressed): new jobs start, moved jobs restart, changed shifts restart the
agents on the new grid (`segments`); a decision that changes nothing
restarts nothing. Each segment's folder holds `segment.json`: the decision
that opened it and what it changed.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import math
import platform
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from controlplane.counter_watch import DEFAULT_POLL_INTERVAL_S
from emulation.fabric.scaling import DEFAULT_SCALE
from topologies.errors import UserInputError
from topologies.outputs import disk_error, is_disk_error, write_or_rescue

from .fidelity import switch_lateness
from .plan import GIVEN, TracePlan, iterations_in, plan_trace, shared_links
from .report import Report, write_report
from .results import SchedulerRun

if TYPE_CHECKING:
    from emulation.fabric.emulated import EmulatedFabric
    from emulation.jobs.run_result import Progress
    from emulation.jobs.run_settings import RunSettings
    from scheduler.baselines.given import GivenScheduler
    from scheduler.workloads.traces import TraceJob
    from topologies.model import Topology

# How long the fabric idles between two schedulers so the queues drain (our
# choice: a full WRED queue at the scaled rate empties in a few ms; this is
# far more, and cheap next to a run).
DRAIN_S = 1.0
RUNS_FOLDER = "runs"  # DIR/runs/<scheduler>/: what `cassini fabric run` writes for it
SEGMENT_FILE = "segment.json"  # in DIR/runs/<scheduler>/segment-N/: the decision that opened it


@dataclass(frozen=True)
class EmulateSettings:
    """Everything one `cassini emulate` needs; recorded in summary.json."""

    topology: str = "cassini-testbed"
    trace: str = "four-jobs"
    schedulers: tuple[str, ...] = ("themis", "th+cassini")
    target: str = "softswitch"
    scale: float = DEFAULT_SCALE
    iterations: int = 40
    duration_s: float | None = None  # a deadline per scheduler; None: the runner's default
    seed: int = 0
    jobs: int = 60  # for generated traces
    models: str | None = None  # YAML of models
    jobs_model: str = "ddp"  # scheduler.workloads.profiles.JOBS_MODELS
    drift_fraction: float | None = 0.05
    # The switch's P4 counters and, where the target serves gNMI, its interface
    # counters (the loss-by-cause columns of ecn.csv), polled this often: the
    # poller's default, chosen by its cost to the switch (`counter_watch`).
    poll_interval_s: float = DEFAULT_POLL_INTERVAL_S
    gnmi_polls: bool = True
    device_config: str | None = None  # bmv2 JSON
    prefix: str | None = None  # of the fabric's names; None: a fresh one
    compress: float = 1.0  # trace seconds per emulated second (arrivals come sooner)
    # A schedule as `cassini schedule --json` prints it ({"placement": {job: [server,
    # ...]}, "shifts_ms": ..., "periods_ms": ...}): scheduler "given" runs it as it is,
    # the others run on its placement (`plan`'s docstring); None: each places the trace
    schedule: Mapping[str, Any] | None = None
    transport: str = "tcp"  # the replicas' (`RunSettings.transport`)
    policy: str = "none"  # the network policy the fabric runs (`RunSettings.policy`)
    # Measured profiles (`cassini profile`): the schedulers and the simulator plan with
    # them; the replicas still run the models' own workload
    profiles: str | None = None
    # Measured link sharing (`cassini profile --sharing-out`): the simulator's links
    # shared by n jobs offer capacity x factor(n) (`scheduler.workloads.sharing_model`)
    sharing: str | None = None
    # --scale auto: `scale` is replaced by the largest S this machine's calibration
    # predicts the plan's heaviest placement runs trustworthily at (`emulation.capacity.model`)
    scale_auto: bool = False
    recalibrate: bool = False  # measure the machine's cost again first


@dataclass
class Live:
    """What a progress display is told: per scheduler, the runner's latest `Progress`."""

    scheduler: str
    index: int  # 0-based, of `total`
    total: int
    progress: Progress | None = None
    marks_per_s: float = 0.0  # the switch's ECN marks per second since the scheduler's start
    extra: dict[str, Any] = field(default_factory=dict)


def make_plan(settings: EmulateSettings, topo: Topology) -> TracePlan:
    """Resolve the trace and let every scheduler decide on it (no fabric yet)."""
    from scheduler.workloads.profile_files import with_measured_profiles
    from scheduler.workloads.profiles import load_models
    from scheduler.workloads.sharing_model import load_sharing_model
    from scheduler.workloads.traces import check_fits, resolve_trace

    names = scheduler_names(settings)
    models = with_measured_profiles(
        load_models(settings.models, settings.jobs_model), settings.profiles
    )
    trace, label = resolve_trace(
        settings.trace, topo.total_gpus(), settings.jobs, seed=settings.seed, models=models
    )
    check_fits(trace, topo.total_gpus(), label)
    if settings.compress <= 0:
        raise UserInputError(f"--compress: expected a factor > 0, got {settings.compress:g}")
    # The schedulers and the simulator see the compressed trace, so their decisions
    # come at the times the fabric runs them (jobs run at real speed in both).
    trace = tuple(replace(j, arrival_s=j.arrival_s / settings.compress) for j in trace)
    if settings.compress != 1.0:
        label = f"{label}, compressed {settings.compress:g}x"
    iterations: int | dict[str, int] = settings.iterations
    if settings.duration_s is not None:
        iterations = iterations_in(trace, settings.duration_s, topo.nic_gbps(), models)
    given = None if settings.schedule is None else given_schedule(settings.schedule, trace, topo)
    sharing = load_sharing_model(settings.sharing)
    return plan_trace(trace, topo, names, iterations, settings.seed, models, label, given, sharing)


def scheduler_names(settings: EmulateSettings) -> list[str]:
    """The schedulers to run, checked: `GIVEN` only with a schedule to run."""
    from scheduler.baselines import parse_scheduler_names

    names = [n.strip().lower() for n in settings.schedulers if n.strip()]
    if GIVEN in names and settings.schedule is None:
        raise UserInputError(f"--schedulers: '{GIVEN}' needs a schedule to run")
    others = [n for n in names if n != GIVEN]
    if others or not names:  # no name at all: the registry's own message
        others = parse_scheduler_names(",".join(others))
    return [n for n in dict.fromkeys(names) if n == GIVEN or n in others]


def given_schedule(
    schedule: Mapping[str, Any], trace: Sequence[TraceJob], topo: Topology
) -> GivenScheduler:
    """The schedule as a `GivenScheduler`, checked as `cassini fabric run` checks a schedule
    file, and against the trace: every job placed, on as many servers as it has workers."""
    from emulation.jobs.launch import parse_schedule, plan_jobs
    from scheduler.baselines.given import GivenScheduler

    workers = {j.name: j.workers for j in trace}
    placement = schedule.get("placement")
    if isinstance(placement, Mapping) and set(placement) != set(workers):
        raise UserInputError(
            f"schedule: field 'placement' places jobs {sorted(placement)}, "
            f"the trace has {sorted(workers)}"
        )
    doc = {**schedule, "models": {j.name: j.model for j in trace}}
    jobs = plan_jobs(parse_schedule(doc, where="schedule"), topo, where="schedule")
    for job in jobs:
        if job.workers != workers[job.name]:
            raise UserInputError(
                f"schedule: field 'placement' of job '{job.name}': {job.workers} servers for "
                f"{workers[job.name]} workers"
            )
    return GivenScheduler(
        {j.name: j.servers for j in jobs},
        {j.name: j.shift_ms for j in jobs},
        {j.name: j.period_ms for j in jobs if j.period_ms is not None},
    )


def link_rates(topo: Topology, scale: float) -> dict[str, float]:
    """Each directed link's emulated rate in Gbit/s, named as the switch's link series."""
    return {f"{a}->{b}": gbps * scale for (a, b), gbps in topo.capacity_gbps().items()}


def run_settings(settings: EmulateSettings, gnmi: bool | None = None) -> RunSettings:
    """The replicas' run settings; `gnmi` None: as `settings.gnmi_polls` says."""
    from emulation.jobs.run_settings import RunSettings

    return RunSettings(
        iterations=settings.iterations,
        deadline_s=settings.duration_s,
        drift_fraction=settings.drift_fraction,
        poll_interval_s=settings.poll_interval_s,
        gnmi=settings.gnmi_polls if gnmi is None else gnmi,
        transport=settings.transport,
        policy=settings.policy,
    )


def serves_gnmi(fabric: EmulatedFabric) -> bool:
    """Does the fabric's switch serve gNMI interface counters (bmv2's does not)? Asked
    once, so a target without gNMI runs with its P4 counters alone; any other failure
    is left to the poller, which reports it with the run."""
    from controlplane.gnmi import GnmiError, GnmiReader, GnmiUnsupported

    if fabric.grpc_address is None:
        return False
    try:
        with GnmiReader(fabric.grpc_address, timeout=fabric.timeout) as reader:
            reader.read()
    except GnmiUnsupported:
        return False
    except GnmiError:
        pass
    return True


def run_one(
    fabric: EmulatedFabric,
    plan: TracePlan,
    scheduler: str,
    settings: EmulateSettings,
    out_dir: Path,
    models: Mapping[str, Any] | None = None,
    progress: Callable[[Progress], None] | None = None,
) -> SchedulerRun:
    """One scheduler's decisions as replicas on `fabric`, segment by segment (`segments`: one
    per decision that changes something for the jobs in the fabric), measured."""
    from emulation.jobs.launch import plan_jobs
    from emulation.jobs.run_folder import write_run
    from emulation.jobs.supervisor import run_schedule

    from .segments import iterations_done, merge, segments

    topo = fabric.topo
    scheduler_plan = plan.of(scheduler)
    parts = segments(scheduler_plan.decisions)  # the plan's times are already compressed
    folder = out_dir / RUNS_FOLDER / scheduler
    wanted = {j.name: j.iterations for j in plan.trace}  # the iterations the simulator ran
    done: dict[str, int] = {}
    results, starts, shared = [], [], {}
    last: dict[str, Any] = {}
    end_all = settings.duration_s if settings.duration_s is not None else math.inf
    lateness_before = read_lateness(fabric)
    polled = run_settings(settings, gnmi=settings.gnmi_polls and serves_gnmi(fabric))
    began = time.monotonic()
    for index, part in enumerate(parts):
        elapsed = time.monotonic() - began
        if part.end_s is not None and elapsed >= part.end_s:
            continue  # the run is past this decision's stretch: the next one supersedes it
        if elapsed >= end_all:
            break
        if part.start_s > elapsed:
            time.sleep(part.start_s - elapsed)  # every job finished before this decision
        schedule = part.runs.as_schedule()
        jobs = [
            replace(j, iterations=wanted.get(j.name, settings.iterations) - done.get(j.name, 0))
            for j in plan_jobs(schedule, topo, models=models, where=f"{scheduler}'s schedule")
        ]
        jobs = [j for j in jobs if j.iterations is not None and j.iterations > 0]
        if not jobs:
            continue
        stop_at = min(part.end_s if part.end_s is not None else math.inf, end_all)
        now = time.monotonic() - began
        run = replace(
            polled,
            iterations=max(j.iterations or 1 for j in jobs),
            deadline_s=None if math.isinf(stop_at) else max(1.0, stop_at - now),
        )
        sub = folder if len(parts) == 1 else folder / f"segment-{index}"
        starts.append(now)
        result = run_schedule(fabric, jobs, run, sub, progress)
        write_run(result, sub)
        if len(parts) > 1:
            record = part.record() | {"started_s": round(now, 3)}
            (sub / SEGMENT_FILE).write_text(json.dumps(record, indent=1) + "\n")
        results.append(result)
        for job, n in iterations_done(result.records).items():
            done[job] = done.get(job, 0) + n
        last.update({j.name: replace(j, iterations=None) for j in jobs})
        shared.update(
            shared_links(
                {j.name: j.servers for j in jobs},
                topo,
                {j.name: j.profile.parallelism for j in jobs},
            )
        )
        if result.interrupted or fabric.switch_failure() is not None:
            break
    if not results:
        raise RuntimeError(f"scheduler {scheduler} placed no job to run")
    merged = results[0] if len(results) == 1 else merge(results, starts, list(last.values()))
    lateness = switch_lateness(lateness_before, read_lateness(fabric))
    return SchedulerRun(
        scheduler=scheduler,
        plan=scheduler_plan,
        result=merged,
        shared_links=shared,
        link_gbps=link_rates(topo, fabric.profile.scale),
        switch_lateness=lateness,
    )


def read_lateness(fabric: EmulatedFabric) -> dict[str, dict[str, int]]:
    """The switch's cumulative lateness histograms over gNMI ({} from a target without them)."""
    from controlplane.gnmi import GnmiError, GnmiReader

    if fabric.grpc_address is None:
        return {}
    try:
        with GnmiReader(fabric.grpc_address, timeout=10.0) as reader:
            return reader.read_fidelity()
    except GnmiError:
        return {}


def run_settings_record(
    settings: EmulateSettings, plan: TracePlan, fabric: EmulatedFabric | None
) -> dict[str, Any]:
    """The settings block of summary.json: what ran, on what, with which versions."""
    record: dict[str, Any] = {
        **asdict(settings),
        "trace": plan.label,
        "trace_spec": settings.trace,
        "jobs": [asdict(j) for j in plan.trace],
        "harness": importlib.metadata.version("cassini-harness"),
        "python": platform.python_version(),
    }
    if fabric is not None:
        summary = fabric.describe()
        record["scale"] = summary.scale
        record["emulation_profile"] = list(summary.profile)
        record["prefix"] = summary.prefix
    return record


@contextlib.contextmanager
def _fabric(settings: EmulateSettings, topo: Topology) -> Iterator[EmulatedFabric]:
    from emulation.fabric.emulated import EmulatedFabric
    from emulation.fabric.options import FabricOptions

    options = FabricOptions(
        scale=settings.scale,
        prefix=settings.prefix,
        seed=settings.seed,
        target=settings.target,
        device_config=settings.device_config,
    )
    with EmulatedFabric(topo, options) as fabric:
        yield fabric


def auto_scale(
    settings: EmulateSettings,
    plan: TracePlan,
    topo: Topology,
    models: Mapping[str, Any] | None,
    say: Callable[[str], None] | None = None,
) -> tuple[EmulateSettings, dict[str, Any]]:
    """`settings` at the S `--scale auto` chooses for `plan`, and why (for summary.json)."""
    from emulation.capacity.calibration import choose_scale
    from emulation.capacity.model import plan_load

    load = plan_load([d for p in plan.plans for d in p.decisions], topo, models)
    choice, record = choose_scale(load, settings.recalibrate, say)
    if choice.scale is None:
        raise UserInputError(f"--scale auto: {choice.reason}")
    if say is not None:
        say(f"--scale auto: {choice.reason}")
    return replace(settings, scale=choice.scale), record


def emulate(
    settings: EmulateSettings,
    out_dir: str | Path,
    on_progress: Callable[[Live], None] | None = None,
    say: Callable[[str], None] | None = None,
    final_dir: str | Path | None = None,
) -> tuple[Report, str | None]:
    """Plan, run every scheduler on one fabric, report; returns the report and why it stopped
    early (a signal's name) or None. The report is written in every case: a switch that
    dies ends the run with a partial report whose settings name the failure
    (`failed`), the fabric torn down. `final_dir`: where a staged `out_dir` goes once
    written; files inside it are recorded at their final paths."""
    from emulation.housekeeping.signals import SignalExit, signals_raise
    from scheduler.workloads.profiles import load_models
    from topologies.library import load_topology

    out = Path(out_dir)
    topo = load_topology(settings.topology)
    plan = make_plan(settings, topo)
    models = load_models(settings.models, settings.jobs_model)
    scale_choice = None
    if settings.scale_auto:  # `say` tells the terminal which S and why
        settings, scale_choice = auto_scale(settings, plan, topo, models, say)
    runs: list[SchedulerRun] = []
    stopped: str | None = None
    failed: str | None = None
    fabric_ref: list[Any] = [None]
    began = time.monotonic()
    try:
        with signals_raise(), _fabric(settings, topo) as fabric:
            fabric_ref[0] = fabric
            for index, name in enumerate(plan_names(plan)):
                live = Live(name, index, len(plan.plans))

                def report(p: Progress, live: Live = live) -> None:
                    # the switch's counters arrive every few seconds: a rate since the
                    # start is steadier than one between two progress calls
                    live.marks_per_s = p.ecn_marked / p.elapsed_s if p.elapsed_s > 0 else 0.0
                    live.progress = p
                    if on_progress is not None:
                        on_progress(live)

                if index:
                    time.sleep(DRAIN_S)
                run = run_one(fabric, plan, name, settings, out, models, report)
                runs.append(run)
                if run.result.interrupted:
                    stopped = run.result.interrupted
                    break
                failure = fabric.switch_failure()
                if failure is not None:
                    failed = f"the switch stopped during {name}'s run: {failure}"
                    break
    except SignalExit as signal_exit:
        stopped = signal_exit.signal_name
    except KeyboardInterrupt:
        stopped = "SIGINT"
    except OSError as err:  # a full disk: the runs so far are reported, kept elsewhere
        if not is_disk_error(err, out):
            raise
        failed = f"results not written: {disk_error(err, out, Path(final_dir or out))}"
    record = run_settings_record(settings, plan, fabric_ref[0])
    if final_dir is not None:
        for key in ("profiles", "sharing"):
            record[key] = moved_path(record[key], out, Path(final_dir))
    record["wall_s"] = round(time.monotonic() - began, 1)
    record["all_schedulers_ran"] = (
        stopped is None and failed is None and len(runs) == len(plan.plans)
    )
    record["stopped_by"] = stopped
    record["failed"] = failed
    if scale_choice is not None:
        record["scale_choice"] = scale_choice
    # a full disk keeps the report and the runs in the temporary folder, said in one line
    final = Path(final_dir) if final_dir is not None else out
    return write_or_rescue(lambda folder: write_report(runs, record, folder), out, final), stopped


def moved_path(path: str | None, stage: Path, final: Path) -> str | None:
    """`path` once the folder `stage` is renamed `final` (unchanged outside it).

    >>> moved_path("res/.demo.partial-1/profiles.json", Path("res/.demo.partial-1"), Path("res/demo"))
    'res/demo/profiles.json'
    """
    if path is None or not Path(path).is_relative_to(stage):
        return path
    return str(final / Path(path).relative_to(stage))


def plan_names(plan: TracePlan) -> list[str]:
    return [p.scheduler for p in plan.plans]
