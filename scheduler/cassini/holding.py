"""Can paced jobs hold their grid once their Up phases meet? If not, how long must it be?

A compatibility score below 1 means the shifted jobs' Up phases still overlap
on the link: while they do, max-min sharing slows each, so an iteration takes
longer than the profile says. On a grid of exactly the profile's period such
a job is late every iteration, and the agent's drift rule (section 6 of the
paper: re-apply the shift past 5% of the iteration) skips a grid slot each
time: measured on the fabric, two VGG19s (score 0.943 on their measured
profiles, grid 260.5 ms) ran 382-390 ms shifted against 372 ms aligned and
re-aligned 71-79 times a minute. The paper's agents keep the iteration
time the jobs really run at under their shifts; this module predicts it.

`contended_iterations` runs the jobs of one link through a fluid model
(`scheduler.workloads.max_min.max_min_rates`: max-min sharing with each phase's demand
as its cap): an iteration starts at its grid point, or at once when the
previous one ended late (no slot skipped), Down phases take their time and
Up phases their bytes; `grid_slip` is how far each job slips off its
grid. `holding_factor` finds (our choice) the least factor
f <= `MAX_STRETCH` by which a group's periods are stretched (one factor for
all, so their ratios and the links' perimeters stay exact) such that no
job slips off its stretched grid by more than `HOLD_TOLERANCE` of its
period over `SIMULATED` iterations, re-solving the shifts at each f.
`scheduler.cassini.pacing.plan_group` keeps a stretched grid only when the jobs run
faster on it than `free_slowdown` expects them to run free, and runs a
group free when no stretch holds.

Two identical jobs whose Up phases cannot both fit one period:

>>> from scheduler.workloads.types import Phase, Profile
>>> p = Profile("a", "m", "data", 2, 100.0, (Phase(40.0, 0.0), Phase(60.0, 50.0)))
>>> q = Profile("b", "m", "data", 2, 100.0, (Phase(40.0, 0.0), Phase(60.0, 50.0)))
>>> [round(x, 1) for x in contended_iterations((p, q), (100.0, 100.0), (0.0, 50.0), 50.0)]
[120.0, 120.0]
>>> [round(x, 1) for x in contended_iterations((p, q), (120.0, 120.0), (0.0, 60.0), 50.0)]
[120.0, 120.0]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from scheduler.workloads.max_min import max_min_rates
from scheduler.workloads.types import Profile

# (our choice) A grid is held when no job slips off it by more than 0.2% of its
# period: the fluid model's own rounding, far inside the agent's 5% rule.
HOLD_TOLERANCE = 0.002
# (our choice) Stretch a grid by at most 50%: past that a paced job idles more than
# the oversubscription it avoids costs any pair the benchmarks measured.
MAX_STRETCH = 1.5
# (our choice) Bisection steps between the last stretch that did not hold and the
# first that did: at most 0.5 / 2^9 = 0.1% of the period (0.25 ms on a 250 ms grid).
BISECTION_STEPS = 9
# Iterations simulated (the first two left out: the start-up from the grid's origin).
SIMULATED = 14
WARM_UP = 2
_EPS = 1e-9


def _play(
    profiles: Sequence[Profile],
    periods_ms: Sequence[float],
    shifts_ms: Sequence[float],
    capacity_gbps: float,
    iterations: int,
    give_up: float = math.inf,
) -> list[list[tuple[float, float, float]]]:
    """Per job, (start, grid point, end) of each iteration played out (module docstring);
    stops early once an iteration slips by more than `give_up` of its period."""
    n = len(profiles)
    phase = [-1] * n  # -1: waiting for its next start
    left = [0.0] * n  # ms of a Down phase, or Gbit-ms of an Up phase, still to go
    done = [0] * n  # iterations finished
    due = [float(s) for s in shifts_ms]
    starts: list[list[tuple[float, float]]] = [[] for _ in range(n)]
    played: list[list[tuple[float, float, float]]] = [[] for _ in range(n)]
    now = 0.0

    def enter(i: int, k: int) -> None:
        ph = profiles[i].phases[k]
        phase[i] = k
        left[i] = ph.duration_ms * ph.gbps if ph.gbps > 0 else ph.duration_ms

    while min(len(p) for p in played) < iterations:
        up = [i for i in range(n) if phase[i] >= 0 and profiles[i].phases[phase[i]].gbps > 0]
        rate = dict.fromkeys(range(n), 0.0)
        if up:
            demand = np.array([profiles[i].phases[phase[i]].gbps for i in up])
            got = max_min_rates(np.ones((len(up), 1), bool), demand, np.array([capacity_gbps]))
            rate.update(zip(up, (float(g) for g in got), strict=True))
        step = min(
            (due[i] - now) if phase[i] < 0
            else (left[i] / rate[i] if profiles[i].phases[phase[i]].gbps > 0 else left[i])
            for i in range(n)
        )  # fmt: skip
        step = max(step, 0.0)
        now += step
        for i in range(n):
            if phase[i] < 0:
                if due[i] - now <= _EPS:
                    starts[i].append((now, shifts_ms[i] + done[i] * periods_ms[i]))
                    enter(i, 0)
                continue
            gbps = profiles[i].phases[phase[i]].gbps
            left[i] -= rate[i] * step if gbps > 0 else step
            if left[i] > _EPS:
                continue
            if phase[i] + 1 < len(profiles[i].phases):
                enter(i, phase[i] + 1)
            else:
                start, grid = starts[i][done[i]]
                played[i].append((start, grid, now))
                if _off_grid(start, grid, now, periods_ms[i]) > give_up * periods_ms[i]:
                    return played
                done[i] += 1
                phase[i] = -1
                due[i] = max(now, shifts_ms[i] + done[i] * periods_ms[i])
    return played


def contended_iterations(
    profiles: Sequence[Profile],
    periods_ms: Sequence[float],
    shifts_ms: Sequence[float],
    capacity_gbps: float,
    iterations: int = SIMULATED,
) -> tuple[float, ...]:
    """Each job's mean iteration (start to start, ms, the first WARM_UP left out) on one
    shared link of `capacity_gbps`, paced on its grid (`shifts_ms` + k x `periods_ms`)
    and never skipping a slot; see the module docstring."""
    out = []
    for i, played in enumerate(_play(profiles, periods_ms, shifts_ms, capacity_gbps, iterations)):
        gaps = np.diff([start for start, _, _ in played[WARM_UP:]])
        out.append(float(gaps.mean()) if gaps.size else float(periods_ms[i]))
    return tuple(out)


def grid_slip(
    profiles: Sequence[Profile],
    periods_ms: Sequence[float],
    shifts_ms: Sequence[float],
    capacity_gbps: float,
    iterations: int = SIMULATED,
    give_up: float = math.inf,
) -> tuple[float, ...]:
    """How far each job slips off its grid, as a fraction of its period, over
    `iterations` played out as `contended_iterations` plays them: the most that
    an iteration started behind its grid point or ended past the next one (its
    slot), or that its iterations' ends moved later within their slots from the
    first half of the play to the second (after the first WARM_UP).

    (our choice) An Up phase slowed by another's is no slip while the slot's idle
    time absorbs it the same way every period: the next iteration still starts
    on its grid point, so the agent (which watches when communication starts)
    sees no drift. DDP's last bucket, sent as backprop ends, often meets another
    job's burst by a few ms; counting that as slip would refuse every grid such
    jobs can share. An overlap that grows every iteration (the link carries more
    than a period's worth) is slip even while idle time hides it: it is caught
    as ends moving later (halves of the play each span a whole circle of a job
    with up to 6 iterations on it).
    `give_up`: stop playing once any job slips further (the answer is then "more").

    >>> from scheduler.workloads.types import Phase, Profile
    >>> p = Profile("a", "m", "data", 2, 100.0, (Phase(40.0, 0.0), Phase(60.0, 50.0)))
    >>> [round(x, 3) for x in grid_slip((p, p), (100.0, 100.0), (0.0, 50.0), 50.0)]
    [2.7, 2.8]

    (By hand: from its second iteration on, each iteration of either job takes 120 ms;
    a's k-th starts at 110 + 120 (k - 1) against 100 k on its grid, b's at
    170 + 120 (k - 1) against 50 + 100 k; the 14th (k = 13) starts 250 and 260 ms late
    and ends 20 ms past its slot: 270 and 280 ms.)
    """
    played = _play(profiles, periods_ms, shifts_ms, capacity_gbps, iterations, give_up)
    return tuple(_slip(its, period) / period for its, period in zip(played, periods_ms, strict=True))


def _off_grid(start: float, grid: float, end: float, period_ms: float) -> float:
    """How far one iteration left its slot (ms): a start behind its grid point, or an
    end past the next one."""
    return max(start - grid, end - grid - period_ms)


def _slip(its: Sequence[tuple[float, float, float]], period_ms: float) -> float:
    """One job's slip (ms) from its played (start, grid point, end) iterations."""
    off_grid = max((_off_grid(*it, period_ms) for it in its), default=0.0)
    ends = [end - grid for _, grid, end in its[WARM_UP:]]
    half = len(ends) // 2
    drift = max(ends[half:]) - max(ends[:half]) if half else 0.0
    return max(off_grid, drift)


# (our choice) Relative start offsets a free-running expectation averages over.
FREE_SAMPLES = 8
_GOLDEN = (5**0.5 - 1) / 2


def free_slowdown(
    profiles: Sequence[Profile], capacity_gbps: float, samples: int = FREE_SAMPLES
) -> float:
    """The mean slowdown (iteration over the profile's) of jobs running free (unpaced,
    each at its own pace) on one link of `capacity_gbps`, averaged over `samples`
    relative start offsets (job i's k-th: the fractional part of k (i + 1) x 0.618 of
    its iteration; our choice, spread evenly without a grid).

    >>> from scheduler.workloads.types import Phase, Profile
    >>> p = Profile("a", "m", "data", 2, 100.0, (Phase(40.0, 0.0), Phase(60.0, 50.0)))
    >>> round(free_slowdown((p, p), 50.0), 3)  # 1.2 at offset 50, 1.6 aligned, 1.5 at 10
    1.366
    """
    own = [p.iteration_ms for p in profiles]
    total = 0.0
    for k in range(samples):
        offsets = [((k * (i + 1) * _GOLDEN) % 1.0) * own[i] for i in range(len(profiles))]
        took = contended_iterations(profiles, own, offsets, capacity_gbps)
        total += sum(t / o for t, o in zip(took, own, strict=True)) / len(profiles)
    return total / samples


Holds = Callable[[float], bool]  # stretch factor -> every job within HOLD_TOLERANCE


def holding_factor(holds: Holds, max_stretch: float = MAX_STRETCH) -> float | None:
    """The least stretch f in [1, max_stretch] (to bisection precision) at which
    `holds(f)` (every job's `grid_slip` on its stretched grid within HOLD_TOLERANCE);
    None when not even `max_stretch` holds. The f returned is one `holds` was called
    with and answered True for (a caller may keep what it computed there).

    >>> round(holding_factor(lambda f: 1.1 / f <= 1.002), 4)  # as if it ran 1.1 periods
    1.0986
    >>> print(holding_factor(lambda f: 2.0 / f <= 1.002))
    None
    """
    if holds(1.0):
        return 1.0
    if not holds(max_stretch):
        return None
    low, high = 1.0, max_stretch
    for _ in range(BISECTION_STEPS):
        mid = (low + high) / 2.0
        low, high = (low, mid) if holds(mid) else (mid, high)
    return high
