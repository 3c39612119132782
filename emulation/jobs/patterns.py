"""Who sends how many bytes to whom, step by step, in one Up phase of a job?

The traffic patterns `scheduler.workloads.traffic.job_flows` documents, over the
job's workers in placement order (rank i = the i-th worker), with the
share rule the fluid simulator gives each flow (`scheduler.simulator.component`):
a flow from worker a to worker b carries 1 / max(flows a sends, flows b
receives) of a worker's Up-phase bytes, so a job never oversubscribes its
own NICs and the phase lasts its profile duration when nothing else
competes, in the emulation as in the simulator.

- data, tensor, hybrid: the ring AllReduce (`ring_plan.ring_allreduce_plan`),
  2(N-1) steps; worker i sends to i+1 only. Tensor and hybrid use the ring
  because tensor-parallel AllReduce is ring-based in NCCL (the scheduler's
  choice, kept here so both sides load the same links).
- pipeline: activations i -> i+1 and gradients i+1 -> i between consecutive
  stages plus the ring's closing hop (N-1 -> 0, the AllReduce of tied
  embeddings and replicas), all at once in one step. (our choice) One step
  per phase: the profile merges a pipeline's micro-batch transfers into
  phases that say only how many bytes a worker moves and for how long.

A step ends for a worker when all it was due to receive has arrived, so a
slow flow anywhere holds its neighbours, as a real collective does.

    >>> [(t.src, t.dst, t.bytes) for t in phase_plan("pipeline", 3, 1000)[0].transfers]
    [(0, 1, 500), (1, 0, 500), (1, 2, 500), (2, 1, 500), (2, 0, 500)]
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from scheduler.workloads.profiles import PARALLELISMS
from scheduler.workloads.traffic import job_flows, nic_shares
from topologies.errors import UserInputError, did_you_mean

from .ring_plan import gradient_bytes, ring_allreduce_plan

RING_PATTERNS = ("data", "tensor", "hybrid")
Flow = tuple[int, int]


@dataclass(frozen=True)
class Transfer:
    """`bytes` from worker `src` to worker `dst` within one step."""

    src: int
    dst: int
    bytes: int


@dataclass(frozen=True)
class PatternStep:
    """Transfers that run at once; the step ends when each has arrived."""

    transfers: tuple[Transfer, ...]

    def sends(self, rank: int) -> dict[int, int]:
        """What `rank` sends in this step: destination rank -> bytes."""
        return {t.dst: t.bytes for t in self.transfers if t.src == rank}

    def receives(self, rank: int) -> dict[int, int]:
        """What `rank` waits for in this step: source rank -> bytes."""
        return {t.src: t.bytes for t in self.transfers if t.dst == rank}


def validate_pattern(parallelism: str, workers: int) -> str:
    """The parallelism as a pattern name; an unknown one is refused with the known ones."""
    kind = parallelism.strip().lower()
    if kind not in PARALLELISMS:
        raise UserInputError(did_you_mean(parallelism, PARALLELISMS, "parallelism"))
    if workers < 1:
        raise UserInputError(f"a job needs >= 1 worker, got {workers}")
    return kind


@cache
def pattern_flows(parallelism: str, workers: int) -> tuple[Flow, ...]:
    """The (src, dst) worker pairs of a job's traffic: `job_flows` over ranks.

    >>> pattern_flows("data", 3)
    ((0, 1), (1, 2), (2, 0))
    """
    kind = validate_pattern(parallelism, workers)
    labels = [str(r) for r in range(workers)]
    return tuple((int(a), int(b)) for a, b in job_flows(labels, kind))


def flow_shares(flows: tuple[Flow, ...]) -> dict[Flow, float]:
    """Each flow's fraction of a worker's NIC: 1 / max(out-degree of src, in-degree of dst).

    >>> flow_shares(((0, 1), (1, 0), (1, 2), (2, 1), (2, 0)))[(1, 2)]
    0.5
    >>> flow_shares(((0, 1), (1, 0)))
    {(0, 1): 1.0, (1, 0): 1.0}
    """
    return dict(zip(flows, nic_shares(flows), strict=True))


def pacing_shares(parallelism: str, workers: int, rank: int) -> dict[int, float]:
    """Destination rank -> the fraction of `rank`'s NIC rate its connection is paced at."""
    shares = flow_shares(pattern_flows(parallelism, workers))
    return {b: share for (a, b), share in shares.items() if a == rank}


def phase_plan(parallelism: str, workers: int, bytes_per_worker: int) -> tuple[PatternStep, ...]:
    """The steps of one Up phase in which each worker moves `bytes_per_worker`
    (the phase's bytes x S, `ring_plan.phase_bytes`); see the module docstring."""
    kind = validate_pattern(parallelism, workers)
    if workers < 2 or bytes_per_worker < 0:
        return ()
    if kind in RING_PATTERNS:
        total = gradient_bytes(bytes_per_worker, workers)
        plans = [ring_allreduce_plan(total, workers, r) for r in range(workers)]
        return tuple(
            PatternStep(tuple(
                Transfer(r, (r + 1) % workers, plans[r][i].send_bytes) for r in range(workers)
            ))
            for i in range(len(plans[0]))
        )  # fmt: skip
    shares = flow_shares(pattern_flows(kind, workers))
    transfers = tuple(Transfer(a, b, round(bytes_per_worker * s)) for (a, b), s in shares.items())
    return (PatternStep(transfers),)


def neighbours(
    parallelism: str, workers: int, rank: int
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(ranks `rank` sends to, ranks it receives from) in the job's pattern."""
    flows = pattern_flows(parallelism, workers)
    return (
        tuple(b for a, b in flows if a == rank),
        tuple(a for a, b in flows if b == rank),
    )


def bytes_sent(plan: tuple[PatternStep, ...], rank: int) -> int:
    """What `rank` sends over a whole plan."""
    return sum(sum(step.sends(rank).values()) for step in plan)


def ring_steps(
    plan: tuple[PatternStep, ...], workers: int, rank: int
) -> tuple[list[int], list[int]] | None:
    """`rank`'s bytes per step to its right and from its left when every step of `plan`
    is a ring step (the AllReduce's), which `Ring.relay` cuts through; None otherwise.

    >>> ring_steps(phase_plan("data", 3, 300), 3, 0)
    ([75, 75, 75, 75], [75, 75, 75, 75])
    >>> ring_steps(phase_plan("pipeline", 3, 1000), 3, 0) is None
    True
    """
    right, left = (rank + 1) % workers, (rank - 1) % workers
    sends, receives = [], []
    for step in plan:
        out, into = step.sends(rank), step.receives(rank)
        if set(out) - {right} or set(into) - {left}:
            return None
        sends.append(out.get(right, 0))
        receives.append(into.get(left, 0))
    return (sends, receives) if plan else None
