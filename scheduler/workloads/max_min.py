"""How links share capacity among flows: max-min fairness by progressive filling.

Every active flow has a demand (its phase's Gbps at line rate) and crosses a
set of directed links. All unfrozen flows grow at the same pace; a flow
freezes when it reaches its demand or when one of its links fills up. The
result is the max-min fair allocation with demand caps, the fluid model of
what per-flow fair congestion control converges to.

The filling is compiled (numba): the simulator solves it at nearly every
event, millions of times per long trace, on groups of a few dozen flows where
numpy's per-call cost would dominate the arithmetic.

>>> import numpy as np
>>> inc = np.array([[1, 1], [1, 0], [0, 1]], dtype=bool)   # 3 flows x 2 links
>>> max_min_rates(inc, np.array([10.0, 10.0, 10.0]), np.array([10.0, 15.0])).tolist()
[5.0, 5.0, 10.0]

With per-flow classes (a switch's strict-priority queues, `scheduler.policies`)
the higher class is served first and max-min holds within a class:

>>> priority_rates(inc, np.array([10.0, 10.0, 10.0]), np.array([10.0, 15.0]), np.array([0, 1, 0])).tolist()
[0.0, 10.0, 10.0]
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt

EPS = 1e-9

# Compiled code: `error_model="numpy"` makes x / 0 give inf as numpy does;
# `cache=True` keeps the machine code between runs.
compiled = numba.njit(cache=True, error_model="numpy")


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
    """Max-min rates with the incidence given as (flow, link) pairs, one per crossing."""
    return max_min_pairs(
        np.ascontiguousarray(flow_of, dtype=np.int64),
        np.ascontiguousarray(link_of, dtype=np.int64),
        np.ascontiguousarray(demand, dtype=np.float64),
        np.ascontiguousarray(capacity, dtype=np.float64),
    )


def priority_rates(
    incidence: npt.NDArray[np.bool_] | npt.NDArray[np.float64],
    demand: npt.NDArray[np.float64],
    capacity: npt.NDArray[np.float64],
    classes: npt.NDArray[np.int64],
) -> npt.NDArray[np.float64]:
    """Strict priority between classes (higher first), max-min within each."""
    flow_of, link_of = np.nonzero(np.asarray(incidence))
    return max_min_classes(
        np.ascontiguousarray(flow_of, dtype=np.int64),
        np.ascontiguousarray(link_of, dtype=np.int64),
        np.ascontiguousarray(demand, dtype=np.float64),
        np.ascontiguousarray(capacity, dtype=np.float64),
        np.ascontiguousarray(classes, dtype=np.int64),
    )


@compiled
def tight_link(offered: float, capacity: float) -> bool:
    """Does a link's offered demand reach capacity (within the filling's "full" tolerance)?

    Max-min decomposes over the groups of flows connected through such links:
    a flow touching none of them gets its demand, whatever the others do.
    """
    return offered > capacity - EPS * max(capacity, 1.0)


@compiled
def max_min_pairs(
    flow_of: npt.NDArray[np.int64],
    link_of: npt.NDArray[np.int64],
    demand: npt.NDArray[np.float64],
    capacity: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]:
    """Progressive filling over (flow, link) crossings; compiled.

    Pairs keep every step proportional to the crossings instead of flows x
    links (big coupled components have thousands of both).

    Each round raises every unfrozen flow by the largest common amount that
    keeps all links within capacity and no flow above its demand, then freezes
    the flows that hit a cap; at least one flow freezes per round, so it ends
    in at most (number of flows) rounds.

    Only tight links (`tight_link`) can ever freeze a flow before it reaches
    its demand (a link's fair share never drops below its flows' smallest
    headroom otherwise), so the filling runs on the tight links and the flows
    crossing them; every other flow gets its demand. Same allocation, less work.
    """
    n_flows, n_links = len(demand), len(capacity)
    rates = np.zeros(n_flows)
    for f in range(n_flows):
        if demand[f] > EPS:
            rates[f] = demand[f]
    offered = np.zeros(n_links)
    for e in range(len(flow_of)):
        offered[link_of[e]] += rates[flow_of[e]]
    keep = np.zeros(len(flow_of), dtype=np.bool_)
    active = np.zeros(n_flows, dtype=np.bool_)
    n_active = 0
    for e in range(len(flow_of)):
        f = flow_of[e]
        if rates[f] > 0 and tight_link(offered[link_of[e]], capacity[link_of[e]]):
            keep[e] = True
            if not active[f]:
                active[f] = True
                n_active += 1
    if n_active == 0:
        return rates
    for f in range(n_flows):
        if active[f]:
            rates[f] = 0.0
    remaining = capacity.copy()
    counts = np.zeros(n_links)
    full = np.zeros(n_links, dtype=np.bool_)
    while n_active > 0:
        counts[:] = 0.0
        for e in range(len(flow_of)):
            if keep[e] and active[flow_of[e]]:
                counts[link_of[e]] += 1.0
        step = np.inf
        for lk in range(n_links):
            if counts[lk] > 0:
                step = min(step, remaining[lk] / counts[lk])
        for f in range(n_flows):
            if active[f]:
                step = min(step, demand[f] - rates[f])
        step = max(step, 0.0)
        for f in range(n_flows):
            if active[f]:
                rates[f] += step
        for lk in range(n_links):
            remaining[lk] -= step * counts[lk]
            full[lk] = counts[lk] > 0 and remaining[lk] <= EPS * max(capacity[lk], 1.0)
        frozen = np.zeros(n_flows, dtype=np.bool_)
        for f in range(n_flows):
            if active[f] and rates[f] >= demand[f] - EPS:
                frozen[f] = True
        for e in range(len(flow_of)):
            if keep[e] and full[link_of[e]]:
                frozen[flow_of[e]] = True
        for f in range(n_flows):
            if active[f] and frozen[f]:
                active[f] = False
                n_active -= 1
    return rates


@compiled
def max_min_classes(
    flow_of: npt.NDArray[np.int64],
    link_of: npt.NDArray[np.int64],
    demand: npt.NDArray[np.float64],
    capacity: npt.NDArray[np.float64],
    klass: npt.NDArray[np.int64],
) -> npt.NDArray[np.float64]:
    """Strict priority over (flow, link) crossings: each class, highest first, is
    filled max-min in what the classes above left of every link; compiled.

    One class is exactly `max_min_pairs` (the same code runs).
    """
    n_flows = len(demand)
    rates = np.zeros(n_flows)
    if n_flows == 0:
        return rates
    lo = klass.min()
    hi = klass.max()
    if lo == hi:
        return max_min_pairs(flow_of, link_of, demand, capacity)
    remaining = capacity.copy()
    local = np.full(n_flows, -1, dtype=np.int64)
    for c in range(hi, lo - 1, -1):
        n_in = 0
        for f in range(n_flows):
            if klass[f] == c:
                local[f] = n_in
                n_in += 1
            else:
                local[f] = -1
        if n_in == 0:
            continue
        n_cross = 0
        for e in range(len(flow_of)):
            if local[flow_of[e]] >= 0:
                n_cross += 1
        sub_flow = np.empty(n_cross, dtype=np.int64)
        sub_link = np.empty(n_cross, dtype=np.int64)
        sub_demand = np.empty(n_in)
        x = 0
        for e in range(len(flow_of)):
            f = flow_of[e]
            if local[f] >= 0:
                sub_flow[x] = local[f]
                sub_link[x] = link_of[e]
                x += 1
        for f in range(n_flows):
            if local[f] >= 0:
                sub_demand[local[f]] = demand[f]
        got = max_min_pairs(sub_flow, sub_link, sub_demand, remaining)
        for f in range(n_flows):
            if local[f] >= 0:
                rates[f] = got[local[f]]
        for e in range(n_cross):
            remaining[sub_link[e]] = max(remaining[sub_link[e]] - got[sub_flow[e]], 0.0)
    return rates
