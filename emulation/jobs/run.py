"""How does a schedule run on a running emulated fabric, and what did it measure?

    from emulation.fabric import EmulatedFabric
    from emulation.jobs.launch import plan_jobs, read_schedule
    from emulation.jobs.run import RunSettings, run_schedule, write_run

    with EmulatedFabric(topo, 0.001) as fabric:
        jobs = plan_jobs(read_schedule("schedule.json"), topo)
        result = run_schedule(fabric, jobs, RunSettings(iterations=40), out_dir)
        write_run(result, out_dir)

`run_schedule` starts one replica per worker inside its server's Mininet
host through the fabric's lab (each pid is recorded in the run file, so
`cassini clean` finds them after a killed run), polls the switch's counters
over P4Runtime and gNMI with the `ecn watch` library
(`controlplane.telemetry.watch`) while they run, waits for them with a
deadline, and returns a frozen `RunResult`: the records, the counter series,
per-job summaries and fidelity figures. It can be called again on the same
fabric (one call per scheduler, as `cassini emulate` does): every call uses
the fabric's scale, and its own `out_dir` for the replicas' files.

Failures are reported, not raised: a replica that exits non-zero (3 is a
lost peer) ends its job (the others of the job follow within a socket
timeout, and are stopped if they do not), the other jobs run on, and
`RunResult.error` names job, worker, server and peer. A dead switch stops
everything. Ctrl-C or SIGTERM during the run stops every replica and
returns what was recorded so far with `interrupted` naming the signal; the
caller decides whether to go on (the CLI writes the folder, then exits 130).
"""

from __future__ import annotations

import contextlib
import json
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from controlplane.telemetry import Interval, LinkDelta, PortDelta, Snapshot, TelemetryLog
from scheduler.profiles import profile_to_dict

from ..signals import SignalExit, exit_cause, signals_deferred
from .agent import DEFAULT_DRIFT_FRACTION, adjustments_per_minute
from .cpu_usage import cpu_seconds, machine_cpu, machine_fractions, process_tree
from .launch import BASE_PORT, JobPlan, Placed, replica_specs
from .records import IterationRecord, csv_rows, read_records
from .replica import EXIT_PEER_LOST, now_ms
from .transport import CONGESTION_CONTROL

if TYPE_CHECKING:
    from emulation.fabric import EmulatedFabric

REPLICA_FOLDER = "replicas"  # per worker: JOB-wW.jsonl (records) and JOB-wW.log (stderr)
TRANSPORTS = ("tcp",)
# (our choice) Without a deadline a run may take 3x its ideal time plus 30 s
# to connect: long enough for a contended job, short enough that a stall ends.
DEADLINE_FACTOR = 3.0
STARTUP_ALLOWANCE_S = 30.0


@dataclass(frozen=True)
class RunSettings:
    """How one schedule runs: iterations, deadline, agents' drift rule, polling."""

    iterations: int = 40
    deadline_s: float | None = None  # None: DEADLINE_FACTOR x the ideal run + STARTUP_ALLOWANCE_S
    drift_fraction: float | None = DEFAULT_DRIFT_FRACTION  # None: the drift rule is off
    poll_interval_s: float = 0.5  # counter snapshots
    socket_timeout_s: float = 5.0  # a silent peer is lost after this long
    transport: str = "tcp"
    gnmi: bool = True  # also read the interface counters (loss by cause)
    base_port: int = BASE_PORT

    def __post_init__(self) -> None:
        if self.iterations < 1:
            raise ValueError(f"iterations must be >= 1, got {self.iterations}")
        if self.transport not in TRANSPORTS:
            raise ValueError(f"transport {self.transport!r}: only {', '.join(TRANSPORTS)}")
        if self.poll_interval_s <= 0 or self.socket_timeout_s <= 0:
            raise ValueError("poll_interval_s and socket_timeout_s must be > 0")

    def deadline_for(self, jobs: Sequence[JobPlan]) -> float:
        """Seconds the run may take (see `deadline_s`)."""
        if self.deadline_s is not None:
            return self.deadline_s
        slowest = max(max(j.period_ms or 0.0, j.profile.iteration_ms) for j in jobs)
        return DEADLINE_FACTOR * self.iterations * slowest / 1e3 + STARTUP_ALLOWANCE_S


