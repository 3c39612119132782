"""How well can the jobs sharing one link interleave? (cassini-algorithm.md section 3)

Each job is a demand pattern on the link's unified circle; rotating the
patterns against each other changes how often their sum exceeds the link's
capacity. `compatibility` searches rotations on a grid of `precision_deg` and
returns the best score

    score = 1 - mean_alpha(max(0, D(alpha) - C)) / C

with the rotations and the time-shifts they mean (Equation 5).

Two solvers: `exact` enumerates every distinct rotation (vectorized, in
batches to bound memory); `fast` is coordinate descent that re-places one job
at a time against the sum of the others, with seeded restarts. `auto` picks
exact when the search space is small.

(our choice) Among rotations of equal score, each job then takes the one
farthest from the others' communication (`centre`): the score is the
same, but a shift at the edge of the feasible range (two ResNet50 jobs,
each communicating a quarter of the period: a shift of exactly one Up
phase) leaves no margin, and any stretch of a phase on a real or emulated
fabric overlaps the next job's. The paper is silent on ties.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from scheduler.cassini.circle import demand_on_circle, repetitions, unified_perimeter
from scheduler.workloads.types import Profile
from topologies.errors import UserInputError, did_you_mean

SOLVERS = ("auto", "exact", "fast")
# `auto` uses the exact solver up to this many rotation combinations.
EXACT_AUTO_LIMIT = 200_000
# An explicit `exact` request beyond this would take minutes; refuse it.
EXACT_HARD_LIMIT = 200_000_000
# Floats per batch in the exact solver (16 MB of float64).
EXACT_BATCH_FLOATS = 2_000_000
FAST_RESTARTS = 6
FAST_MAX_SWEEPS = 100
TIE_EPS = 1e-9
# (our choice) A link's capacity lies between 1 Mbit/s (slower than any data-centre
# link by four orders: a 1500-byte frame takes 12 ms, the length of a phase) and
# 100 Tbit/s (sixty times today's fastest port). Outside it a value is a typo
# (`--capacity-gbps 1e-300` scored every pair 0, silently).
MIN_CAPACITY_GBPS = 1e-3
MAX_CAPACITY_GBPS = 1e5


def check_capacity_gbps(value: float, what: str = "link capacity") -> float:
    """`value` if it is a link capacity in Gbit/s a link can have; else one line naming
    `what` (a flag, a link) and the bounds.

    >>> check_capacity_gbps(1e-300, "--capacity-gbps")
    Traceback (most recent call last):
    ...
    topologies.errors.UserInputError: --capacity-gbps must be in [0.001, 100000] Gbps (our choice: a 1 Mbit/s to a 100 Tbit/s link), got 1e-300
    """
    if not MIN_CAPACITY_GBPS <= value <= MAX_CAPACITY_GBPS:  # NaN fails too
        raise UserInputError(
            f"{what} must be in [{MIN_CAPACITY_GBPS:g}, {MAX_CAPACITY_GBPS:g}] Gbps (our "
            f"choice: a 1 Mbit/s to a 100 Tbit/s link), got {value:g}"
        )
    return value


@dataclass(frozen=True)
class LinkSolution:
    """The best interleaving found for one link's jobs."""

    score: float
    perimeter_ms: float
    rotations_deg: Mapping[str, float]
    shifts_ms: Mapping[str, float]
    solver: str
    approximated: bool
    elapsed_ms: float


@dataclass(frozen=True)
class CircleProblem:
    """One link's jobs discretized: demand per bin and each job's period in bins."""

    perimeter_ms: float
    approximated: bool
    bins: int
    demands: np.ndarray  # shape (jobs, bins), Gbps
    periods: tuple[int, ...]  # distinct rotations per job


# (our choice) 0.1 degrees is 3,600 bins, fifty times finer than the paper's
# 5-degree sweet spot; finer grids only cost memory (the exact solver's
# table grows with bins^(jobs-1): 0.0001 degrees asked for 94 TiB).
MIN_PRECISION_DEG = 0.1


def bins_for_precision(precision_deg: float) -> int:
    """360 / precision, which must be a whole number of bins (at least 2, at most 3,600).

    >>> bins_for_precision(5)
    72
    """
    if not MIN_PRECISION_DEG <= precision_deg <= 180:
        raise UserInputError(
            f"precision must be in [{MIN_PRECISION_DEG:g}, 180] degrees, got {precision_deg:g}"
        )
    bins = round(360.0 / precision_deg)
    if not math.isclose(bins * precision_deg, 360.0, rel_tol=1e-9, abs_tol=1e-9):
        raise UserInputError(
            f"precision {precision_deg} degrees does not divide 360 (try 1, 2.5, 5, 10, 20)"
        )
    return bins


