"""What does each scheduler decide for a trace, and what does the simulator predict for it?

The emulation runs each job for a fixed number of iterations, so the trace
given to the schedulers and the fluid simulator is the trace with every
job's iteration count replaced by that number: the decisions, departures and
the simulator's per-job mean iteration time then cover the same iterations
the fabric runs (a run for a duration gives each job the iterations it would
run alone in that time, `iterations_in`). The runner replays every decision
that changes something for the jobs in the fabric (`segments`).

With a given schedule (`plan_trace(..., given=GivenScheduler(...))`), the
scheduler named `GIVEN` runs it as it is (placement, shifts, periods) and
every other scheduler runs on its placement: a base scheduler is
`GivenScheduler(placement)` (its jobs run free, as Themis's do), a Cassini
variant is Cassini over that one candidate (its own time-shifts for it).
That is how a test or a user puts jobs on links they share, and compares a
shift of their choosing with Cassini's, when the schedulers themselves would
keep the jobs apart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial

from scheduler.baselines.base import ProfileBook, Scheduler
from scheduler.baselines.given import GivenScheduler
from scheduler.baselines.registry import CASSINI_BASE
from scheduler.simulator import SimSettings
from scheduler.simulator.decisions import Decision, DecisionLog
from scheduler.simulator.experiment import Experiment, run_experiment, speedups, summarise
from scheduler.workloads.profiles import ModelSpec
from scheduler.workloads.sharing_model import IDENTITY, SharingModel
from scheduler.workloads.traces import TraceJob
from scheduler.workloads.traffic import JobRouter
from topologies.model import Topology


@dataclass(frozen=True)
class SchedulerPlan:
    """One scheduler's decisions for the trace and the simulator's figures for them."""

    scheduler: str
    decisions: tuple[Decision, ...]
    sim_job_mean_ms: Mapping[str, float]  # per job, the simulator's mean iteration time
    sim_mean_ms: float  # over every simulated iteration of every job
    sim_p99_ms: float

    @property
    def first(self) -> Decision:
        return self.decisions[0]


@dataclass(frozen=True)
class TracePlan:
    """Every scheduler's plan for one trace, plus the trace the plans were made for."""

    trace: tuple[TraceJob, ...]
    label: str
    plans: tuple[SchedulerPlan, ...]
    experiment: Experiment

    def of(self, scheduler: str) -> SchedulerPlan:
        for plan in self.plans:
            if plan.scheduler == scheduler:
                return plan
        raise LookupError(f"no plan for scheduler {scheduler!r}")


def emulated_trace(
    trace: Sequence[TraceJob], iterations: int | Mapping[str, int]
) -> tuple[TraceJob, ...]:
    """`trace` with every job running the iterations the fabric runs (one count, or per job)."""
    counts = (
        iterations
        if isinstance(iterations, Mapping)
        else dict.fromkeys((j.name for j in trace), iterations)
    )
    bad = {name: n for name, n in counts.items() if n < 1}
    if bad:
        raise ValueError(f"iterations must be >= 1, got {bad}")
    return tuple(replace(job, iterations=counts[job.name]) for job in trace)


def iterations_in(
    trace: Sequence[TraceJob],
    duration_s: float,
    nic_gbps: float,
    models: Mapping[str, ModelSpec] | None = None,
) -> dict[str, int]:
    """Per job, about how many iterations it runs alone in `duration_s` from its arrival
    (what the simulator is given when the emulation runs for a duration)."""
    from scheduler.workloads.profiles import build_profile

    out = {}
    for job in trace:
        ms = build_profile(job.model, job.workers, nic_gbps=nic_gbps, models=models).iteration_ms
        left = max(0.0, duration_s - job.arrival_s)
        out[job.name] = max(1, int(left * 1e3 / ms))
    return out


