"""When does a worker start its next iteration, and when has it drifted off the grid?

The paper's agent (section 6 of the algorithm notes) delays job j's
iterations by its time-shift t_j and re-applies the shift when the start of
a communication phase deviates by more than 5% of the ideal iteration time.
Here that is a grid: iteration k of a paced job is due at
`t0 + shift + slot(k) * period`. A worker early for its slot idles until the
slot; a late one starts at once. When the communication phase of an
iteration starts further from its grid point than the threshold, the agent
re-aligns: the next iteration waits for the next grid point still ahead
(slots are skipped) and the adjustment is counted.

The slots skipped are the job's decision, not each worker's (our choice):
a worker late by D wishes to skip ceil(D / period) slots (`Drift.skip`), the
wishes travel around the ring with the collective's header bytes (the
largest wins, `header.Header`), and every worker applies the same
number (`apply_skip`). Workers deciding alone, on their own clocks, once
disagreed whenever the job's iteration ran a little past its period: half
of them skipped a slot, the other half waited for them inside the
collective, and the job lost a period nearly every iteration.

Everything is a pure function of observed times (ms on one clock the caller
reads and passes as `now_ms`), so tests drive it with a fake clock.

Example (period 100 ms, shift 20 ms, t0 = 0, threshold 5 ms):

    >>> p = Pacing(t0_ms=0.0, shift_ms=20.0, period_ms=100.0, comm_offset_ms=60.0)
    >>> s = AgentState()
    >>> s, start = plan_start(p, s, 0, now_ms=3.0)
    >>> start
    Start(iteration=0, slot=0, start_ms=20.0, wait_ms=17.0)
    >>> s, drift = observe_comm_start(p, s, 0, comm_start_ms=86.0)
    >>> drift.deviation_ms, drift.adjusted, drift.skip, s.adjustments
    (6.0, True, 1, 1)
    >>> s = apply_skip(s, drift.skip)  # the job's decision: here this worker's wish
    >>> plan_start(p, s, 1, now_ms=150.0)[1]
    Start(iteration=1, slot=2, start_ms=220.0, wait_ms=70.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

# The paper's rule: re-apply the shift past 5% of the ideal iteration time.
DEFAULT_DRIFT_FRACTION = 0.05


def parse_drift_threshold(text: str) -> float | None:
    """A drift threshold as a user writes it: 'off', '5%' or a fraction '0.05'.

    >>> parse_drift_threshold("off"), parse_drift_threshold("5%"), parse_drift_threshold("0.1")
    (None, 0.05, 0.1)
    """
    value = text.strip().lower()
    if value in ("off", "none", "no"):
        return None
    try:
        fraction = float(value[:-1]) / 100.0 if value.endswith("%") else float(value)
    except ValueError:
        raise ValueError(
            f"drift threshold {text!r}: give 'off', a percentage like '5%' or a fraction like "
            "'0.05'"
        ) from None
    if not 0.0 < fraction < 1.0 or math.isnan(fraction):
        raise ValueError(f"drift threshold {text!r} must lie strictly between 0% and 100%")
    return fraction


@dataclass(frozen=True)
class Pacing:
    """One worker's grid: where its iterations are due and how far they may drift.

    `period_ms` None means unpaced (the schedule leaves the job free): it
    starts every iteration at once and is never adjusted. `comm_offset_ms`
    is where the first communication phase starts within an iteration (the
    profile's Down time before it). `iteration_ms` is the ideal iteration
    time the drift threshold is a fraction of (default: the period).
    `drift_fraction` None turns the drift rule off.
    """

    t0_ms: float
    shift_ms: float = 0.0
    period_ms: float | None = None
    comm_offset_ms: float = 0.0
    iteration_ms: float | None = None
    drift_fraction: float | None = DEFAULT_DRIFT_FRACTION

    def __post_init__(self) -> None:
        if self.period_ms is not None and not self.period_ms > 0:
            raise ValueError(f"period_ms must be > 0 (or None for unpaced), got {self.period_ms}")
        if self.drift_fraction is not None and not 0 < self.drift_fraction < 1:
            raise ValueError(f"drift_fraction must be in (0, 1) or None, got {self.drift_fraction}")

    @property
    def paced(self) -> bool:
        return self.period_ms is not None

    @property
    def threshold_ms(self) -> float | None:
        """The deviation beyond which the agent re-aligns (None: never)."""
        ideal = self.iteration_ms if self.iteration_ms is not None else self.period_ms
        if self.drift_fraction is None or ideal is None:
            return None
        return self.drift_fraction * ideal

    def grid_ms(self, slot: int) -> float:
        """The time grid point `slot` is due."""
        if self.period_ms is None:
            raise ValueError("an unpaced job has no grid")
        return self.t0_ms + self.shift_ms + slot * self.period_ms


@dataclass(frozen=True)
class AgentState:
    """What the agent carries between iterations: slots skipped so far, adjustments made."""

    slot_offset: int = 0
    adjustments: int = 0
    realign: bool = False  # the last iteration drifted: the next one waits for a fresh slot


@dataclass(frozen=True)
class Start:
    """The agent's answer for one iteration: when to start and how long to idle first."""

    iteration: int
    slot: int | None  # None when unpaced
    start_ms: float
    wait_ms: float


@dataclass(frozen=True)
class Drift:
    """How far one iteration's communication started from its grid point."""

    iteration: int
    expected_ms: float | None
    deviation_ms: float  # signed: > 0 late, < 0 early
    adjusted: bool
    skip: int = 0  # slots this worker wishes the job to skip (late and adjusted)


def plan_start(
    pacing: Pacing, state: AgentState, iteration: int, now_ms: float
) -> tuple[AgentState, Start]:
    """When iteration `iteration` starts, given that the worker is ready at `now_ms`.

    Paced: at its grid point if that is ahead (idle until then), at once if
    late. After a drift the next grid point still ahead is taken instead, and
    the returned state remembers the slots skipped.
    """
    if pacing.period_ms is None:
        return state, Start(iteration, None, now_ms, 0.0)
    slot = iteration + state.slot_offset
    if state.realign:
        ahead = math.ceil((now_ms - pacing.t0_ms - pacing.shift_ms) / pacing.period_ms)
        slot = max(slot, ahead)
    start = max(pacing.grid_ms(slot), now_ms)
    state = replace(state, slot_offset=slot - iteration, realign=False)
    return state, Start(iteration, slot, start, start - now_ms)


def observe_comm_start(
    pacing: Pacing, state: AgentState, iteration: int, comm_start_ms: float
) -> tuple[AgentState, Drift]:
    """Judge when iteration `iteration`'s communication began; count an adjustment
    when it deviates from its grid point by more than the threshold (strictly)."""
    threshold = pacing.threshold_ms
    if pacing.period_ms is None:
        return state, Drift(iteration, None, 0.0, False)
    expected = pacing.grid_ms(iteration + state.slot_offset) + pacing.comm_offset_ms
    deviation = comm_start_ms - expected
    adjusted = threshold is not None and abs(deviation) > threshold
    skip = 0
    if adjusted:
        state = replace(state, adjustments=state.adjustments + 1)
        # Late by D: the iteration ends about D past the next grid point, so the first
        # one still ahead is ceil(D / period) further on. Early: the slot stands.
        skip = max(0, math.ceil(deviation / pacing.period_ms))
    return state, Drift(iteration, expected, deviation, adjusted, skip)


def apply_skip(state: AgentState, skip: int) -> AgentState:
    """The job's agreed skip (the largest of its workers' `Drift.skip`): the next
    iteration's slot moves that far along the grid, on every worker alike."""
    if skip < 0:
        raise ValueError(f"skip must be >= 0, got {skip}")
    return replace(state, slot_offset=state.slot_offset + skip) if skip else state


def adjustments_per_minute(adjustments: int, duration_ms: float) -> float:
    """The paper's figure (fewer than two per minute on its snapshots).

    >>> adjustments_per_minute(3, 90_000.0)
    2.0
    """
    if duration_ms <= 0:
        return 0.0
    return adjustments * 60_000.0 / duration_ms
