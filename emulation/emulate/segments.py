"""How does a trace whose jobs arrive over time run on the fabric?

One segment per arrival decision of the scheduler: from the arrival (trace
time divided by the compression factor, so scaled time is real time) to the
next arrival, the placed jobs run as replicas with that decision's placement
and shifts. At a boundary every replica finishes the iteration it is in
(the runner's deadline) and the next segment starts the new decision's jobs,
each with the iterations it has left: new jobs start, moved jobs restart on
their new servers, and every paced job's agent is re-aimed at the new grid.

(our choice) Jobs that keep their servers are restarted too (one ring
connection and barrier, well under a second) because a replica takes its
schedule at start; a job leaves when it has run its iterations, as in the
simulator. A job the new decision no longer places (the simulator had it
finish sooner than the fabric did) stops with the iterations it ran: the
decision is the scheduler's, and its servers may now be another job's.
Decisions at departures and ticks are not replayed: between arrivals the
placement stays the arrival's.

Pure: `segments` and `merge` only compute; the runner runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from controlplane.telemetry import LinkDelta, PortDelta
from emulation.jobs.launch import JobPlan
from emulation.jobs.records import IterationRecord
from emulation.jobs.run import RunResult, summarize_job
from scheduler.decisions import Decision


@dataclass(frozen=True)
class Segment:
    """One decision's stretch of the run: wall seconds from the run's start."""

    start_s: float
    end_s: float | None  # None: until every job has run its iterations
    decision: Decision


def segments(decisions: Sequence[Decision], compress: float = 1.0) -> tuple[Segment, ...]:
    """The arrival decisions as consecutive segments (the first starts at 0).

    >>> d = [Decision(0.0, "arrival", {"a": ("s01",)}, {}), Decision(5.0, "tick", {}, {}),
    ...      Decision(30.0, "arrival", {"a": ("s01",), "b": ("s02",)}, {})]
    >>> [(s.start_s, s.end_s, sorted(s.decision.placement)) for s in segments(d, 3.0)]
    [(0.0, 10.0, ['a']), (10.0, None, ['a', 'b'])]
    """
    if compress <= 0:
        raise ValueError(f"compression factor must be > 0, got {compress}")
    arrivals = [d for d in decisions if d.reason == "arrival"]
    out = []
    for i, decision in enumerate(arrivals):
        end = arrivals[i + 1].at_s / compress if i + 1 < len(arrivals) else None
        out.append(Segment(decision.at_s / compress, end, decision))
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
    CPU figures are averaged over the segments, weighted by their length.
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
        fidelity=_weighted_fidelity(results),
        error=" | ".join(errors) if errors else None,
        interrupted=next((r.interrupted for r in results if r.interrupted), None),
    )


def _weighted_fidelity(results: Sequence[RunResult]) -> dict[str, Any]:
    total = sum(r.duration_s for r in results) or 1.0
    merged = dict(results[-1].fidelity)
    for key in ("switch_cpu_cores", "replicas_cpu_cores", "emulated_gbps"):
        values = [(r.fidelity.get(key), r.duration_s) for r in results]
        if all(v is not None for v, _ in values):
            weighted = [float(v) * d for v, d in values if v is not None]
            merged[key] = round(sum(weighted) / total, 4)
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
