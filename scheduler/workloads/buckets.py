"""One data-parallel iteration as PyTorch DDP over NCCL runs it: buckets all-reduced during backprop.

The testbed ran PyTorch 1.8.0 with NCCL 2.11.4 and chose batch sizes that keep
each GPU over 80% busy "with intra-job pipelining enabled" (the paper's
section 5 setup; `design/testbed.md`, "The workloads"). DDP's reducer
overlaps the AllReduce with the backward pass:

- gradients become ready layer by layer, last layer first; a layer's
  gradient is ready once backprop has passed it;
- they are grouped in buckets of whole parameter tensors, in the order they
  become ready (the reducer rebuilds its buckets after the first iteration
  from the order it saw; PyTorch >= 1.7). The first bucket closes past
  1 MiB (`_DEFAULT_FIRST_BUCKET_BYTES`), the others past 25 MiB
  (`bucket_cap_mb=25`): a tensor is never split, so one larger than the cap
  is a bucket of its own;
- a bucket's AllReduce starts once the bucket is full and the previous
  bucket's AllReduce is done (NCCL runs them in order on one stream) and
  sends 2(N-1)/N x its bytes per worker over the ring at the NIC rate;
- the iteration ends when both the backward pass and the last AllReduce end.

(our choice) Backprop costs twice the forward pass's FLOPs (a gradient for
the inputs and one for the weights), so the forward pass is a third of the
compute and each layer's share of the backward pass is its share of the
model's FLOPs. The optimizer step is folded into the backward pass, and a
collective's start-up latency is left out (tens of us against ms-long
buckets).

`timeline_phases` turns the timeline into the profile every part of the
harness runs (the scheduler, the replicas and the fluid simulator alike):
Down until the first bucket's AllReduce, then bursts at the NIC rate with
the gaps between them. (our choice) A gap shorter than `MIN_GAP_MS` is
closed by starting the burst before it later, so no bucket is sent before it
is ready and the iteration's end does not move; the same is done for the
shortest gaps until at most `MAX_BURSTS` bursts remain, because every burst
is one ring AllReduce (2(N-1) steps, each a barrier) in the replicas.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.workloads.types import Phase

FIRST_BUCKET_BYTES = 1024 * 1024  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
BUCKET_CAP_BYTES = 25 * 1024 * 1024  # DistributedDataParallel(bucket_cap_mb=25)
FORWARD_SHARE = 1.0 / 3.0  # (our choice) backward = 2 x forward FLOPs
MIN_GAP_MS = 1.0  # (our choice) see the module docstring
MAX_BURSTS = 4  # (our choice) see the module docstring
_EPS = 1e-9


@dataclass(frozen=True)
class Layer:
    """One parameter tensor group of a model, in forward order: its parameter count
    and its forward FLOPs per sample (either may be 0)."""

    name: str
    params: float
    gflops: float


@dataclass(frozen=True)
class Bucket:
    """A bucket's layers (names), its gradient bytes, when it is full and when the
    ring sends it (ms from the iteration's start)."""

    layers: tuple[str, ...]
    grad_bytes: float
    ready_ms: float
    start_ms: float
    end_ms: float


@dataclass(frozen=True)
class DdpTimeline:
    """One iteration of one worker: its compute and its buckets' AllReduces."""

    forward_ms: float
    backward_ms: float
    buckets: tuple[Bucket, ...]

    @property
    def compute_ms(self) -> float:
        return self.forward_ms + self.backward_ms

    @property
    def iteration_ms(self) -> float:
        last = max((b.end_ms for b in self.buckets), default=0.0)
        return max(self.compute_ms, last)

    @property
    def gpu_busy(self) -> float:
        """The fraction of the iteration the GPU computes (alone, no contention)."""
        return self.compute_ms / self.iteration_ms


def assign_buckets(
    layers: Sequence[Layer],
    bytes_per_param: float,
    first_cap: float = FIRST_BUCKET_BYTES,
    cap: float = BUCKET_CAP_BYTES,
) -> tuple[tuple[int, ...], ...]:
    """Indices into `layers` per bucket, in the order the buckets become ready
    (last layer first); layers without parameters belong to none.

    >>> rows = [Layer("a", 1e6, 1.0), Layer("b", 0.2e6, 1.0), Layer("c", 0.1e6, 1.0)]
    >>> assign_buckets(rows, 4.0)  # c: 0.4 MB < 1 MiB, c+b: 1.2 MB closes the first
    ((2, 1), (0,))
    """
    buckets: list[tuple[int, ...]] = []
    current: list[int] = []
    size, limit = 0.0, first_cap
    for index in reversed(range(len(layers))):
        if layers[index].params <= 0:
            continue
        current.append(index)
        size += layers[index].params * bytes_per_param
        if size >= limit:
            buckets.append(tuple(current))
            current, size, limit = [], 0.0, cap
    if current:
        buckets.append(tuple(current))
    return tuple(buckets)


def ring_bytes(grad_bytes: float, workers: int) -> float:
    """What one worker sends in a ring AllReduce of `grad_bytes`: 2(N-1)/N x S.

    >>> ring_bytes(25e6, 4)
    37500000.0
    """
    return 2.0 * (workers - 1) / workers * grad_bytes


def ring_ms(grad_bytes: float, workers: int, nic_gbps: float) -> float:
    """How long a ring AllReduce of `grad_bytes` keeps one worker's NIC busy.

    >>> ring_ms(25e6, 4, 50.0)  # 2 x 3/4 x 25 MB at 50 Gbit/s
    6.0
    """
    return ring_bytes(grad_bytes, workers) * 8.0 / (nic_gbps * 1e9) * 1e3


def ddp_timeline(
    layers: Sequence[Layer],
    compute_ms: float,
    workers: int,
    nic_gbps: float,
    bytes_per_param: float = 4.0,
    forward_share: float = FORWARD_SHARE,
) -> DdpTimeline:
    """When each bucket is ready and sent, for one iteration of `compute_ms` (forward
    and backward) with `workers` workers (see the module docstring)."""
    forward = compute_ms * forward_share
    backward = compute_ms - forward
    total = sum(layer.gflops for layer in layers)
    # A layer's gradient is ready when backprop has passed it (and every later layer).
    ready = [0.0] * len(layers)
    t = forward
    for index in reversed(range(len(layers))):
        share = layers[index].gflops / total if total > 0 else 1.0 / len(layers)
        t += backward * share
        ready[index] = t
    buckets: list[Bucket] = []
    free_at = 0.0
    for indices in assign_buckets(layers, bytes_per_param):
        size = sum(layers[i].params for i in indices) * bytes_per_param
        full = max(ready[i] for i in indices)
        start = max(full, free_at)
        free_at = start + ring_ms(size, workers, nic_gbps)
        names = tuple(layers[i].name for i in indices)
        buckets.append(Bucket(names, size, full, start, free_at))
    return DdpTimeline(forward, backward, tuple(buckets))


def _bursts(timeline: DdpTimeline) -> list[tuple[float, float]]:
    """The NIC's busy intervals: back-to-back AllReduces joined."""
    out: list[tuple[float, float]] = []
    for b in timeline.buckets:
        if b.end_ms - b.start_ms <= _EPS:
            continue
        if out and b.start_ms <= out[-1][1] + _EPS:
            out[-1] = (out[-1][0], b.end_ms)
        else:
            out.append((b.start_ms, b.end_ms))
    return out


def _close_gap(bursts: list[tuple[float, float]], k: int) -> None:
    """Join bursts k and k+1: burst k starts later by the gap, so it ends where k+1 begins."""
    gap = bursts[k + 1][0] - bursts[k][1]
    bursts[k : k + 2] = [(bursts[k][0] + gap, bursts[k + 1][1])]


def timeline_phases(
    timeline: DdpTimeline,
    nic_gbps: float,
    min_gap_ms: float = MIN_GAP_MS,
    max_bursts: int = MAX_BURSTS,
) -> tuple[Phase, ...]:
    """The timeline as (duration, Gbit/s) phases: Down, then bursts at the NIC rate.

    >>> t = DdpTimeline(10.0, 20.0, (Bucket(("b",), 1.0, 12.0, 12.0, 14.0),
    ...                              Bucket(("a",), 1.0, 14.5, 14.5, 20.0),
    ...                              Bucket(("z",), 1.0, 30.0, 30.0, 32.0)))
    >>> [(p.duration_ms, p.gbps) for p in timeline_phases(t, 50.0)]
    [(12.5, 0.0), (7.5, 50.0), (10.0, 0.0), (2.0, 50.0)]
    """
    bursts = _bursts(timeline)
    while True:
        gaps = [(bursts[k + 1][0] - bursts[k][1], k) for k in range(len(bursts) - 1)]
        if not gaps:
            break
        gap, k = min(gaps)
        if gap >= min_gap_ms and len(bursts) <= max_bursts:
            break
        _close_gap(bursts, k)
    phases: list[Phase] = []
    now = 0.0
    for start, end in bursts:
        if start - now > _EPS:
            phases.append(Phase(start - now, 0.0))
        phases.append(Phase(end - start, nic_gbps))
        now = end
    if timeline.iteration_ms - now > _EPS:
        phases.append(Phase(timeline.iteration_ms - now, 0.0))
    return tuple(phases)
