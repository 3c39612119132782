"""The compatibility score of rotations the tests choose, to check what the solvers report."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from scheduler.cassini.compatibility import discretize, excess_sum, score_from_excess
from scheduler.workloads.types import Profile


def score_at(
    profiles: Sequence[Profile],
    capacity_gbps: float,
    rotations_deg: Mapping[str, float],
    precision_deg: float = 5.0,
) -> float:
    """The score of given rotations, computed directly on the discretized circle."""
    problem = discretize(profiles, precision_deg)
    step = 360.0 / problem.bins
    total = np.zeros(problem.bins)
    for j, p in enumerate(profiles):
        total += np.roll(problem.demands[j], round(rotations_deg.get(p.name, 0.0) / step))
    return score_from_excess(excess_sum(total, capacity_gbps), problem.bins, capacity_gbps)