@dataclass(frozen=True)
class Progress:
    """What a progress callback is told about once a second."""

    elapsed_s: float
    records: int  # iterations recorded, summed over workers
    expected: int  # iterations x workers
    ecn_marked: int  # switch ecn_marked so far


@dataclass(frozen=True)
class JobSummary:
    """One job's figures over the run."""

    name: str
    model: str
    workers: int
    servers: tuple[str, ...]
    iterations: int  # iterations every worker recorded
    profile_iteration_ms: float
    mean_iteration_ms: float | None
    p99_iteration_ms: float | None
    ce_marks: int | None  # None: the replicas do not count CE
    adjustments: int
    adjustments_per_minute: float
    error: str | None = None


@dataclass(frozen=True)
class RunResult:
    """Everything one `run_schedule` call measured."""

    jobs: tuple[JobPlan, ...]
    summaries: tuple[JobSummary, ...]
    records: tuple[IterationRecord, ...]
    ports: tuple[PortDelta, ...]
    links: tuple[LinkDelta, ...]
    settings: RunSettings
    scale: float
    emulation_profile: str
    duration_s: float
    fidelity: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    interrupted: str | None = None  # the signal that stopped the run early

    @property
    def switch_ecn_marked(self) -> int:
        """The sum of every port's ecn_marked deltas over the run."""
        return sum(r.ecn_marked_packets for r in self.ports)

    @property
    def host_ce_marks(self) -> int | None:
        counted = [r.ce_marks for r in self.records if r.ce_marks is not None]
        return sum(counted) if counted else None

    def schedule(self) -> dict[str, Any]:
        """The schedule that ran, in the schedule file's keys."""
        return {
            "placement": {j.name: list(j.servers) for j in self.jobs},
            "shifts_ms": {j.name: j.shift_ms for j in self.jobs},
            "periods_ms": {j.name: j.period_ms for j in self.jobs if j.period_ms is not None},
            "models": {j.name: j.model for j in self.jobs},
        }

    def summary(self) -> dict[str, Any]:
        """summary.json."""
        return {
            "jobs": {s.name: asdict(s) for s in self.summaries},
            "switch_ecn_marked": self.switch_ecn_marked,
            "host_ce_marks": self.host_ce_marks,
            "duration_s": round(self.duration_s, 3),
            "error": self.error,
            "interrupted": self.interrupted,
            "settings": asdict(self.settings),
            "emulation_profile": {
                "scale": self.scale,
                "lines": self.emulation_profile.splitlines(),
            },
            "schedule": self.schedule(),
            "fidelity": self.fidelity,
        }


def summarize_job(
    job: JobPlan, records: Sequence[IterationRecord], error: str | None = None
) -> JobSummary:
    """A job's figures from its records (every worker's iterations count once each)."""
    mine = [r for r in records if r.job == job.name]
    times = np.array([r.iteration_ms for r in mine], dtype=float)
    per_worker = [sum(1 for r in mine if r.worker == w) for w in range(job.workers)]
    ce = [r.ce_marks for r in mine if r.ce_marks is not None]
    adjustments = sum(1 for r in mine if r.adjusted and r.worker == 0)
    span = max((r.end_ms for r in mine), default=0.0) - min((r.start_ms for r in mine), default=0.0)
    return JobSummary(
        name=job.name,
        model=job.model,
        workers=job.workers,
        servers=job.servers,
        iterations=min(per_worker, default=0),
        profile_iteration_ms=round(job.profile.iteration_ms, 3),
        mean_iteration_ms=round(float(times.mean()), 3) if times.size else None,
        p99_iteration_ms=round(float(np.percentile(times, 99)), 3) if times.size else None,
        ce_marks=sum(ce) if ce else None,
        adjustments=adjustments,
        adjustments_per_minute=round(adjustments_per_minute(adjustments, span), 3),
        error=error,
    )


