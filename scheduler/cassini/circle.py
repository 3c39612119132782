"""The unified circle of one link: its perimeter and each job's demand drawn on it.

Jobs with iteration times T_j share a link; their joint pattern repeats every
LCM(T_j). The circle of that perimeter, cut into equal angular bins, is where
rotations are searched (cassini-algorithm.md section 2).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from scheduler.workloads.types import Profile
from topologies.errors import UserInputError


def _lcm_units(iteration_ms: Sequence[float], quantum_ms: float) -> tuple[int, list[int]]:
    units = [max(1, round(t / quantum_ms)) for t in iteration_ms]
    return math.lcm(*units), units


def _commensurate_perimeter(
    iteration_ms: Sequence[float], limit_ms: float, max_units: int = 64
) -> float | None:
    """The exact LCM when every time is a whole multiple of min(T) / k for a small k.

    Paced periods (`scheduler.cassini.periods`) are built that way; their quantum is
    rarely a whole millisecond, so quantizing to 1 ms would blur them again.
    """
    shortest = min(iteration_ms)
    for k in range(1, max_units + 1):
        quantum = shortest / k
        units = [t / quantum for t in iteration_ms]
        if all(abs(u - round(u)) <= 1e-6 * u for u in units):
            perimeter = math.lcm(*(round(u) for u in units)) * quantum
            return perimeter if perimeter <= limit_ms * (1 + 1e-9) else None
    return None


def unified_perimeter(
    iteration_ms: Sequence[float], quantum_ms: float = 1.0, cap_factor: float = 8
) -> tuple[float, bool]:
    """Perimeter p_l = LCM of the iteration times quantized to `quantum_ms`.

    Returns (perimeter_ms, approximated). Times that are whole multiples of a
    common quantum min(T) / k (k <= 64) get their exact LCM. Otherwise they
    are quantized to `quantum_ms`, which is not reported. (our choice) When
    the LCM exceeds cap_factor x max T, the quantum grows in whole multiples
    (2q, 3q, ...) until it fits, i.e. the finest coarser grid that fits is
    used: iteration times are then rounded more coarsely and `approximated`
    is True. A huge
    perimeter would make each job's pattern a sliver of the circle, so the
    discretized search would see nothing.

    >>> unified_perimeter([100.0, 150.0])
    (300.0, False)
    >>> unified_perimeter([101.0, 150.0])
    (300.0, True)
    """
    if not iteration_ms:
        raise UserInputError("unified circle needs at least one iteration time")
    if any(not t > 0 for t in iteration_ms):
        raise UserInputError(f"iteration times must be > 0 ms, got {list(iteration_ms)}")
    if quantum_ms <= 0 or cap_factor < 1:
        raise UserInputError("quantum_ms must be > 0 and cap_factor >= 1")
    limit = cap_factor * max(iteration_ms)
    exact = _commensurate_perimeter(iteration_ms, limit)
    if exact is not None:
        return exact, False
    longest_units = math.ceil(max(iteration_ms) / quantum_ms)
    for multiple in range(1, 2 * longest_units + 2):
        quantum = quantum_ms * multiple
        lcm, _ = _lcm_units(iteration_ms, quantum)
        perimeter = lcm * quantum
        if perimeter <= limit + 1e-9:
            return perimeter, multiple > 1
    # Unreachable for cap_factor >= 4 (a quantum near max T gives units 1 or 2);
    # smaller caps end here with the longest iteration as the perimeter.
    return float(max(iteration_ms)), True


def repetitions(iteration_ms: float, perimeter_ms: float) -> int:
    """How many times a job's pattern goes around the circle (>= 1, rounded)."""
    return max(1, round(perimeter_ms / iteration_ms))


def demand_on_circle(profile: Profile, perimeter_ms: float, bins: int) -> np.ndarray:
    """Average demand (Gbps) of `profile` in each of `bins` equal arcs of the circle.

    The pattern repeats perimeter/T times; on an approximated perimeter it is
    stretched slightly so a whole number of iterations fits. Each bin gets the
    exact integral of demand over its arc (piecewise-constant phases), so a
    phase that covers half a bin contributes half its rate.
    """
    if bins < 1:
        raise UserInputError(f"bins must be >= 1, got {bins}")
    reps = repetitions(profile.iteration_ms, perimeter_ms)
    period = perimeter_ms / reps
    scale = period / profile.iteration_ms
    durations = np.array([p.duration_ms for p in profile.phases], dtype=float) * scale
    rates = np.array([p.gbps for p in profile.phases], dtype=float)
    edges = np.concatenate(([0.0], np.cumsum(durations)))
    edges[-1] = period
    cumulative = np.concatenate(([0.0], np.cumsum(durations * rates)))
    per_period = cumulative[-1]

    def integral(t: np.ndarray) -> np.ndarray:
        whole, rest = np.divmod(t, period)
        return whole * per_period + np.interp(rest, edges, cumulative)

    boundaries = np.linspace(0.0, perimeter_ms, bins + 1)
    integ = integral(boundaries)
    integ[-1] = reps * per_period
    return np.diff(integ) / (perimeter_ms / bins)
