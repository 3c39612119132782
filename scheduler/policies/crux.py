"""Which jobs' flows go first? Crux's GPU intensity, ranked and compressed to the switch's classes.

Crux (Cao et al., "Crux: GPU-efficient communication scheduling for deep
learning training", SIGCOMM 2024):

- GPU intensity (section 3, Definition 2, Equation 2): I_j = W_j / t_j,
  W_j the job's computation per iteration and t_j = max over links e of
  M_{j,e} / B_e, the time its traffic of one iteration takes on its most
  loaded link. Our profiles carry no FLOPs, so W_j is the job's GPU time of
  compute per iteration: workers x its Down phases' ms (our choice; equal
  to FLOPs up to one GPU's throughput, the same for every job here).
  M_{j,e} is the Mbit its flows crossing e send per iteration (the profile's
  Up phases, split over a worker's flows as the simulator splits them), so
  t_j is in ms and I_j in GPU-ms of compute per ms on the bottleneck.
- Priority (section 4.2, Equation 3): P_j = k_j x I_j; the paper's k_j
  corrects for DLT characteristics its summaries do not define; k_j = 1
  (our choice).
- Ranks: jobs by P_j, highest first, ties by name (our choice); every flow
  of a job takes the job's rank.
- Compression to the port's K classes (section 4.3): `compression.compress`
  over the jobs, two jobs contending when their flows share a directed link.
- Path selection (section 4.1) is not done: the fabric's routing stays
  (our choice; the chip forwards on <ingress port, dst MAC>).

A job with no traffic (one server) gets no flows and no class.
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import NetworkPlan, PolicyInput, compute_ms, job_flows_of, job_links
from .compression import compress, to_classes


@dataclass(frozen=True)
class Intensity:
    """One job's figures in Crux's terms."""

    job: str
    work_gpu_ms: float  # W_j
    bottleneck_ms: float  # t_j
    bottleneck: tuple[str, str]  # the link e that sets t_j

    @property
    def intensity(self) -> float:
        """I_j = W_j / t_j (Equation 2)."""
        return self.work_gpu_ms / self.bottleneck_ms


def intensity(inp: PolicyInput, job: str) -> Intensity | None:
    """Job `job`'s GPU intensity, or None when it sends nothing over the network."""
    flows = job_flows_of(inp, job)
    per_link: dict[tuple[str, str], float] = {}
    for f in flows:
        for lk in f.links:
            per_link[lk] = per_link.get(lk, 0.0) + f.mbit_per_iteration
    if not per_link:
        return None
    times = {lk: mbit / inp.capacity_gbps[lk] for lk, mbit in per_link.items()}
    worst = max(sorted(times), key=lambda lk: times[lk])
    if times[worst] <= 0:
        return None
    prof = inp.profiles[job]
    work = len(inp.placement[job]) * compute_ms(prof)
    return Intensity(job, work, times[worst], worst)


def ranked(inp: PolicyInput) -> tuple[Intensity, ...]:
    """Jobs with traffic, highest priority P_j = I_j first (ties by name)."""
    found = [x for x in (intensity(inp, j) for j in sorted(inp.placement)) if x is not None]
    return tuple(sorted(found, key=lambda x: (-x.intensity, x.job)))


@dataclass(frozen=True)
class CruxPolicy:
    """`crux`: flows in classes by their job's GPU intensity (see the module docstring)."""

    name: str = "crux"

    def plan(self, inp: PolicyInput) -> NetworkPlan:
        order = ranked(inp)
        links = [job_links(job_flows_of(inp, x.job)) for x in order]
        contend = [[a is not b and bool(la & lb) for b, lb in zip(order, links, strict=True)]
                   for a, la in zip(order, links, strict=True)]  # fmt: skip
        levels = compress([x.intensity for x in order], contend, inp.classes)
        classes = to_classes(levels, inp.classes)
        by_job = {x.job: c for x, c in zip(order, classes, strict=True)}
        return NetworkPlan(
            policy=self.name,
            classes={f.key: by_job[j] for j in by_job for f in job_flows_of(inp, j)},
            note=f"{len(order)} jobs ranked by GPU intensity into {len(set(classes))} classes",
        )