def write_run(result: RunResult, folder: str | Path) -> list[Path]:
    """iterations.csv, summary.json, ecn.csv / ecn-links.csv, schedule.json, profiles.json
    and emulation-profile.txt into `folder` (the replicas' own files are already there)."""
    import csv

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "iterations.csv", out / "summary.json", out / "schedule.json"]
    with written[0].open("w", newline="") as fh:
        csv.writer(fh).writerows(csv_rows(result.records))
    written[1].write_text(json.dumps(result.summary(), indent=1) + "\n")
    written[2].write_text(json.dumps(result.schedule(), indent=1) + "\n")
    profiles = out / "profiles.json"
    profiles.write_text(
        json.dumps([profile_to_dict(j.profile) | {"name": j.name} for j in result.jobs], indent=1)
        + "\n"
    )
    emulation = out / "emulation-profile.txt"
    emulation.write_text(result.emulation_profile + "\n")
    log = TelemetryLog(list(result.ports), list(result.links))
    return [*written, profiles, emulation, *log.write(out / "ecn.csv")]


# --- the run ----------------------------------------------------------------------------


class _CounterWatch:
    """The `ecn watch` loop in a thread of its own, with one last snapshot at the end."""

    def __init__(self, fabric: EmulatedFabric, settings: RunSettings) -> None:
        self.fabric = fabric
        self.settings = settings
        self.log = TelemetryLog()
        self.marked = 0
        self.error: str | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="run-counters", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(self.fabric.timeout)

    def _record(self, done: Interval) -> None:
        self.log.add(done.ports, done.links)
        self.marked += sum(r.ecn_marked_packets for r in done.ports)

    def _run(self) -> None:
        from controlplane.gnmi import GnmiReader
        from controlplane.telemetry import snapshot, watch

        last = [False]

        def wait(seconds: float) -> bool:
            if last[0]:
                return True
            last[0] = self._stop.wait(seconds)
            return False  # after a stop: one more snapshot, then the loop ends

        reader = None
        try:
            assert self.fabric.grpc_address is not None
            if self.settings.gnmi:
                reader = GnmiReader(self.fabric.grpc_address, self.fabric.timeout)
            ports = self.fabric.chip.ports()  # the cells the fabric uses, not all 512
            with self.fabric.session() as session:

                def take() -> Snapshot:
                    snap = snapshot(
                        session, interfaces=reader.read if reader else None, ports=ports
                    )
                    self._ready.set()
                    return snap

                interval = self.settings.poll_interval_s
                watch(
                    take, interval, self._record, stop=self._stop, chip=self.fabric.chip, wait=wait
                )
        except Exception as err:  # reported with the run, not raised in a thread
            self.error = f"counter polling failed: {err}"
        finally:
            self._ready.set()
            if reader is not None:
                reader.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.fabric.timeout + 5)


@dataclass
class _Worker:
    placed: Placed
    process: subprocess.Popen[Any]
    log_path: Path
    log: IO[str]

    @property
    def job(self) -> str:
        return self.placed.spec.job

    def describe_failure(self) -> str:
        """Why this replica ended badly: its own last line, or the signal that killed it."""
        spec, rc = self.placed.spec, self.process.returncode
        where = f"worker {spec.worker} ({self.placed.server})"
        lines = [ln for ln in _read_text(self.log_path).splitlines() if ln.strip()]
        if rc == EXIT_PEER_LOST and lines:
            return lines[-1].removeprefix("replica: ")
        last = f": {lines[-1]}" if lines else ""
        return f"job {spec.job}: {where} {exit_cause(rc)}{last}"


