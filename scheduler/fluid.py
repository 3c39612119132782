"""How links share capacity among flows: max-min fairness by progressive filling.

Every active flow has a demand (its phase's Gbps at line rate) and crosses a
set of directed links. All unfrozen flows grow at the same pace; a flow
freezes when it reaches its demand or when one of its links fills up. The
result is the max-min fair allocation with demand caps, the fluid model of
what per-flow fair congestion control converges to.

>>> import numpy as np
>>> inc = np.array([[1, 1], [1, 0], [0, 1]], dtype=bool)   # 3 flows x 2 links
>>> max_min_rates(inc, np.array([10.0, 10.0, 10.0]), np.array([10.0, 15.0])).tolist()
[5.0, 5.0, 10.0]
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

_EPS = 1e-9


def max_min_rates(
    incidence: npt.NDArray[np.bool_],
    demand: npt.NDArray[np.float64],
    capacity: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]:
    """Max-min fair rates for flows (rows) over links (columns) with demand caps.

    Each round raises every unfrozen flow by the largest common amount that
    keeps all links within capacity and no flow above its demand, then freezes
    the flows that hit a cap; at least one flow freezes per round, so it ends in
    at most (number of flows) rounds.
    """
    n_flows = incidence.shape[0]
    rates = np.zeros(n_flows)
    active = demand > _EPS
    if not active.any():
        return rates
    inc = incidence.astype(np.float64)
    remaining = capacity.astype(np.float64).copy()
    while active.any():
        counts = inc[active].sum(axis=0)
        used = counts > 0
        link_share = np.full(remaining.shape, np.inf)
        link_share[used] = remaining[used] / counts[used]
        headroom = demand[active] - rates[active]
        step = min(float(link_share.min()), float(headroom.min()))
        step = max(step, 0.0)
        rates[active] += step
        remaining -= step * counts
        full_links = used & (remaining <= _EPS * np.maximum(capacity, 1.0))
        at_demand = rates >= demand - _EPS
        on_full = (
            (inc[:, full_links].sum(axis=1) > 0) if full_links.any() else np.zeros(n_flows, bool)
        )
        active &= ~(at_demand | on_full)
    return rates
