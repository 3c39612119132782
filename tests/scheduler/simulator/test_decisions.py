"""The decisions the simulator's schedulers make, recorded for the emulator to replay."""

from __future__ import annotations

import pytest

from scheduler.simulator.decisions import DecisionLog
from scheduler.simulator.experiment import run_experiment
from scheduler.workloads.traces import resolve_trace
from topologies.library import load_topology


@pytest.fixture(scope="module")
def four_jobs() -> tuple[DecisionLog, object]:
    topo = load_topology("cassini-testbed")
    trace, _ = resolve_trace("four-jobs", topo.total_gpus())
    log = DecisionLog()
    exp = run_experiment(trace, topo, ["themis", "th+cassini"], on_decision=log)
    return log, exp


def test_every_decision_is_recorded_in_order(four_jobs: tuple[DecisionLog, object]) -> None:
    log, exp = four_jobs
    for name, result in exp.results.items():  # type: ignore[attr-defined]
        decisions = log.of(name)
        assert len(decisions) == result.decisions
        times = [d.at_s for d in decisions]
        assert times == sorted(times)
        assert decisions[0].reason == "arrival" and decisions[0].at_s == 0.0


def test_the_first_decision_places_what_the_simulator_ran(
    four_jobs: tuple[DecisionLog, object],
) -> None:
    log, exp = four_jobs
    for name, result in exp.results.items():  # type: ignore[attr-defined]
        first = log.first(name)
        assert set(first.placement) == {j.name for j in result.jobs}
        for job in result.jobs:
            assert len(first.placement[job.name]) == job.workers
            assert first.models[job.name] == job.model


def test_only_the_cassini_variant_paces_its_jobs(four_jobs: tuple[DecisionLog, object]) -> None:
    log, _ = four_jobs
    themis, cassini = log.first("themis"), log.first("th+cassini")
    assert not themis.new_schedule and themis.shifts_ms == {} and themis.periods_ms == {}
    assert cassini.new_schedule and cassini.periods_ms
    schedule = cassini.as_schedule()
    assert schedule.placement == cassini.placement
    assert schedule.models == {j: cassini.models[j] for j in cassini.placement}
    assert set(schedule.periods_ms) <= set(schedule.placement)
    assert all(0 <= schedule.shifts_ms[j] < schedule.periods_ms[j] for j in schedule.periods_ms)


def test_a_scheduler_without_decisions_is_named() -> None:
    with pytest.raises(LookupError, match="'pollux' made no decision"):
        DecisionLog().first("pollux")
