"""How are a schedule's replicas started, watched and stopped on a running fabric?

    from emulation.fabric.emulated import EmulatedFabric
    from emulation.fabric.options import FabricOptions
    from emulation.jobs.launch import parse_schedule, plan_jobs, read_schedule
    from emulation.jobs.run_folder import write_run
    from emulation.jobs.run_settings import RunSettings
    from emulation.jobs.supervisor import run_schedule

    with EmulatedFabric(topo, FabricOptions(scale=0.001)) as fabric:
        jobs = plan_jobs(parse_schedule(read_schedule("schedule.json")), topo)
        result = run_schedule(fabric, jobs, RunSettings(iterations=40), out_dir)
        write_run(result, out_dir)

`run_schedule` starts one replica per worker inside its server's Mininet
host through the fabric's lab (each pid is recorded in the run file, so
`cassini clean` finds them after a killed run), polls the switch's counters
over P4Runtime and gNMI with the `ecn watch` poller
(`controlplane.counter_watch.CounterWatch`) while they run, waits for them
with a deadline, and returns a frozen `run_result.RunResult`: the records,
the counter series, per-job summaries and fidelity figures. It can be
called again on the same fabric (one call per scheduler, as `cassini
emulate` does): every call uses the fabric's scale, and its own `out_dir`
for the replicas' files.

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
import math
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from controlplane.counter_watch import CounterSource, CounterWatch
from emulation.housekeeping.signals import SignalExit, exit_cause, signals_deferred

from .cpu_usage import cpu_seconds, machine_cpu, machine_fractions, process_tree
from .job_telemetry import RunTelemetry
from .launch import JobPlan, Placed, replica_specs
from .policy_entries import PolicyClasses, run_record
from .queue_class_rows import write_queue_classes
from .queue_class_watch import QueueClassWatch
from .records import IterationRecord, read_records
from .replica import EXIT_PEER_LOST, now_ms
from .roce_classes import RoceClasses
from .roce_classes import for_run as roce_classes
from .run_folder import REPLICA_FOLDER
from .run_result import Progress, RunResult, host_lateness, summarize_job
from .run_settings import CLASS_POLICIES, RunSettings
from .telemetry_rows import link_names
from .transport import CONGESTION_CONTROL

if TYPE_CHECKING:
    from emulation.fabric.emulated import EmulatedFabric


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
        transport=settings.transport,
        pfc_priority=fabric.profile.tm.pfc.priority,  # one setting for switch and hosts
    )
    placed = with_policy(placed, settings.policy)
    for p in placed:  # a folder used before keeps no records: replicas append to their file
        Path(p.spec.out).unlink(missing_ok=True)
    slowest_ms = max(max(j.period_ms or 0.0, j.profile.iteration_ms) for j in jobs)
    hard_limit = (
        time.monotonic() + deadline_s + 2 * settings.socket_timeout_s + 2 * slowest_ms / 1e3
    )
    source = CounterSource(
        fabric.grpc_address,
        fabric.options.device_id,
        gnmi=fabric.grpc_address if settings.gnmi else None,
        timeout_s=fabric.timeout,
    )
    watcher = CounterWatch(source, settings.poll_interval_s, fabric.chip)
    telemetry = RunTelemetry(fabric, placed, settings.gnmi)
    classes: PolicyClasses | None = None
    queue_watch: QueueClassWatch | None = None
    roce: RoceClasses | None = None
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
    # The pollers start inside the try: a Ctrl-C while one starts still stops and closes
    # every one started (a gRPC channel left to the garbage collector hung the exit).
    try:
        watcher.start()
        telemetry.start()  # job classes, 10 ms samples
        # Crux / EchelonFlow: the plan's queue classes, installed as the replicas connect
        if settings.policy in CLASS_POLICIES:
            classes = PolicyClasses(fabric, jobs, placed, settings.policy).start()
        if classes is not None and settings.gnmi:  # what each class sent: queue_classes.csv
            queue_watch = QueueClassWatch.over_gnmi(
                fabric.grpc_address, link_names(fabric.chip), settings.poll_interval_s,
                fabric.timeout,
            ).start()  # fmt: skip
        # RoCE (mltcp too): data in the PFC priority's class, TCP alone in class 0
        roce = roce_classes(fabric, settings.transport)
        cpu_before = (  # the run's CPU from here: the pollers' start is not the jobs'
            cpu_seconds(switch_pids),
            machine_cpu(),
            resource.getrusage(resource.RUSAGE_CHILDREN),
        )
        began = time.monotonic()
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
            # (our choice) the replicas connect within a minute, else their flows stay in 0
            if classes and not classes.complete and now < began + 60:
                # every pass: the replicas start 100 ms after they connect
                classes.poll({w.placed.server: w.process.pid for w in workers})
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
            # A switch that died took its CPU figures with it: unknown, not a difference.
            switch_alive = fabric.switch_failure() is None
            cpu_after = (
                cpu_seconds(switch_pids) if switch_alive else math.nan,
                machine_cpu(),
                resource.getrusage(resource.RUSAGE_CHILDREN),
            )
            watcher.stop()
            if classes is not None:
                classes.stop()
            if roce is not None:
                roce.stop()
            series = telemetry.stop()
            if queue_watch is not None:
                write_queue_classes(out_dir, queue_watch.stop())
                series.info["queue_classes_error"] = queue_watch.error
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
    fidelity["transport"] = describe_transport(settings.transport)
    if roce is not None:
        fidelity["roce_classes"] = roce.record()
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
        telemetry=tuple(series.rows),
        queues=tuple(series.queues),
        telemetry_info=series.info,
        network_policy=run_record(settings.policy, classes.record() if classes else None),
    )


def with_policy(placed: Sequence[Placed], policy: str) -> tuple[Placed, ...]:
    """The replicas under the run's network policy: with `mltcp` the hosts' congestion
    control must make the turns, so every replica runs MLTCP and no agent paces (no
    shift, no period); otherwise as placed."""
    if policy != "mltcp":
        return tuple(placed)
    return tuple(
        Placed(p.server, replace(p.spec, mltcp=True, shift_ms=0.0, period_ms=None)) for p in placed
    )


def describe_transport(transport: str) -> str:
    """What carried the collectives, for summary.json."""
    if transport == "roce":
        return "RoCEv2 from user space (go-back-N, DCQCN, PFC honoured by the hosts)"
    return f"kernel TCP with ECN (tcp_ecn=1), congestion control {CONGESTION_CONTROL}"


def _fidelity(
    records: Sequence[IterationRecord],
    before: tuple[float, Any, Any],
    after: tuple[float, Any, Any],
    duration_s: float,
    scale: float,
) -> dict[str, Any]:
    """CPU of the switch, the replicas and the machine over the run, per emulated Gbit/s,
    and the replicas' own lateness (`host_lateness`, under "hosts")."""
    seconds = max(duration_s, 1e-9)
    replicas_cpu = (after[2].ru_utime + after[2].ru_stime) - (
        before[2].ru_utime + before[2].ru_stime
    )
    gbit = sum(r.bytes for r in records) * 8 / 1e9
    switch_cpu = (after[0] - before[0]) / seconds  # NaN when the switch died during the run
    return {
        "switch_cpu_cores": round(switch_cpu, 3) if switch_cpu >= 0 else None,
        "replicas_cpu_cores": round(replicas_cpu / seconds, 3),
        "machine_cpu": machine_fractions(before[1], after[1]) | {"cores": after[1].cores},
        "emulated_gbps": round(gbit / seconds, 6),
        "replicas_cpu_s_per_emulated_gbit": round(replicas_cpu / gbit, 3) if gbit else None,
        "transport": f"kernel TCP with ECN (tcp_ecn=1), congestion control {CONGESTION_CONTROL}",
        "scale": scale,
        "hosts": host_lateness(records),
    }
