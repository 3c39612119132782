"""Which replica runs where, with what profile, shift and period, for one schedule?

Pure: a `Schedule` (the scheduler's own, `scheduler.workloads.types.Schedule`, handed
on as it is) plus profiles and the fabric's host addresses become one
`ReplicaSpec` per worker. Nothing here starts a process
(`emulation.jobs.supervisor` does). A user's schedule file (what `cassini schedule
--json` prints, or a hand-written file with the same keys) becomes a
`Schedule` once, where it is read (`read_schedule`, then `parse_schedule`).

The schedule file's keys:

- `placement` (required): `{job: [server, ...]}`, workers in ring order;
- `shifts_ms` (optional, default 0 for every job): the time-shift per job;
- `periods_ms` (optional): the grid period of each paced job; a job absent
  from it runs free (the agent starts every iteration at once);
- `models` (optional): `{job: model}`; without it a job's model is the job
  name's model prefix as `schedule` writes it (`vgg19-0` is a vgg19);
- `sharing` (optional): `[[job, ...], ...]`, the jobs that time-share GPU
  slots, each group in stage order (what `nags` and `muri` decide).

A job's profile is, in this order, the `--jobs-file` profile named like the
job, the one named like its model, or the built-in (or `--models`) model's
profile for the job's worker count at the topology's NIC rate.

A member of a sharing group runs the profile `scheduler.cassini.timeshare.share`
lays out for its place in the group (its compute stretched to its stage,
then its transfers), the one the simulator runs, so replicas that share a
host interleave compute and communication as the model says: one computes
while the previous one sends. Its period is the group's cycle and its shift
its stage offset, as the scheduler decided them; a member the schedule gives
no period takes the layout's (our choice: a hand-written file need not
repeat them).

(our choice) When the simulator has a member leave its group by finishing,
the survivor goes on with the profile and grid it has until the next
decision that changes something (`emulation.emulate.segments`), where the
simulator runs it alone on its own profile: a departure that only frees a
share is no boundary, as one that only frees servers is not, since a
boundary restarts every replica and, on a busy machine, the departed
member, behind the simulator, would lose the iterations it has left (its
servers are the survivor's). The survivor's iterations are then at most
its sharing factor slower than the simulator's.

    >>> from topologies.library import load_topology
    >>> topo = load_topology("leaf-spine:2:1:2")
    >>> schedule = parse_schedule({"placement": {"vgg19-0": ["s01", "s03"]},
    ...                            "shifts_ms": {"vgg19-0": 10}, "periods_ms": {"vgg19-0": 300}})
    >>> jobs = plan_jobs(schedule, topo)
    >>> jobs[0].model, jobs[0].servers, jobs[0].shift_ms, jobs[0].period_ms
    ('vgg19', ('s01', 's03'), 10.0, 300.0)
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from scheduler.cassini.timeshare import share
from scheduler.workloads.profiles import ModelSpec, build_profile, normalize_model_name
from scheduler.workloads.types import Profile, Schedule
from topologies.datafile import parse_data, read_text_file
from topologies.errors import UserInputError, did_you_mean
from topologies.model import Topology
from topologies.names import check_name, path_under, shown

from .agent import DEFAULT_DRIFT_FRACTION
from .replica import ReplicaSpec
from .ring import Address

# (our choice) Ring ports: worker i of the run (counted over all jobs) listens
# on BASE_PORT + i, so two workers on one server never collide.
BASE_PORT = 47000
# The job-name suffix `cassini schedule` appends to a model (vgg19-0, gpt2-13).
_JOB_SUFFIX = re.compile(r"-\d+$")


@dataclass(frozen=True)
class JobPlan:
    """One job of a schedule, resolved: where its workers run and how it is paced."""

    name: str
    model: str
    servers: tuple[str, ...]
    profile: Profile
    shift_ms: float = 0.0
    period_ms: float | None = None  # None: unpaced
    iterations: int | None = None  # None: the run's count (a resumed job runs what it has left)
    sharing: tuple[str, ...] = ()  # the sharing group it time-shares GPUs in (stage order)

    @property
    def workers(self) -> int:
        return len(self.servers)


def read_schedule(path: str | Path) -> dict[str, Any]:
    """The JSON object of a schedule file, read as every input file is
    (`topologies.datafile`: at most 64 MiB, UTF-8, nesting bounded); a missing or
    malformed file is one line naming it."""
    p = Path(path)
    try:
        doc = parse_data(read_text_file(p, "schedule"), "json", str(p))
    except UserInputError as err:
        if "invalid JSON" not in str(err):
            raise
        raise UserInputError(f"{err}; write it with `cassini schedule --json`") from None
    if not isinstance(doc, dict):
        raise UserInputError(f"schedule file {p}: expected a JSON object with 'placement'")
    return doc


def model_of(job: str) -> str:
    """The model a job name stands for, as `cassini schedule` names jobs.

    >>> model_of("vgg19-0"), model_of("wideresnet101-12"), model_of("bert")
    ('vgg19', 'wideresnet101', 'bert')
    """
    return _JOB_SUFFIX.sub("", job)


def _job_map(doc: Mapping[str, Any], key: str, jobs: Sequence[str], where: str) -> dict[str, Any]:
    raw = doc.get(key, {})
    if not isinstance(raw, dict):
        raise UserInputError(f"{where}: field '{key}' must be an object {{job: value}}")
    for job in raw:
        if job not in jobs:
            raise UserInputError(
                f"{where}: field '{key}' names job '{job}', which 'placement' does not place; "
                + did_you_mean(job, jobs, "job")
            )
    return raw


# (our choice) A shift or period longer than an hour is no training iteration's.
MAX_SCHEDULE_MS = 3_600_000.0


def _number(value: Any, field: str, job: str, where: str, positive: bool) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    low_ok = ok and (value > 0 if positive else value >= 0)
    if not (low_ok and value <= MAX_SCHEDULE_MS):  # NaN and inf fail here too
        bound = "> 0" if positive else ">= 0"
        raise UserInputError(
            f"{where}: field '{field}' of job '{job}': {shown(value)} is not a number "
            f"{bound} and at most {MAX_SCHEDULE_MS:g} ms"
        )
    return float(value)


def parse_schedule(doc: Mapping[str, Any], where: str = "schedule") -> Schedule:
    """A schedule file's object as a `Schedule` (the keys of the module docstring), checked.

    Every bad field is answered with `where` (the file), the field and the
    job: a placement that is not lists of servers, a shift or period that is
    not a number, a model that is not a name. Other keys are left to their
    writer (`cassini schedule --json` adds its candidates and scores).
    """
    placement = doc.get("placement")
    if not isinstance(placement, dict) or not placement:
        raise UserInputError(
            f"{where}: field 'placement' must be a non-empty object {{job: [server, ...]}} "
            "(what `cassini schedule --json` prints)"
        )
    jobs = list(placement)
    for job in jobs:  # job names become file names (replicas/<job>-w0.jsonl)
        check_name(job, "job name", f"{where}: field 'placement'")
    shifts = _job_map(doc, "shifts_ms", jobs, where)
    periods = _job_map(doc, "periods_ms", jobs, where)
    named = _job_map(doc, "models", jobs, where)
    for job, servers in placement.items():
        if (
            not isinstance(servers, list)
            or not servers
            or not all(isinstance(s, str) for s in servers)
        ):
            raise UserInputError(
                f"{where}: field 'placement' of job '{job}' must be a non-empty list of servers"
            )
    for job, model in named.items():
        if not isinstance(model, str) or not model.strip():
            raise UserInputError(f"{where}: field 'models' of job '{job}' must be a model name")
    sharing = _sharing(doc.get("sharing", []), jobs, where)
    return Schedule(
        placement={job: tuple(servers) for job, servers in placement.items()},
        shifts_ms={j: _number(v, "shifts_ms", j, where, positive=False) for j, v in shifts.items()},
        periods_ms={
            j: _number(v, "periods_ms", j, where, positive=True) for j, v in periods.items()
        },
        models=dict(named),
        sharing=sharing,
    )


def _sharing(raw: Any, jobs: Sequence[str], where: str) -> tuple[tuple[str, ...], ...]:
    """The `sharing` field: lists of two or more placed jobs, no job in two groups."""
    shape = f"{where}: field 'sharing' must be a list of groups [[job, job, ...], ...]"
    if not isinstance(raw, list):
        raise UserInputError(shape)
    seen: set[str] = set()
    out = []
    for group in raw:
        if not isinstance(group, list) or len(group) < 2:
            raise UserInputError(shape + f"; {shown(group)} is not a list of two or more jobs")
        for job in group:
            if not isinstance(job, str) or job not in jobs:
                raise UserInputError(
                    f"{where}: field 'sharing' names job {shown(job)}, which 'placement' "
                    "does not place; " + did_you_mean(str(job), jobs, "job")
                )
            if job in seen:
                raise UserInputError(f"{where}: field 'sharing' puts job '{job}' in two groups")
            seen.add(job)
        out.append(tuple(group))
    return tuple(out)


def time_shared(jobs: Sequence[JobPlan], sharing: Sequence[Sequence[str]]) -> tuple[JobPlan, ...]:
    """`jobs` with each sharing group's members on their time-shared profiles (module
    docstring); a job in no group, or alone in its group, is unchanged.

    >>> from scheduler.workloads.types import Phase
    >>> a = Profile("a", "m", "data", 2, 100.0, (Phase(90.0, 0.0), Phase(10.0, 50.0)))
    >>> b = Profile("b", "m", "data", 2, 100.0, (Phase(10.0, 0.0), Phase(90.0, 50.0)))
    >>> plans = [JobPlan(n, "m", ("s01", "s02"), p) for n, p in (("a", a), ("b", b))]
    >>> [(j.profile.phases[0].duration_ms, j.shift_ms, j.period_ms)
    ...  for j in time_shared(plans, [("a", "b")])]    # stages max(90, 90), max(10, 10)
    [(90.0, 0.0, 100.0), (10.0, 90.0, 100.0)]
    """
    by_name = {j.name: j for j in jobs}
    shaped: dict[str, JobPlan] = {}
    for group in sharing:
        members = tuple(n for n in group if n in by_name)
        if len(members) < 2:
            continue
        laid = share({n: by_name[n].profile for n in members}, order=members)
        for n in members:
            job = by_name[n]
            shaped[n] = replace(
                job,
                profile=laid.profiles[n],
                sharing=members,
                shift_ms=job.shift_ms if job.period_ms is not None else laid.offsets_ms[n],
                period_ms=job.period_ms if job.period_ms is not None else laid.cycle_ms,
            )
    return tuple(shaped.get(j.name, j) for j in jobs)


def _profile_for(
    job: str,
    model: str,
    workers: int,
    topo: Topology,
    profiles: Mapping[str, Profile] | None,
    models: Mapping[str, ModelSpec] | None,
    where: str,
) -> Profile:
    given = profiles or {}
    profile = given.get(job) or given.get(model)
    if profile is None:
        try:
            return build_profile(model, workers, nic_gbps=topo.nic_gbps(), models=models)
        except UserInputError as err:
            source = "its 'models' entry" if model != model_of(job) else "its name"
            raise UserInputError(
                f"{where}: job '{job}' has no profile: model '{model}' (from {source}) is not a "
                f"known model ({err}); pass --models or --jobs-file with a profile named '{job}'"
            ) from None
    if profile.workers != workers:
        raise UserInputError(
            f"{where}: job '{job}' is placed on {workers} servers but its profile "
            f"'{profile.name}' is for {profile.workers} workers"
        )
    return profile


def plan_jobs(
    schedule: Schedule,
    topo: Topology,
    profiles: Mapping[str, Profile] | None = None,
    models: Mapping[str, ModelSpec] | None = None,
    where: str = "schedule",
) -> tuple[JobPlan, ...]:
    """The schedule's jobs, checked against the topology (see the module docstring).

    An unknown server (with the closest names) or a job with no profile is
    answered with `where` (the file, or whose schedule it is) and the job.
    Members of the schedule's sharing groups run their time-shared profiles
    (`time_shared`).
    """
    servers_known = [s.name for s in topo.servers]
    out = []
    for job, servers in schedule.placement.items():
        for server in servers:
            if server not in servers_known:
                raise UserInputError(
                    f"{where}: field 'placement' of job '{job}': server '{server}' is not in "
                    f"topology '{topo.name}'; " + did_you_mean(server, servers_known, "server")
                )
        model = schedule.models.get(job, model_of(job))
        profile = _profile_for(job, model, len(servers), topo, profiles, models, where)
        period = schedule.periods_ms.get(job)
        out.append(
            JobPlan(
                name=job,
                model=normalize_model_name(profile.model or model),
                servers=tuple(servers),
                profile=profile,
                shift_ms=float(schedule.shifts_ms.get(job, 0.0)),
                period_ms=None if period is None else float(period),
            )
        )
    return time_shared(out, schedule.sharing)


@dataclass(frozen=True)
class Placed:
    """One replica to start: on which server, as which spec."""

    server: str
    spec: ReplicaSpec


def replica_specs(
    jobs: Sequence[JobPlan],
    addresses: Mapping[str, str],
    out_dir: str | Path,
    iterations: int,
    scale: float,
    epoch_ms: float | None = None,
    deadline_ms: float | None = None,
    drift_fraction: float | None = DEFAULT_DRIFT_FRACTION,
    timeout_s: float = 10.0,
    base_port: int = BASE_PORT,
    nic_gbps: float | None = 50.0,
    transport: str = "tcp",
    pfc_priority: int = 3,
) -> tuple[Placed, ...]:
    """One replica per worker, in job then worker order.

    `addresses` maps server -> IP (the fabric's hosts); worker i of the run
    listens on `base_port + i`; worker w of job j writes
    `out_dir/j-w{w}.jsonl`. All jobs share `epoch_ms` (their grids' origin)
    and `deadline_ms`; connections are paced at `nic_gbps` x `scale` (the
    topology's NIC rate; None: unpaced), in the pattern of the profile's parallelism,
    over `transport` (RoCE data on PFC class `pfc_priority`, the switch's).

    >>> from scheduler.workloads.types import Phase
    >>> prof = Profile("x", "x", "data", 2, 10.0, (Phase(10.0, 0.0),))
    >>> placed = replica_specs([JobPlan("x-0", "x", ("s01", "s02"), prof)],
    ...                        {"s01": "10.0.0.1", "s02": "10.0.0.2"}, "run", 5, 0.001)
    >>> [(p.server, p.spec.worker, str(p.spec.peers[p.spec.worker]), p.spec.out) for p in placed]
    [('s01', 0, '10.0.0.1:47000', 'run/x-0-w0.jsonl'), ('s02', 1, '10.0.0.2:47001', 'run/x-0-w1.jsonl')]
    """
    out: list[Placed] = []
    port = base_port
    for job in jobs:
        missing = [s for s in job.servers if s not in addresses]
        if missing:
            raise UserInputError(f"job '{job.name}': no host for server(s) {', '.join(missing)}")
        peers = tuple(Address(addresses[s], port + i) for i, s in enumerate(job.servers))
        port += len(job.servers)
        for worker, server in enumerate(job.servers):
            spec = ReplicaSpec(
                job=job.name,
                model=job.model,
                worker=worker,
                peers=peers,
                phases=job.profile.phases,
                # Names were checked when read; the path is checked where it is built too.
                out=str(path_under(out_dir, f"{job.name}-w{worker}.jsonl")),
                iterations=job.iterations or iterations,
                deadline_ms=deadline_ms,
                scale=scale,
                shift_ms=job.shift_ms,
                period_ms=job.period_ms,
                drift_fraction=drift_fraction,
                timeout_s=timeout_s,
                epoch_ms=epoch_ms,
                parallelism=job.profile.parallelism,
                nic_gbps=nic_gbps,
                transport=transport,
                pfc_priority=pfc_priority,
            )
            out.append(Placed(server, spec))
    if port - 1 > 65535:
        raise UserInputError(f"{port - base_port} workers do not fit ports {base_port}-65535")
    return tuple(out)
