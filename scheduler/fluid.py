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
# (measured) below this many crossings plain Python beats numpy's per-call cost
_SMALL_CROSSINGS = 96


def max_min_rates(
    incidence: npt.NDArray[np.bool_] | npt.NDArray[np.float64],
    demand: npt.NDArray[np.float64],
    capacity: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]:
    """Max-min fair rates for flows (rows) over links (columns) with demand caps."""
    flow_of, link_of = np.nonzero(np.asarray(incidence))
    return max_min_rates_sparse(flow_of, link_of, demand, capacity)


def max_min_rates_sparse(
    flow_of: npt.NDArray[np.intp],
    link_of: npt.NDArray[np.intp],
    demand: npt.NDArray[np.float64],
    capacity: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]:
    """Max-min rates with the incidence given as (flow, link) pairs, one per crossing.

    A flow crosses a handful of links, so pairs keep every step proportional to
    the crossings instead of flows x links (big coupled components have
    thousands of both).

    Each round raises every unfrozen flow by the largest common amount that
    keeps all links within capacity and no flow above its demand, then freezes
    the flows that hit a cap; at least one flow freezes per round, so it ends in
    at most (number of flows) rounds.

    Only "tight" links, whose summed demand comes within the fill's "full"
    tolerance of capacity, can ever freeze a flow before it reaches its demand
    (a link's fair share never drops below its flows' smallest headroom
    otherwise), so the filling runs on the tight links and the flows crossing
    them; every other flow gets its demand. Same allocation, less work.
    """
    rates = np.where(demand > _EPS, demand, 0.0)
    if flow_of.size == 0 or not rates.any():
        return rates
    offered = np.bincount(link_of, weights=rates[flow_of], minlength=len(capacity)).astype(
        np.float64, copy=False
    )
    full_tol = _EPS * np.maximum(capacity, 1.0)
    tight = tight_links(offered, capacity)
    if not tight.any():
        return rates
    keep = tight[link_of] & (rates[flow_of] > 0)
    e_flow, e_link = flow_of[keep], link_of[keep]
    crossing = np.zeros(len(rates), dtype=bool)
    crossing[e_flow] = True
    flows = np.flatnonzero(crossing)
    row_of = np.cumsum(crossing) - 1  # flow index -> row among the crossing flows
    fill = _fill_small if len(e_flow) <= _SMALL_CROSSINGS else _fill
    rates[flows] = fill(row_of[e_flow], e_link, demand[flows], capacity, full_tol)
    return rates


def tight_links(
    offered: npt.NDArray[np.float64], capacity: npt.NDArray[np.float64]
) -> npt.NDArray[np.bool_]:
    """Links whose offered demand reaches capacity (within the fill's "full" tolerance).

    Max-min decomposes over the groups of flows connected through such links:
    a flow touching none of them gets its demand, whatever the others do.
    """
    return offered > capacity - _EPS * np.maximum(capacity, 1.0)


def _fill(
    e_row: npt.NDArray[np.intp],
    e_col: npt.NDArray[np.intp],
    demand: npt.NDArray[np.float64],
    capacity: npt.NDArray[np.float64],
    full_tol: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]:
    """Progressive filling of flows that all have positive demand."""
    n_rows, n_cols = len(demand), len(capacity)
    rates = np.zeros(n_rows)
    active = np.ones(n_rows, dtype=bool)
    remaining = capacity.astype(np.float64)
    while active.any():
        counts = np.bincount(e_col[active[e_row]], minlength=n_cols).astype(np.float64)
        used = counts > 0
        link_share = np.full(n_cols, np.inf)
        np.divide(remaining, counts, out=link_share, where=used)
        headroom = demand[active] - rates[active]
        step = min(float(link_share.min()), float(headroom.min()))
        step = max(step, 0.0)
        rates[active] += step
        remaining -= step * counts
        full_links = used & (remaining <= full_tol)
        frozen = rates >= demand - _EPS
        if full_links.any():
            frozen[e_row[full_links[e_col]]] = True
        active &= ~frozen
    return rates


def _fill_small(
    e_row: npt.NDArray[np.intp],
    e_col: npt.NDArray[np.intp],
    demand: npt.NDArray[np.float64],
    capacity: npt.NDArray[np.float64],
    full_tol: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]:
    """`_fill` for a few dozen crossings, in plain Python: same steps, same floats.

    An event in a big component usually re-solves a small group, where numpy's
    per-call overhead dominates the arithmetic.
    """
    n_rows = len(demand)
    dem = demand.tolist()
    links_of: list[list[int]] = [[] for _ in range(n_rows)]
    for r, c in zip(e_row.tolist(), e_col.tolist(), strict=True):
        links_of[r].append(c)
    cols = sorted({c for ls in links_of for c in ls})
    remaining = {c: float(capacity[c]) for c in cols}
    tol = {c: float(full_tol[c]) for c in cols}
    rates = [0.0] * n_rows
    active = list(range(n_rows))
    while active:
        counts: dict[int, int] = {}
        for r in active:
            for c in links_of[r]:
                counts[c] = counts.get(c, 0) + 1
        step = min(
            min(remaining[c] / k for c, k in counts.items()), min(dem[r] - rates[r] for r in active)
        )
        step = max(step, 0.0)
        for r in active:
            rates[r] += step
        for c, k in counts.items():
            remaining[c] -= step * k
        full = {c for c in counts if remaining[c] <= tol[c]}
        active = [
            r
            for r in active
            if not (rates[r] >= dem[r] - _EPS or any(c in full for c in links_of[r]))
        ]
    return np.array(rates, dtype=np.float64)
