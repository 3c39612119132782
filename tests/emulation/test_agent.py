"""The time-shift agent on a fake clock: grid starts, free runs and the drift rule."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emulation.jobs.agent import (
    AgentState,
    Drift,
    Pacing,
    adjustments_per_minute,
    apply_skip,
    observe_comm_start,
    parse_drift_threshold,
    plan_start,
)
from emulation.jobs.records import IterationRecord, job_adjustments

PERIOD = 200.0
DOWN = 120.0  # the profile's compute before the AllReduce
UP = 60.0  # 20 ms of slack per period: small lateness does not carry over


def paced(**kwargs: float | None) -> Pacing:
    base: dict[str, float | None] = {
        "t0_ms": 1000.0,
        "shift_ms": 30.0,
        "period_ms": PERIOD,
        "comm_offset_ms": DOWN,
    }
    base.update(kwargs)
    return Pacing(**base)  # type: ignore[arg-type]


def run_on_fake_clock(
    pacing: Pacing, late_comm_ms: list[float], ready_ms: float = 1000.0
) -> tuple[list[float], list[Drift], AgentState]:
    """A worker whose communication starts `late_comm_ms[k]` after the profile says."""
    now, state = ready_ms, AgentState()
    starts, drifts = [], []
    for k, late in enumerate(late_comm_ms):
        state, start = plan_start(pacing, state, k, now)
        starts.append(start.start_ms)
        now = start.start_ms + DOWN + late
        state, drift = observe_comm_start(pacing, state, k, now)
        state = apply_skip(state, drift.skip)  # a job of one: its own wish decides
        drifts.append(drift)
        now += UP
    return starts, drifts, state


def test_a_paced_worker_idles_until_its_grid_point() -> None:
    state, start = plan_start(paced(), AgentState(), 0, now_ms=1010.0)
    assert (start.slot, start.start_ms, start.wait_ms) == (0, 1030.0, 20.0)
    assert state == AgentState()
    starts, drifts, state = run_on_fake_clock(paced(), [0.0] * 5)
    assert starts == [1030.0 + k * PERIOD for k in range(5)]
    assert all(d.deviation_ms == 0.0 and not d.adjusted for d in drifts)
    assert state.adjustments == 0


def test_a_late_worker_starts_at_once() -> None:
    _, start = plan_start(paced(), AgentState(), 2, now_ms=1500.0)  # slot 2 was due at 1430
    assert (start.start_ms, start.wait_ms) == (1500.0, 0.0)


def test_an_unpaced_worker_runs_free_and_is_never_adjusted() -> None:
    pacing = Pacing(t0_ms=0.0)
    starts, drifts, state = run_on_fake_clock(pacing, [0.0, 50.0, 0.0])
    assert starts == [1000.0, 1180.0, 1410.0]
    assert not any(d.adjusted for d in drifts) and state.adjustments == 0


@pytest.mark.parametrize(
    ("late_ms", "adjusted"),
    [(9.999, False), (10.0, False), (10.001, True), (-10.0, False), (-10.001, True)],
    ids=["just-below", "exactly-at", "just-above", "early-at", "early-above"],
)
def test_drift_adjusts_past_five_percent_and_not_at_or_below(
    late_ms: float, adjusted: bool
) -> None:
    # 5% of a 200 ms iteration is 10 ms.
    pacing = paced()
    state, _ = plan_start(pacing, AgentState(), 0, now_ms=1000.0)
    state, drift = observe_comm_start(pacing, state, 0, 1030.0 + DOWN + late_ms)
    assert drift.expected_ms == 1150.0
    assert drift.deviation_ms == pytest.approx(late_ms)
    assert drift.adjusted is adjusted
    assert state.adjustments == int(adjusted)


def test_an_adjustment_realigns_to_the_next_grid_point_ahead() -> None:
    # Iteration 1's communication starts 70 ms late: iteration 2 cannot make
    # slot 2 (due 1430, the worker is ready at 1230 + 120 + 70 + 60 = 1480)
    # and is no longer started late at once: it waits for slot 3 (1630).
    starts, drifts, state = run_on_fake_clock(paced(), [0.0, 70.0, 0.0, 0.0])
    assert [d.adjusted for d in drifts] == [False, True, False, False]
    assert starts == [1030.0, 1230.0, 1630.0, 1830.0]
    assert state.adjustments == 1 and state.slot_offset == 1
    assert drifts[2].deviation_ms == 0.0  # on the new grid point: no second adjustment


def test_without_the_drift_rule_a_late_worker_keeps_starting_late() -> None:
    starts, drifts, state = run_on_fake_clock(paced(drift_fraction=None), [0.0, 70.0, 0.0])
    assert starts == [1030.0, 1230.0, 1480.0]
    assert state.adjustments == 0 and not any(d.adjusted for d in drifts)


def test_the_threshold_is_configurable() -> None:
    pacing = paced(drift_fraction=0.1)  # 20 ms
    assert pacing.threshold_ms == 20.0
    _, drifts, _ = run_on_fake_clock(pacing, [15.0, 0.0, 20.0, 0.0, 20.5])
    assert [d.adjusted for d in drifts] == [False, False, False, False, True]
    # The ideal iteration time can differ from the period the schedule gave.
    assert paced(iteration_ms=400.0).threshold_ms == 20.0


def test_parse_drift_threshold() -> None:
    assert parse_drift_threshold("off") is None
    assert parse_drift_threshold("5%") == pytest.approx(0.05)
    assert parse_drift_threshold("0.02") == pytest.approx(0.02)
    with pytest.raises(ValueError, match="'5 percent'"):
        parse_drift_threshold("5 percent")
    with pytest.raises(ValueError, match="between"):
        parse_drift_threshold("150%")


def test_adjustments_per_minute() -> None:
    assert adjustments_per_minute(3, 90_000.0) == 2.0
    assert adjustments_per_minute(0, 0.0) == 0.0


@given(
    jitter=st.lists(st.floats(min_value=-9.99, max_value=9.99), min_size=1, max_size=30),
    ready=st.floats(min_value=0.0, max_value=5000.0),
)
def test_jitter_within_the_threshold_never_adjusts_and_never_waits_negative(
    jitter: list[float], ready: float
) -> None:
    pacing = paced()
    now, state = ready, AgentState()
    for k, late in enumerate(jitter):
        state, start = plan_start(pacing, state, k, now)
        assert start.wait_ms >= 0 and start.start_ms >= pacing.grid_ms(start.slot or 0)
        # Compute shorter than the profile by at most the jitter; never before its slot.
        comm = pacing.grid_ms(k + state.slot_offset) + DOWN + late
        state, drift = observe_comm_start(pacing, state, k, comm)
        assert not drift.adjusted
        now = comm + UP
    assert state.adjustments == 0


def test_job_adjustments_take_each_jobs_busiest_worker_over_its_span() -> None:
    def rec(job: str, worker: int, k: int, adjusted: bool) -> IterationRecord:
        return IterationRecord(job, "m", worker, k, 1000.0 + k * 200.0, 1000.0 + k * 200.0 + 150,
                               0, 0.0, 0.0, adjusted)  # fmt: skip

    records = [
        rec("a", w, k, adjusted=(w == 1 and k % 100 == 7)) for w in range(3) for k in range(600)
    ]
    records += [rec("b", 0, k, adjusted=False) for k in range(10)]
    out = job_adjustments(records)
    # a: worker 1 adjusted at k = 7, 107, ..., 507: 6 times over 119.95 s.
    assert out["a"].adjustments == 6
    assert out["a"].duration_ms == 599 * 200.0 + 150
    assert out["a"].per_minute == 6 * 60_000 / (599 * 200.0 + 150)
    assert (out["b"].adjustments, out["b"].per_minute) == (0, 0.0)


def test_a_jobs_workers_skip_the_same_slots_whatever_each_one_saw() -> None:
    """Worker 0 starts its communication 15 ms late (past the 10 ms threshold), worker
    1 only 8 ms: alone, 0 would skip a slot and 1 would not, and 1 would then wait for
    0 inside the collective every iteration. With the job's decision (the largest
    wish, as the header bytes carry it) both move to the same slot."""
    pacing = paced()
    states = [AgentState(), AgentState()]
    drifts = []
    for w, late in enumerate([15.0, 8.0]):
        states[w], _ = plan_start(pacing, states[w], 0, now_ms=1000.0)
        states[w], drift = observe_comm_start(pacing, states[w], 0, 1030.0 + DOWN + late)
        drifts.append(drift)
    assert [d.adjusted for d in drifts] == [True, False]
    assert [d.skip for d in drifts] == [1, 0]
    agreed = max(d.skip for d in drifts)
    starts = []
    for w in range(2):
        states[w] = apply_skip(states[w], agreed)
        starts.append(plan_start(pacing, states[w], 1, now_ms=1030.0 + DOWN + 15.0 + UP)[1])
    assert starts[0] == starts[1]
    assert starts[0].slot == 2 and starts[0].start_ms == 1430.0


def test_a_negative_skip_is_refused() -> None:
    with pytest.raises(ValueError, match="-1"):
        apply_skip(AgentState(), -1)
