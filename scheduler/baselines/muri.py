"""Muri-style grouping: the comparison the NAGS design makes (Zhao et al., SIGCOMM 2022).

Muri interleaves jobs on the same GPUs in time so that their stages use
different resources at once (abstract and section 3 of the paper; its
public code pairs jobs by maximum-weight matching, the Blossom algorithm,
over jobs of the same GPU count only). What this harness keeps, on the same
engine as NAGS (`nags.SharingScheduler`) so the two differ only in these
rules:

- Only jobs of the same GPU count share, on exactly the same GPU slots.
- Communication time is fixed: the profile's, wherever the job runs (no
  network awareness, the point NAGS makes against it).
- Two resources (GPU, network), so at most two jobs per group, as Muri
  interleaves at most as many jobs as resource types.
- A group's weight is Muri's used ratio: both resources' busy time over two
  cycles; a group slower than running its jobs one after another (cycle >
  2 x the shorter iteration alone) has weight 0 and is not formed.
- Grouping is greedy, one waiting job at a time in Themis's order, joining
  the running job of the best weight (our choice: Muri re-matches every
  job each round with Blossom; re-grouping running jobs would migrate them
  here). A job takes free GPUs alone first (any placement, as Muri places
  without regard to the network), and shares only when none are free.
"""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.workloads.traffic import JobRouter
from topologies.model import DirectedLink

from .base import ClusterInfo, ProfileBook
from .nags import SharingPolicy, SharingScheduler

MURI_POLICY = SharingPolicy(
    max_group=2,
    same_gpus_only=True,
    network_aware=False,
    consolidate=False,
    split_out=False,
)


def muri_scheduler(
    info: ClusterInfo,
    book: ProfileBook,
    router: JobRouter,
    capacities: Mapping[DirectedLink, float],
) -> SharingScheduler:
    """Muri-style grouping on the sharing engine (see the module docstring)."""
    return SharingScheduler(info, book, router, capacities, MURI_POLICY, name="muri")
