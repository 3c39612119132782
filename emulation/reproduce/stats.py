"""How sure is a figure measured over a few seeds or runs? Mean and 95% t-interval.

Student's t, two-sided 95%, from a small table (numpy has no t quantile and
the project does not depend on scipy). Degrees of freedom between two table
rows take the smaller row's value, which widens the interval a little
(conservative, our choice).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# two-sided 95% critical values of Student's t by degrees of freedom
T95: dict[int, float] = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
    9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131,
    16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074,
    23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045,
    30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980,
}  # fmt: skip
Z95 = 1.960  # df -> infinity


def t95(df: int) -> float:
    """The critical value for `df` degrees of freedom.

    >>> t95(4), t95(35), t95(1000)
    (2.776, 2.042, 1.96)
    """
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    rows = [d for d in T95 if d <= df]
    return Z95 if df > max(T95) else T95[max(rows)]


@dataclass(frozen=True)
class Interval:
    """A mean over `n` values and its 95% interval (None with one value or an infinite one)."""

    mean: float
    low: float | None
    high: float | None
    n: int

    def as_dict(self) -> dict[str, float | int | None]:
        return {"mean": self.mean, "low": self.low, "high": self.high, "n": self.n}


def interval(values: Sequence[float]) -> Interval:
    """Mean and t-interval of `values`.

    >>> interval([1.0, 2.0, 3.0])
    Interval(mean=2.0, low=-0.484338, high=4.484338, n=3)
    """
    xs = np.asarray(list(values), dtype=float)
    n = int(xs.size)
    if n == 0:
        raise ValueError("an interval needs at least one value")
    if not np.all(np.isfinite(xs)):
        mean = float(np.inf) if np.any(np.isposinf(xs)) else float("nan")
        return Interval(mean, None, None, n)
    mean = float(xs.mean())
    if n == 1:
        return Interval(mean, None, None, 1)
    half = t95(n - 1) * float(xs.std(ddof=1)) / math.sqrt(n)
    return Interval(mean, round(mean - half, 6), round(mean + half, 6), n)


def mean_half_width(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% t-interval (NaN with one value), the pair a
    table prints as "mean ± half".

    >>> m, h = mean_half_width([1.0, 2.0, 3.0])
    >>> m, round(h, 6)
    (2.0, 2.484338)
    >>> mean_half_width([5.0])
    (5.0, nan)
    """
    xs = np.asarray(list(values), dtype=float)
    n = int(xs.size)
    if n == 0:
        raise ValueError("a mean needs at least one value")
    if n == 1:
        return float(xs[0]), float("nan")
    return float(xs.mean()), t95(n - 1) * float(xs.std(ddof=1)) / math.sqrt(n)
