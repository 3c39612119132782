"""How does a trace whose jobs arrive and leave over time run on the fabric?

One segment per decision of the scheduler that changes something for the
jobs in the fabric, at any event (arrival, departure, tick): from the
decision (its trace time divided by the compression factor, so scaled time
is real time; the plan's times are already compressed) to the next such
decision, the jobs run as replicas with that decision's placement and
shifts. A decision changes something (`changes`) when it starts a job (an
arrival, or a waiting job placed at a departure or a tick), stops one the
scheduler still holds (waiting or preempted), moves a job, or gives a job
that keeps its servers another shift or period. A decision that changes
nothing (a tick with the same placement and shifts, a departure that only
frees servers) is no boundary: nothing restarts, since a restart costs a
barrier and a connection set-up. At a boundary every replica finishes the
iteration it is in (the runner's deadline) and the next segment starts the
decision's jobs, each with the iterations it has left.

(our choice) When a boundary comes: at the decision's trace time, the
scheduler's clock, for departures too. The simulator's departure is when it
predicts the job leaves; in the fabric the job leaves when its replicas
have run their iterations, earlier or later. Ending the segment when the
departing job's replicas actually finish (what a cluster scheduler does)
needs a way to tell the others, already running, to stop after their
current iteration: a replica takes its deadline at start and stops only
where its ring agrees on it, and stopping it by a signal loses the
iteration in flight and can leave its workers a record apart. So the fabric
applies each decision when the scheduler made it, the same rule as for
arrivals; the simulator and the fabric are meant to agree within 15% per
job, and so do their departure times.

(our choice) A job that the decision no longer holds because the simulator
had it finish sooner than the fabric does runs on to its iterations on its
servers with the grid it had (`carried`), unless the decision gives one of
its servers to another job: then it stops with the iterations it ran (the
decision is the scheduler's, and the servers are another job's now). A job
the scheduler still holds but does not place (waiting or preempted) stops.

(our choice) Jobs that keep their servers and shifts are restarted too at a
boundary (one ring connection and barrier, well under a second) because a
replica takes its schedule at start; a changed shift alone is applied the
same way, by restarting that job's replicas (and the others of the
segment) with the new shift. Every restarted paced job's grid is anchored
at the segment's start, so the shifts stay relative to one another (the
simulator re-aligns at a new schedule the same way: shifts are relative to
the decision's time). A decision without a new schedule (`new_schedule`
False, so no shifts in it) keeps each agent's grid for the jobs that keep
their servers (`kept_grids`); a moved job then runs free, as in the
simulator.

Pure: `segments`, `changes`, `kept_grids`, `carried` and `merge` only
compute; the runner runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from controlplane.telemetry import LinkDelta, PortDelta
from emulation.jobs.launch import JobPlan
from emulation.jobs.policy_entries import merged_record
from emulation.jobs.records import IterationRecord
from emulation.jobs.run_result import RunResult, host_lateness, summarize_job
from scheduler.simulator.decisions import Decision


@dataclass(frozen=True)
class Segment:
    """One stretch of the run between two boundaries: wall seconds from the run's start.

    `decision` is the scheduler's decision that opened it (with the grids its
    agents keep); `runs` is what the fabric runs: that decision plus the jobs
    carried over from before (`carried`).
    """

    start_s: float
    end_s: float | None  # None: until every job has run its iterations
    decision: Decision
    runs: Decision
    why: tuple[str, ...] = ()  # what `decision` changed (`changes`); () for the first

    def record(self) -> dict[str, Any]:
        """segment.json: when the segment was due, which decision opened it and why."""
        return {
            "start_s": round(self.start_s, 3),
            "end_s": None if self.end_s is None else round(self.end_s, 3),
            "decision_at_s": round(self.decision.at_s, 3),
            "reason": self.decision.reason,
            "why": list(self.why),
        }


def kept_grids(applied: Decision, decision: Decision) -> Decision:
    """`decision` with the shifts and periods its agents keep from `applied`.

    Without a new schedule every job that keeps its servers keeps its grid;
    a moved or new job runs free (as `scheduler.simulator` does).

    >>> a = Decision(0.0, "arrival", {"a": ("s1",), "b": ("s2",)}, {}, {"a": 5.0, "b": 0.0},
    ...              {"a": 90.0, "b": 90.0}, True)
    >>> d = kept_grids(a, Decision(3.0, "departure", {"a": ("s1",), "b": ("s3",)}, {}))
    >>> dict(d.shifts_ms), dict(d.periods_ms)
    ({'a': 5.0}, {'a': 90.0})
    """
    if decision.new_schedule:
        return decision
    kept = [
        job
        for job, servers in decision.placement.items()
        if sorted(applied.placement.get(job, ())) == sorted(servers)
    ]
    return replace(
        decision,
        shifts_ms={j: applied.shifts_ms[j] for j in kept if j in applied.shifts_ms},
        periods_ms={j: applied.periods_ms[j] for j in kept if j in applied.periods_ms},
    )


def changes(applied: Decision, decision: Decision) -> tuple[str, ...]:
    """What `decision` (with `kept_grids`) changes for the jobs `applied` runs; empty: nothing.

    A job `applied` runs that `decision` no longer knows has finished in the
    simulator: its leaving changes nothing by itself.

    >>> a = Decision(0.0, "arrival", {"a": ("s1",), "b": ("s2",)}, {"a": "m", "b": "m"},
    ...              {"a": 0.0, "b": 40.0}, {"a": 90.0, "b": 90.0}, True)
    >>> changes(a, replace(a, at_s=5.0, reason="tick"))
    ()
    >>> changes(a, replace(a, at_s=5.0, reason="tick", shifts_ms={"a": 0.0, "b": 10.0}))
    ('b: shift 40.0 -> 10.0 ms',)
    >>> changes(a, Decision(6.0, "departure", {"b": ("s2",), "c": ("s1",)}, {"b": "m", "c": "m"},
    ...                     {"b": 40.0, "c": 0.0}, {"b": 90.0, "c": 90.0}, True))
    ('c: starts',)
    """
    out = []
    for job, servers in decision.placement.items():
        before = applied.placement.get(job)
        if before is None:
            out.append(f"{job}: starts")
        elif sorted(before) != sorted(servers):
            out.append(f"{job}: moves {','.join(before)} -> {','.join(servers)}")
        else:
            for what, old, new in (
                ("shift", applied.shifts_ms.get(job), decision.shifts_ms.get(job)),
                ("period", applied.periods_ms.get(job), decision.periods_ms.get(job)),
            ):
                if old != new:
                    out.append(f"{job}: {what} {_text(old)} -> {_text(new)} ms")
    for job in applied.placement:
        if job not in decision.placement and job in decision.models:
            out.append(f"{job}: stops (the scheduler holds it back)")
    return tuple(out)


def _text(value: float | None) -> str:
    return "none" if value is None else f"{value:.1f}"


def carried(before: Decision, decision: Decision) -> Decision:
    """`decision` plus the jobs `before` ran that the simulator finished and whose servers
    `decision` leaves free (they run on with their grid; see the module docstring).

    >>> a = Decision(0.0, "arrival", {"a": ("s1",), "b": ("s2",)}, {"a": "m", "b": "m"},
    ...              {"a": 0.0}, {"a": 90.0}, True)
    >>> d = Decision(4.0, "departure", {"c": ("s3",)}, {"c": "m"})
    >>> sorted(carried(a, d).placement), dict(carried(a, d).shifts_ms)
    (['a', 'b', 'c'], {'a': 0.0})
    >>> sorted(carried(a, replace(d, placement={"c": ("s2",)})).placement)
    ['a', 'c']
    """
    taken = {s for servers in decision.placement.values() for s in servers}
    on = {
        job: servers
        for job, servers in before.placement.items()
        if job not in decision.models and not taken.intersection(servers)
    }
    if not on:
        return decision
    return replace(
        decision,
        placement={**on, **decision.placement},
        models={**{j: before.models[j] for j in on if j in before.models}, **decision.models},
        shifts_ms={**{j: before.shifts_ms[j] for j in on if j in before.shifts_ms},
                   **decision.shifts_ms},
        periods_ms={**{j: before.periods_ms[j] for j in on if j in before.periods_ms},
                    **decision.periods_ms},
    )  # fmt: skip


def segments(decisions: Sequence[Decision], compress: float = 1.0) -> tuple[Segment, ...]:
    """The decisions that change something (`changes`) as consecutive segments.

    The first decision opens the first segment; a tick that changes nothing
    is no boundary, one that changes a shift is:

    >>> p = {"a": ("s01",)}
    >>> d = [Decision(0.0, "arrival", p, {"a": "m"}, {"a": 0.0}, {"a": 90.0}, True),
    ...      Decision(5.0, "tick", p, {"a": "m"}, {"a": 0.0}, {"a": 90.0}, True),
    ...      Decision(30.0, "arrival", {**p, "b": ("s02",)}, {"a": "m", "b": "m"}),
    ...      Decision(45.0, "tick", {**p, "b": ("s02",)}, {"a": "m", "b": "m"},
    ...               {"a": 0.0, "b": 30.0}, {"a": 90.0, "b": 90.0}, True)]
    >>> for s in segments(d, 3.0):
    ...     print(s.start_s, s.end_s, s.decision.reason, sorted(s.runs.placement))
    0.0 10.0 arrival ['a']
    10.0 15.0 arrival ['a', 'b']
    15.0 None tick ['a', 'b']
    """
    if compress <= 0:
        raise ValueError(f"compression factor must be > 0, got {compress}")
    opened: list[tuple[Decision, Decision, tuple[str, ...]]] = []  # scheduler's, runs, why
    applied: Decision | None = None  # the scheduler's latest, with the grids kept
    runs: Decision | None = None
    for raw in decisions:
        decision = raw if applied is None else kept_grids(applied, raw)
        why = () if runs is None else changes(runs, decision)
        if runs is None or why:
            runs = decision if runs is None else carried(runs, decision)
            opened.append((decision, runs, why))
        applied = decision
    out = []
    for i, (decision, running, why) in enumerate(opened):
        end = opened[i + 1][0].at_s / compress if i + 1 < len(opened) else None
        out.append(Segment(decision.at_s / compress, end, decision, running, why))
    return tuple(out)


def iterations_done(records: Sequence[IterationRecord]) -> dict[str, int]:
    """Per job, the iterations every one of its workers finished."""
    per: dict[str, dict[int, int]] = {}
    for r in records:
        per.setdefault(r.job, {}).setdefault(r.worker, 0)
        per[r.job][r.worker] += 1
    return {job: min(workers.values()) for job, workers in per.items()}


def _renumbered(
    records: Sequence[IterationRecord], offset: Mapping[str, int]
) -> list[IterationRecord]:
    return [replace(r, iteration=r.iteration + offset.get(r.job, 0)) for r in records]


def _shifted(rows: Sequence[Any], by_s: float) -> list[Any]:
    return [replace(r, time_s=r.time_s + by_s) for r in rows]


def merge(
    results: Sequence[RunResult], starts_s: Sequence[float], jobs: Sequence[JobPlan]
) -> RunResult:
    """One run's result from its segments: iterations numbered on, counter series on one clock.

    `starts_s[i]` is when segment i's counter watch began, from the run's
    start; `jobs` the run's jobs as last placed (for the per-job summaries).
    CPU figures are averaged over the segments, weighted by their length; the
    replicas' lateness (`host_lateness`) is taken over every segment's records.
    """
    if not results:
        raise ValueError("no segments to merge")
    records: list[IterationRecord] = []
    ports: list[PortDelta] = []
    links: list[LinkDelta] = []
    done: dict[str, int] = {}
    for result, start in zip(results, starts_s, strict=True):
        records += _renumbered(result.records, done)
        for job, n in iterations_done(result.records).items():
            done[job] = done.get(job, 0) + n
        ports += _shifted(result.ports, start)
        links += _shifted(result.links, start)
    duration = sum(r.duration_s for r in results)
    errors = [r.error for r in results if r.error]
    last = results[-1]
    return replace(
        last,
        jobs=tuple(jobs),
        summaries=tuple(summarize_job(j, records) for j in jobs),
        records=tuple(records),
        ports=tuple(ports),
        links=tuple(links),
        duration_s=duration,
        fidelity=_weighted_fidelity(results) | {"hosts": host_lateness(records)},
        error=" | ".join(errors) if errors else None,
        interrupted=next((r.interrupted for r in results if r.interrupted), None),
        # wall-clock samples: the segments' rows concatenate as they are
        telemetry=tuple(row for r in results for row in r.telemetry),
        queues=tuple(row for r in results for row in r.queues),
        network_policy=merged_record([r.network_policy for r in results]),
    )


def _weighted_fidelity(results: Sequence[RunResult]) -> dict[str, Any]:
    total = sum(r.duration_s for r in results) or 1.0
    merged = dict(results[-1].fidelity)
    for key in ("switch_cpu_cores", "replicas_cpu_cores", "emulated_gbps"):
        values = [(r.fidelity.get(key), r.duration_s) for r in results]
        if all(v is not None for v, _ in values):
            weighted = [float(v) * d for v, d in values if v is not None]
            merged[key] = round(sum(weighted) / total, 4)
        else:  # a segment without the figure (its switch died): the whole is unknown
            merged[key] = None
    machines = [(r.fidelity.get("machine_cpu") or {}, r.duration_s) for r in results]
    if all(m for m, _ in machines):
        merged["machine_cpu"] = {
            **machines[-1][0],
            **{
                k: round(sum(m[k] * d for m, d in machines) / total, 4)
                for k in ("busy", "steal")
                if all(k in m for m, _ in machines)
            },
        }
    merged["segments"] = len(results)
    return merged