def plan_trace(
    trace: Sequence[TraceJob],
    topology: Topology,
    schedulers: Sequence[str],
    iterations: int | Mapping[str, int],
    seed: int = 0,
    models: Mapping[str, ModelSpec] | None = None,
    label: str = "",
    given: GivenScheduler | None = None,
    sharing: SharingModel | None = None,
) -> TracePlan:
    """Each scheduler's decisions for `trace` run for `iterations` iterations (one count or
    per job), simulated; on the `given` schedule's placement when there is one (module
    docstring); `sharing` the simulator's link sharing (`scheduler.workloads.sharing_model`)."""
    jobs = emulated_trace(trace, iterations)
    log = DecisionLog()
    if given is None:
        experiment = run_experiment(
            jobs,
            topology,
            schedulers,
            seed=seed,
            settings=SimSettings(seed=seed),
            trace_label=label,
            models=models,
            on_decision=log,
            sharing=sharing,
        )
    else:
        experiment = _experiment_on(
            jobs, topology, schedulers, given, seed, models, log, sharing or IDENTITY
        )
    summaries = {s.name: s for s in experiment.summaries}
    plans = []
    for name in schedulers:
        result = experiment.results[name]
        plans.append(
            SchedulerPlan(
                scheduler=name,
                decisions=log.of(name),
                sim_job_mean_ms={
                    job.name: float(job.iteration_ms.mean())
                    for job in result.jobs
                    if job.iteration_ms.size
                },
                sim_mean_ms=summaries[name].mean_ms,
                sim_p99_ms=summaries[name].p99_ms,
            )
        )
    return TracePlan(jobs, label, tuple(plans), experiment)


GIVEN = "given"  # the scheduler name of a given schedule run as it is


def on_schedule(
    name: str, given: GivenScheduler, topology: Topology, book: ProfileBook, router: JobRouter
) -> Scheduler:
    """Scheduler `name` on the `given` schedule (module docstring)."""
    from scheduler.baselines.augmented import CassiniAugmented

    if name == GIVEN:
        return replace(given, name=GIVEN)
    placed = GivenScheduler(given.placement, name=name)
    if name not in CASSINI_BASE:
        return placed
    return CassiniAugmented(placed, router, topology.capacity_gbps(), name=name, book=book)


def _experiment_on(
    jobs: Sequence[TraceJob],
    topology: Topology,
    schedulers: Sequence[str],
    given: GivenScheduler,
    seed: int,
    models: Mapping[str, ModelSpec] | None,
    log: DecisionLog,
    sharing: SharingModel,
) -> Experiment:
    """`run_experiment`'s results for the schedulers of `on_schedule`."""
    from scheduler.simulator import simulate

    router = JobRouter(topology)
    book = ProfileBook(models, nic_gbps=topology.nic_gbps())
    results, summaries = {}, []
    for name in schedulers:
        result = simulate(
            jobs,
            topology,
            on_schedule(name, given, topology, book, router),
            SimSettings(seed=seed),
            router,
            book=book,
            on_decision=partial(log, name),
            sharing=sharing,
        )
        results[name] = result
        summaries.append(summarise(result))
    settings = {"topology": topology.name, "seed": seed, "given": repr(given)}
    return Experiment(settings, tuple(summaries), speedups(summaries), results)


def shared_links(
    placement: Mapping[str, Sequence[str]],
    topology: Topology,
    parallelism: Mapping[str, str] | None = None,
    router: JobRouter | None = None,
) -> dict[str, tuple[str, ...]]:
    """{"a->b": jobs} of every directed link more than one placed job's traffic crosses
    (a job without a parallelism in `parallelism` is data parallel).

    The names are those of the switch's per-link series (`LinkDelta.link`),
    so the report sums the marks the switch counted on exactly these links.
    """
    router = router or JobRouter(topology)
    users: dict[str, list[str]] = {}
    for job, servers in placement.items():
        for a, b in router.job_links(servers, (parallelism or {}).get(job, "data"), job):
            users.setdefault(f"{a}->{b}", []).append(job)
    return {link: tuple(sorted(jobs)) for link, jobs in sorted(users.items()) if len(jobs) > 1}
