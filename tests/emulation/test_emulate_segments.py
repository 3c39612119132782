"""Which of a scheduler's decisions become segment boundaries, and what each segment runs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pytest

from emulation.emulate.plan import plan_trace
from emulation.emulate.segments import carried, changes, kept_grids, segments
from scheduler.simulator.decisions import Decision
from scheduler.workloads.traces import TraceJob
from topologies.library import load_topology

M = {"a": "vgg19", "b": "vgg16", "c": "resnet50"}
AB: dict[str, tuple[str, ...]] = {"a": ("s01", "s02"), "b": ("s03", "s04")}


def _paced(
    at: float,
    reason: str,
    placement: Mapping[str, tuple[str, ...]],
    shifts: dict[str, float],
    period: float = 250.0,
) -> Decision:
    models = {j: M[j] for j in placement}
    return Decision(at, reason, placement, models, shifts, dict.fromkeys(shifts, period), True)


def test_a_tick_that_changes_nothing_is_no_boundary_one_that_changes_a_shift_is() -> None:
    first = _paced(0.0, "arrival", AB, {"a": 0.0, "b": 40.0})
    same = _paced(5.0, "tick", AB, {"a": 0.0, "b": 40.0})
    moved = _paced(9.0, "tick", AB, {"a": 0.0, "b": 120.0})
    parts = segments([first, same, moved], compress=2.0)
    assert [(p.start_s, p.end_s, p.decision.reason) for p in parts] == [
        (0.0, 4.5, "arrival"),
        (4.5, None, "tick"),
    ]
    assert parts[1].why == ("b: shift 40.0 -> 120.0 ms",)
    assert dict(parts[1].runs.shifts_ms) == {"a": 0.0, "b": 120.0}
    assert segments([first, same]) == segments([first])[:1]


def test_a_changed_period_or_a_move_is_a_boundary() -> None:
    first = _paced(0.0, "arrival", AB, {"a": 0.0, "b": 40.0})
    assert changes(first, _paced(1.0, "tick", AB, {"a": 0.0, "b": 40.0}, 300.0)) == (
        "a: period 250.0 -> 300.0 ms",
        "b: period 250.0 -> 300.0 ms",
    )
    swapped = {"a": ("s01", "s03"), "b": ("s02", "s04")}
    why = changes(first, _paced(1.0, "tick", swapped, {"a": 0.0, "b": 40.0}))
    assert why == ("a: moves s01,s02 -> s01,s03", "b: moves s03,s04 -> s02,s04")


def test_a_departure_that_only_frees_servers_restarts_nothing() -> None:
    first = _paced(0.0, "arrival", AB, {"a": 0.0, "b": 40.0})
    gone = Decision(3.0, "departure", {"b": AB["b"]}, {"b": "vgg16"})  # a finished, no schedule
    assert changes(first, kept_grids(first, gone)) == ()
    assert len(segments([first, gone])) == 1


def test_a_departure_that_starts_a_waiting_job_and_re_aims_another_is_a_boundary() -> None:
    first = _paced(0.0, "arrival", AB, {"a": 0.0, "b": 40.0})
    # c arrives and waits: no new schedule (the agents keep their grids), nothing changes
    waits = Decision(0.5, "arrival", AB, {**M})
    departs = _paced(3.0, "departure", {"b": AB["b"], "c": AB["a"]}, {"b": 10.0, "c": 0.0})
    parts = segments([first, waits, departs])
    assert [p.decision.reason for p in parts] == ["arrival", "departure"]
    assert parts[0].end_s == parts[1].start_s == 3.0
    assert parts[1].why == ("b: shift 40.0 -> 10.0 ms", "c: starts")
    # the departure's schedule is what runs; a's servers are c's now, so a does not run on
    schedule = parts[1].runs.as_schedule()
    assert schedule.placement == {"b": ("s03", "s04"), "c": ("s01", "s02")}
    assert schedule.shifts_ms == {"b": 10.0, "c": 0.0}
    assert parts[1].record()["why"] == list(parts[1].why)


def test_without_a_new_schedule_jobs_keep_their_grids_and_a_moved_one_runs_free() -> None:
    first = _paced(0.0, "arrival", AB, {"a": 0.0, "b": 40.0})
    moved = Decision(2.0, "tick", {"a": AB["a"], "b": ("s04", "s05")}, {"a": "vgg19", "b": "vgg16"})
    kept = kept_grids(first, moved)
    assert dict(kept.shifts_ms) == {"a": 0.0} and dict(kept.periods_ms) == {"a": 250.0}
    parts = segments([first, moved])
    assert parts[1].why == ("b: moves s03,s04 -> s04,s05",)
    assert parts[1].runs.as_schedule().shifts_ms == {"a": 0.0}


def test_a_job_the_simulator_finished_runs_on_where_its_servers_are_free() -> None:
    first = _paced(0.0, "arrival", AB, {"a": 0.0, "b": 40.0})
    # the simulator had a finish; c starts elsewhere: a, if the fabric has not finished it, runs on
    starts = _paced(2.0, "departure", {"b": AB["b"], "c": ("s05",)}, {"b": 40.0, "c": 0.0})
    runs = segments([first, starts])[1].runs
    assert sorted(runs.placement) == ["a", "b", "c"]
    assert runs.shifts_ms["a"] == 0.0 and runs.periods_ms["a"] == 250.0
    assert runs.models["a"] == "vgg19"
    assert carried(first, replace(starts, placement={"b": AB["b"], "c": ("s02",)})).placement == {
        "b": AB["b"],
        "c": ("s02",),
    }


def test_a_job_the_scheduler_holds_back_stops() -> None:
    first = _paced(0.0, "arrival", AB, {"a": 0.0, "b": 40.0})
    preempted = Decision(5.0, "tick", {"b": AB["b"]}, {**M})  # a is alive but not placed
    parts = segments([first, preempted])
    assert parts[1].why == ("a: stops (the scheduler holds it back)",)
    assert sorted(parts[1].runs.placement) == ["b"]


def test_compression_factor_must_be_positive() -> None:
    with pytest.raises(ValueError, match="compression factor"):
        segments([], compress=0.0)


def _waiting_job_trace() -> list[TraceJob]:
    """The testbed full with four 6-worker jobs; e arrives, waits, and starts when a leaves."""
    return [
        TraceJob("a", "vgg19", 6, 8),
        TraceJob("b", "vgg19", 6, 12),
        TraceJob("c", "vgg16", 6, 12),
        TraceJob("d", "wideresnet101", 6, 12),
        TraceJob("e", "resnet50", 6, 12, arrival_s=0.5),
    ]


def test_the_schedulers_own_decisions_a_departure_boundary_not_the_waiting_arrival() -> None:
    trace = _waiting_job_trace()
    iterations = {j.name: j.iterations for j in trace}
    plan = plan_trace(trace, load_topology("cassini-testbed"), ["themis", "th+cassini"], iterations)
    for name in ("themis", "th+cassini"):
        decisions = plan.of(name).decisions
        reasons = [d.reason for d in decisions]
        assert reasons[:3] == ["arrival", "arrival", "departure"], name
        parts = segments(decisions)
        # e's arrival places nothing new; a's departure starts e on a's servers
        assert [p.decision.at_s for p in parts] == [0.0, decisions[2].at_s], name
        assert "e: starts" in parts[1].why
        assert parts[1].runs.placement["e"] == decisions[0].placement["a"]
        assert "a" not in parts[1].runs.placement  # its servers are e's
    # Cassini re-aims the jobs that share links with e: the departure's shifts run
    cassini = segments(plan.of("th+cassini").decisions)
    assert any(w.startswith(("c: shift", "d: shift")) for w in cassini[1].why), cassini[1].why
    departure = plan.of("th+cassini").decisions[2]
    assert dict(cassini[1].runs.shifts_ms) == dict(departure.shifts_ms)
