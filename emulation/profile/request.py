"""Can a profiling run measure what it is asked, checked before a fabric is built?

A profile that cannot be measured was found only after the run: too few
iterations (`measure` needs `WARMUP` + 3 starts), more workers than the
topology has servers (`spread_servers`), or sharing runs whose placements
(`sharing.SHARING_PLACEMENTS`, cassini-testbed's servers through its
`tor1->agg1`) are not in the topology. `check_request` says so in one line
naming the flag, before anything runs:

>>> from topologies.library import load_topology
>>> check_request(load_topology("leaf-spine:2:1:2"), workers=2, iterations=1)
Traceback (most recent call last):
...
topologies.errors.UserInputError: --iterations 1: a profile needs at least 4 (the first is left out as warm-up, and the phases are read over 3 intervals)
"""

from __future__ import annotations

from collections.abc import Sequence

from topologies.errors import UserInputError
from topologies.model import Topology

from .measure import WARMUP, spread_servers
from .sharing import SHARED_LINK, SHARING_PLACEMENTS

# The fewest iterations `measure` reads phases from: the warm-up, then 3 intervals.
MIN_ITERATIONS = WARMUP + 3


def check_request(
    topo: Topology, workers: int, iterations: int, sharing: Sequence[int] = ()
) -> tuple[str, ...]:
    """The servers each model's run uses, or a UserInputError naming the flag that asks
    for what cannot be measured on `topo`."""
    if iterations < MIN_ITERATIONS:
        raise UserInputError(
            f"--iterations {iterations}: a profile needs at least {MIN_ITERATIONS} (the first "
            f"is left out as warm-up, and the phases are read over {MIN_ITERATIONS - WARMUP} "
            "intervals)"
        )
    try:
        servers = spread_servers(topo, workers)
    except ValueError as err:
        raise UserInputError(f"--workers {workers}: {err}") from None
    if sharing:
        check_sharing(topo, max(sharing))
    return servers


def check_sharing(topo: Topology, jobs: int) -> None:
    """The first `jobs` sharing placements and the shared link exist in `topo`."""
    names = set(topo.server_names())
    missing = sorted({s for pair in SHARING_PLACEMENTS[:jobs] for s in pair} - names)
    links = {f"{a}->{b}" for a, b in topo.capacity_gbps()}
    if missing or SHARED_LINK not in links:
        what = f"no server {', '.join(missing)}" if missing else f"no link {SHARED_LINK}"
        raise UserInputError(
            f"--sharing: its {jobs} jobs run on cassini-testbed's servers through "
            f"{SHARED_LINK}, and topology '{topo.name}' has {what} (use -t cassini-testbed)"
        )