def discretize(profiles: Sequence[Profile], precision_deg: float) -> CircleProblem:
    bins = bins_for_precision(precision_deg)
    perimeter, approximated = unified_perimeter([p.iteration_ms for p in profiles])
    demands = np.stack([demand_on_circle(p, perimeter, bins) for p in profiles])
    periods = []
    for p in profiles:
        reps = repetitions(p.iteration_ms, perimeter)
        # Rotating by one period of the job is the identity only when the
        # period is a whole number of bins; otherwise every bin is distinct.
        periods.append(bins // reps if bins % reps == 0 else bins)
    return CircleProblem(perimeter, approximated, bins, demands, tuple(periods))


def excess_sum(total: np.ndarray, capacity_gbps: float) -> float:
    return float(np.maximum(total - capacity_gbps, 0.0).sum())


def score_from_excess(excess_total: float, bins: int, capacity_gbps: float) -> float:
    """(our choice) Clamped at 0: a link oversubscribed by more than C on average scores 0.

    Rounded to 9 decimals so float noise from bin integration does not turn
    a perfect interleaving into 0.9999999999999993.
    """
    return round(max(0.0, 1.0 - excess_total / bins / capacity_gbps), 9)


def _rolled(demand: np.ndarray, period: int) -> np.ndarray:
    """All rotations 0..period-1 of a demand vector, one per row."""
    bins = demand.shape[0]
    idx = (np.arange(bins)[None, :] - np.arange(period)[:, None]) % bins
    return demand[idx]


def exact_rotations(problem: CircleProblem, capacity_gbps: float) -> tuple[np.ndarray, float]:
    """Exhaustive search with job 0 fixed at rotation 0; returns (rotations in bins, excess sum).

    Ties go to the first combination in lexicographic order, so the answer
    is deterministic.
    """
    demands, periods = problem.demands, problem.periods
    k, bins = demands.shape
    if k == 1:
        return np.zeros(1, dtype=int), excess_sum(demands[0], capacity_gbps)
    stacks = [_rolled(demands[j], periods[j]) for j in range(1, k)]
    head_periods = periods[1:-1]
    head_count = math.prod(head_periods)
    last = stacks[-1]
    batch = max(1, EXACT_BATCH_FLOATS // (last.shape[0] * bins))
    best_excess = math.inf
    best_rot = np.zeros(k, dtype=int)
    for start in range(0, head_count, batch):
        flat = np.arange(start, min(head_count, start + batch))
        digits = np.unravel_index(flat, head_periods) if head_periods else ()
        partial = np.broadcast_to(demands[0], (flat.size, bins)).copy()
        for j, d in enumerate(digits):
            partial += stacks[j][d]
        totals = partial[:, None, :] + last[None, :, :]
        excess = np.maximum(totals - capacity_gbps, 0.0).sum(axis=2)
        pos = int(np.argmin(excess))
        value = float(excess.flat[pos])
        if value < best_excess - TIE_EPS:
            best_excess = value
            row, last_rot = divmod(pos, last.shape[0])
            best_rot = np.array([0, *(int(d[row]) for d in digits), last_rot], dtype=int)
    return best_rot, best_excess


def _overlap(others: np.ndarray, spectrum: np.ndarray, rotations: int) -> np.ndarray:
    """Circular cross-correlation (FFT) of the others' demand with one job's, per rotation.

    It measures how much the job's demand lands on the others'; it breaks
    ties between rotations of equal excess, steering the job away from the
    others on plateaus so later moves have room.
    """
    return np.fft.irfft(np.fft.rfft(others) * np.conj(spectrum), others.shape[0])[:rotations]


def _pick(
    excess: np.ndarray, others: np.ndarray, spectrum: np.ndarray
) -> tuple[int, np.ndarray | None]:
    """Least excess, then least overlap, then lowest rotation; overlap only computed on ties."""
    candidates = np.flatnonzero(excess <= excess.min() + TIE_EPS)
    if candidates.size == 1:
        return int(candidates[0]), None
    overlap = _overlap(others, spectrum, excess.shape[0])
    return int(candidates[np.argmin(overlap[candidates])]), overlap


def fast_restarts(bins: int) -> int:
    """(our choice) Coarse grids are cheap per descent but trap it more often: restart more."""
    return min(4 * FAST_RESTARTS, max(FAST_RESTARTS, FAST_RESTARTS * 72 // bins))


def fast_rotations(
    problem: CircleProblem, capacity_gbps: float, restarts: int | None = None, seed: int = 0
) -> tuple[np.ndarray, float]:
    """Coordinate descent from a greedy start and `restarts - 1` seeded random ones.

    Each step re-places one job against the sum of the others, evaluating the
    excess of all its rotations at once. A move is taken only if it lowers
    (excess, overlap) lexicographically, so each descent terminates; the
    search stops early once a zero-excess layout is found.
    """
    demands, periods = problem.demands, problem.periods
    k, bins = demands.shape
    stacks = [_rolled(demands[j], periods[j]) for j in range(k)]
    # Rows of (demand - capacity): one add and one clip per evaluation.
    over = [s - capacity_gbps for s in stacks]
    spectra = [np.fft.rfft(demands[j]) for j in range(k)]
    scratch = np.empty((max(periods), bins))

    def excess_of_rotations(j: int, others: np.ndarray) -> np.ndarray:
        buf = scratch[: periods[j]]
        np.add(over[j], others, out=buf)
        np.maximum(buf, 0.0, out=buf)
        return buf.sum(axis=1)

    rng = np.random.default_rng(seed)
    best_rot = np.zeros(k, dtype=int)
    best_excess = math.inf
    for attempt in range(max(1, restarts if restarts is not None else fast_restarts(bins))):
        rot = np.zeros(k, dtype=int)
        if attempt == 0:
            # Greedy: heaviest jobs first, each at its best rotation so far.
            total = np.zeros(bins)
            for j in sorted(range(k), key=lambda j: -float(demands[j].sum())):
                excess = excess_of_rotations(j, total)
                rot[j], _ = _pick(excess, total, spectra[j])
                total += stacks[j][rot[j]]
        else:
            rot = np.array([rng.integers(0, p) for p in periods], dtype=int)
            total = np.sum([stacks[j][rot[j]] for j in range(k)], axis=0)
        for _ in range(FAST_MAX_SWEEPS):
            moved = False
            for j in range(k):
                now = rot[j]
                others = total - stacks[j][now]
                excess = excess_of_rotations(j, others)
                pick, overlap = _pick(excess, others, spectra[j])
                if pick == now:
                    continue
                better = excess[pick] < excess[now] - TIE_EPS
                if not better and overlap is not None:
                    better = overlap[pick] < overlap[now] - 1e-6 * max(1.0, abs(overlap[now]))
                if better:
                    rot[j] = pick
                    total = others + stacks[j][pick]
                    moved = True
            if not moved:
                break
        value = excess_sum(total, capacity_gbps)
        if value < best_excess - TIE_EPS:
            best_excess, best_rot = value, rot.copy()
        if best_excess <= TIE_EPS:
            break
    # Rotations are relative: turn the whole circle so job 0 sits at 0.
    normalized = np.array(
        [(best_rot[j] - best_rot[0]) % bins % periods[j] for j in range(k)], dtype=int
    )
    return normalized, best_excess


def _clearance(busy: np.ndarray, others_busy: np.ndarray) -> int:
    """Fewest bins between any busy bin of a job and any busy bin of the others (circular)."""
    bins = busy.shape[0]
    mine, theirs = np.flatnonzero(busy), np.flatnonzero(others_busy)
    if mine.size == 0 or theirs.size == 0:
        return bins
    gap = np.abs(mine[:, None] - theirs[None, :])
    return int(np.minimum(gap, bins - gap).min())


def centre(
    problem: CircleProblem, rot: np.ndarray, capacity_gbps: float
) -> tuple[np.ndarray, float]:
    """Each job but the first, in turn, moved to the rotation of no more excess that is
    farthest from the others' communication (the largest clearance; ties keep the
    lowest rotation). The total excess never grows, so the score stays; returns the
    rotations and their excess sum.

    >>> from scheduler.workloads.types import Phase, Profile
    >>> quarter = Profile("a", "m", "data", 2, 100.0, (Phase(25.0, 50.0), Phase(75.0, 0.0)))
    >>> problem = discretize([quarter, quarter], 10.0)
    >>> rot, _ = exact_rotations(problem, 50.0)
    >>> int(rot[1]) * 10, int(centre(problem, rot, 50.0)[0][1]) * 10  # degrees
    (90, 180)
    """
    demands, periods = problem.demands, problem.periods
    rot = rot.copy()
    stacks = [_rolled(demands[j], periods[j]) for j in range(len(periods))]
    total = np.sum([stacks[j][rot[j]] for j in range(len(periods))], axis=0)
    for j in range(1, len(periods)):
        others = total - stacks[j][rot[j]]
        excess = np.maximum(stacks[j] + others - capacity_gbps, 0.0).sum(axis=1)
        fits = np.flatnonzero(excess <= excess[rot[j]] + TIE_EPS)
        others_busy = others > TIE_EPS
        clearance = {int(r): _clearance(stacks[j][r] > TIE_EPS, others_busy) for r in fits}
        best = max(clearance, key=clearance.__getitem__)  # the lowest of the widest
        if clearance[best] > clearance[int(rot[j])]:  # the current one is among `fits`
            rot[j] = best
            total = others + stacks[j][best]
    return rot, excess_sum(total, capacity_gbps)


def equation5_shift_ms(rotation_deg: float, perimeter_ms: float, iteration_ms: float) -> float:
    """The paper's Equation 5: t_j = (Delta_j / 360) x p_l mod T_j."""
    return (rotation_deg / 360.0 * perimeter_ms) % iteration_ms


def search_space(problem: CircleProblem) -> int:
    return math.prod(problem.periods[1:])


def compatibility(
    profiles: Sequence[Profile],
    capacity_gbps: float,
    precision_deg: float = 5.0,
    solver: str = "auto",
) -> LinkSolution:
    """Best rotations of `profiles` (keyed by profile name) on a link of `capacity_gbps`.

    >>> from dataclasses import replace
    >>> from scheduler.workloads.types import Phase, Profile
    >>> half = Profile("a", "m", "data", 2, 100.0, (Phase(50.0, 50.0), Phase(50.0, 0.0)))
    >>> sol = compatibility([half, replace(half, name="b")], 50.0)
    >>> sol.score, dict(sol.shifts_ms)
    (1.0, {'a': 0.0, 'b': 50.0})
    """
    started = time.perf_counter()
    if solver not in SOLVERS:
        raise UserInputError(did_you_mean(solver, SOLVERS, "solver"))
    if not profiles:
        raise UserInputError("compatibility needs at least one job")
    names = [p.name for p in profiles]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise UserInputError(
            f"job name '{dup}' appears twice on one link; give each job a unique name"
        )
    check_capacity_gbps(capacity_gbps)
    problem = discretize(profiles, precision_deg)
    peaks = float(problem.demands.max(axis=1).sum())
    if len(profiles) == 1 or peaks <= capacity_gbps + TIE_EPS:
        rot, used = np.zeros(len(profiles), dtype=int), "trivial"
        excess = 0.0
    else:
        space = search_space(problem)
        use_exact = solver == "exact" or (solver == "auto" and space <= EXACT_AUTO_LIMIT)
        if use_exact and space > EXACT_HARD_LIMIT:
            raise UserInputError(
                f"exact search over {space:.3g} rotations is too large; use solver 'fast' or a coarser precision"
            )
        if use_exact:
            rot, excess = exact_rotations(problem, capacity_gbps)
            used = "exact"
        else:
            rot, excess = fast_rotations(problem, capacity_gbps)
            used = "fast"
        rot, excess = centre(problem, rot, capacity_gbps)
    step = 360.0 / problem.bins
    rotations = {p.name: float(r) * step for p, r in zip(profiles, rot, strict=True)}
    shifts = {
        p.name: equation5_shift_ms(rotations[p.name], problem.perimeter_ms, p.iteration_ms)
        for p in profiles
    }
    return LinkSolution(
        score=score_from_excess(excess, problem.bins, capacity_gbps),
        perimeter_ms=problem.perimeter_ms,
        rotations_deg=rotations,
        shifts_ms=shifts,
        solver=used,
        approximated=problem.approximated,
        elapsed_ms=(time.perf_counter() - started) * 1e3,
    )


def free_running_score(profiles: Sequence[Profile], capacity_gbps: float) -> float:
    """The expected score when the jobs run at their own pace, unaligned.

    Jobs with incommensurate periods slide through every relative phase, so
    at a random instant each job's demand is an independent draw from its own
    profile (level x fraction of the iteration). The expected excess is then
    exact by convolving those distributions; this is what a schedule must beat
    for pacing to pay off.

    >>> from scheduler.workloads.types import Phase, Profile
    >>> half = Profile("a", "m", "data", 2, 100.0, (Phase(50.0, 50.0), Phase(50.0, 0.0)))
    >>> free_running_score([half, half], 50.0)  # both up a quarter of the time: 50 Gbps excess
    0.75
    """
    check_capacity_gbps(capacity_gbps)
    total: dict[float, float] = {0.0: 1.0}
    for p in profiles:
        levels: dict[float, float] = {}
        for phase in p.phases:
            levels[phase.gbps] = levels.get(phase.gbps, 0.0) + phase.duration_ms / p.iteration_ms
        summed: dict[float, float] = {}
        for a, pa in total.items():
            for b, pb in levels.items():
                key = round(a + b, 6)
                summed[key] = summed.get(key, 0.0) + pa * pb
        total = summed
    excess = sum(prob * max(0.0, level - capacity_gbps) for level, prob in total.items())
    return round(max(0.0, 1.0 - excess / capacity_gbps), 9)