def _read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _count_lines(path: str) -> int:
    try:
        with open(path, "rb") as fh:
            return sum(1 for _ in fh)
    except OSError:
        return 0


def _prepare_hosts(fabric: EmulatedFabric, servers: Sequence[str]) -> None:
    """ECN on in every host the run uses (`tcp_ecn` is per namespace; the
    replicas choose their congestion control per socket, `transport`)."""
    for server in servers:
        fabric.run(server, ["sysctl", "-qw", "net.ipv4.tcp_ecn=1"])


def _stop_workers(workers: Sequence[_Worker], grace_s: float = 2.0) -> None:
    for w in workers:
        if w.process.poll() is None:
            w.process.terminate()
    end = time.monotonic() + grace_s
    for w in workers:
        with contextlib.suppress(subprocess.TimeoutExpired):
            w.process.wait(max(0.0, end - time.monotonic()))
        if w.process.poll() is None:
            w.process.kill()
            w.process.wait()


def run_schedule(
    fabric: EmulatedFabric,
    jobs: Sequence[JobPlan],
    settings: RunSettings,
    out_dir: str | Path,
    progress: Callable[[Progress], None] | None = None,
) -> RunResult:
    """Run `jobs` on `fabric` until every replica ends; see the module docstring."""
    if not jobs:
        raise ValueError("no jobs to run")
    if fabric.grpc_address is None:
        raise RuntimeError("the fabric is not running")
    folder = Path(out_dir) / REPLICA_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    servers = list(dict.fromkeys(s for j in jobs for s in j.servers))
    _prepare_hosts(fabric, servers)
    deadline_s = settings.deadline_for(jobs)
    epoch = now_ms()
    placed = replica_specs(
        jobs,
        {s: fabric.hosts[s].ip for s in servers},
        folder,
        settings.iterations,
        fabric.profile.scale,
        epoch_ms=epoch,
        deadline_ms=epoch + deadline_s * 1e3,
        drift_fraction=settings.drift_fraction,
        timeout_s=settings.socket_timeout_s,
        base_port=settings.base_port,
        nic_gbps=fabric.topo.nic_gbps(),
    )
    slowest_ms = max(max(j.period_ms or 0.0, j.profile.iteration_ms) for j in jobs)
    hard_limit = (
        time.monotonic() + deadline_s + 2 * settings.socket_timeout_s + 2 * slowest_ms / 1e3
    )
    watcher = _CounterWatch(fabric, settings)
    watcher.start()
    switch_pids = process_tree(fabric.switch_pid) if fabric.switch_pid else []
    cpu_before = (
        cpu_seconds(switch_pids),
        machine_cpu(),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    began = time.monotonic()
    workers: list[_Worker] = []
    failed: dict[str, float] = {}  # job -> when its first replica failed
    # job -> (lost a peer?, what the replica said) of each failed replica, in order
    failures: dict[str, list[tuple[bool, str]]] = {}
    judged: set[int] = set()  # workers already reported (or stopped by us)
    error: str | None = None
    interrupted: str | None = None
    try:
        for p in placed:
            log_path = Path(p.spec.out).with_suffix(".log")
            log = log_path.open("w")
            ns = fabric.hosts[p.server].namespace
            process = fabric.lab.popen(
                ns, p.spec.argv(sys.executable), stdout=subprocess.DEVNULL, stderr=log, text=True
            )
            workers.append(_Worker(p, process, log_path, log))
        next_report = began
        expected = settings.iterations * len(placed)
        while True:
            now = time.monotonic()
            for index, w in enumerate(workers):
                rc = w.process.poll()
                if rc is None or rc == 0 or index in judged:
                    continue
                judged.add(index)
                failures.setdefault(w.job, []).append((rc == EXIT_PEER_LOST, w.describe_failure()))
                failed.setdefault(w.job, now)
            for job, when in failed.items():
                # The job's others follow within a socket timeout; past it they are stopped.
                if now - when > settings.socket_timeout_s + 2.0:
                    stragglers = [w for w in workers if w.job == job and w.process.poll() is None]
                    judged.update(workers.index(w) for w in stragglers)
                    _stop_workers(stragglers, grace_s=1.0)
            if all(w.process.poll() is not None for w in workers):
                break
            switch = fabric.switch_failure()
            if switch is not None:
                error = f"the switch stopped during the run: {switch}"
                break
            if now > hard_limit:
                late = sorted({w.job for w in workers if w.process.poll() is None})
                error = (
                    f"deadline: job(s) {', '.join(late)} still running {deadline_s:.0f} s after "
                    "the start (plus grace); stopped"
                )
                break
            if progress is not None and now >= next_report:
                written = sum(_count_lines(p.spec.out) for p in placed)
                progress(Progress(round(now - began, 1), written, expected, watcher.marked))
                next_report = now + 1.0
            time.sleep(0.1)
    except (KeyboardInterrupt, SignalExit) as stop:
        interrupted = stop.signal_name if isinstance(stop, SignalExit) else "SIGINT"
    finally:
        with signals_deferred(redeliver=False):
            _stop_workers(workers)
            for w in workers:
                w.log.close()
            duration = time.monotonic() - began
            time.sleep(min(0.3, settings.poll_interval_s))  # the last frames reach the counters
            cpu_after = (
                cpu_seconds(switch_pids),
                machine_cpu(),
                resource.getrusage(resource.RUSAGE_CHILDREN),
            )
            watcher.stop()
    records = tuple(
        r for p in placed if Path(p.spec.out).exists() for r in read_records(p.spec.out)
    )
    # The cause first: a replica that died of its own (a signal, an error) before the
    # peers that lost it (exit EXIT_PEER_LOST), which one poll may see in any order.
    job_errors = {
        job: "; ".join(text for _, text in sorted(found, key=lambda f: f[0]))
        for job, found in failures.items()
    }
    if job_errors and error is None:
        error = " | ".join(f"job {job} failed: {text}" for job, text in job_errors.items())
    if watcher.error and error is None:
        error = watcher.error
    summaries = tuple(summarize_job(j, records, job_errors.get(j.name)) for j in jobs)
    fidelity = _fidelity(records, cpu_before, cpu_after, duration, fabric.profile.scale)
    return RunResult(
        jobs=tuple(jobs),
        summaries=summaries,
        records=records,
        ports=tuple(watcher.log.ports),
        links=tuple(watcher.log.links),
        settings=settings,
        scale=fabric.profile.scale,
        emulation_profile=fabric.profile.describe(fabric.chip),
        duration_s=duration,
        fidelity=fidelity,
        error=error,
        interrupted=interrupted,
    )


def _fidelity(
    records: Sequence[IterationRecord],
    before: tuple[float, Any, Any],
    after: tuple[float, Any, Any],
    duration_s: float,
    scale: float,
) -> dict[str, Any]:
    """CPU of the switch, the replicas and the machine over the run, per emulated Gbit/s."""
    seconds = max(duration_s, 1e-9)
    replicas_cpu = (after[2].ru_utime + after[2].ru_stime) - (
        before[2].ru_utime + before[2].ru_stime
    )
    gbit = sum(r.bytes for r in records) * 8 / 1e9
    return {
        "switch_cpu_cores": round((after[0] - before[0]) / seconds, 3),
        "replicas_cpu_cores": round(replicas_cpu / seconds, 3),
        "machine_cpu": machine_fractions(before[1], after[1]) | {"cores": after[1].cores},
        "emulated_gbps": round(gbit / seconds, 6),
        "replicas_cpu_s_per_emulated_gbit": round(replicas_cpu / gbit, 3) if gbit else None,
        "transport": f"kernel TCP with ECN (tcp_ecn=1), congestion control {CONGESTION_CONTROL}",
        "scale": scale,
    }
