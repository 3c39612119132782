"""How many bytes does each worker send and receive in each step of a ring AllReduce?

Ring AllReduce (reduce-scatter, then all-gather: 2(N-1) steps, chunk =
gradient bytes / N) between the job's workers in placement order: in each
step a worker sends one chunk to its right neighbour and receives one from
its left (`ring.Ring` moves them). An Up phase's bytes become the payload a
worker sends (`phase_bytes`) and the gradient that makes it (`gradient_bytes`).

No reduction arithmetic is done (our choice): the payload is zeros; what
matters to the fabric is the bytes, their timing and the waiting. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.workloads.types import Phase

# What a link carries per full TCP segment, on the wire: payload (MSS 1448 with
# timestamps), TCP/IP headers 52, Ethernet 14, preamble, FCS and gap 24; plus
# half an ACK (66 + 24, one per two segments) of the reverse flow, which in a
# ring shares the same NIC. The profile's bytes are what the link carries in
# the phase at its rate, so a replica sends the payload share of them.
TCP_MSS = 1448
TCP_WIRE_BYTES = TCP_MSS + 52 + 14 + 24 + (66 + 24) / 2
TCP_PAYLOAD_SHARE = TCP_MSS / TCP_WIRE_BYTES


@dataclass(frozen=True)
class RingStep:
    """One step of the ring for one worker: which chunk goes right, which comes from the left."""

    stage: str  # "reduce-scatter" or "all-gather"
    step: int
    send_chunk: int
    send_bytes: int
    recv_chunk: int
    recv_bytes: int


def chunk_sizes(total_bytes: int, workers: int) -> tuple[int, ...]:
    """The N chunks of a ring AllReduce; the remainder goes to the first chunks.

    >>> chunk_sizes(10, 4)
    (3, 3, 2, 2)
    """
    if workers < 1 or total_bytes < 0:
        raise ValueError(f"need workers >= 1 and bytes >= 0, got {workers}, {total_bytes}")
    base, extra = divmod(total_bytes, workers)
    return tuple(base + (1 if i < extra else 0) for i in range(workers))


def ring_allreduce_plan(total_bytes: int, workers: int, rank: int) -> tuple[RingStep, ...]:
    """Worker `rank`'s 2(N-1) steps: in reduce-scatter step s it sends chunk
    (rank - s) mod N and receives chunk (rank - s - 1) mod N; all-gather then
    circulates the reduced chunks, starting with chunk (rank + 1) mod N.

    >>> [(s.send_chunk, s.recv_chunk) for s in ring_allreduce_plan(300, 3, 0)]
    [(0, 2), (2, 1), (1, 0), (0, 2)]
    """
    sizes = chunk_sizes(total_bytes, workers)
    steps = []
    for s in range(workers - 1):
        send, recv = (rank - s) % workers, (rank - s - 1) % workers
        steps.append(RingStep("reduce-scatter", s, send, sizes[send], recv, sizes[recv]))
    for s in range(workers - 1):
        send, recv = (rank - s + 1) % workers, (rank - s) % workers
        steps.append(RingStep("all-gather", s, send, sizes[send], recv, sizes[recv]))
    return tuple(steps)


def phase_bytes(phase: Phase, scale: float, payload_share: float = TCP_PAYLOAD_SHARE) -> int:
    """The payload bytes one worker sends in an Up phase, times the emulation scale S.

    The phase's bytes at its rate are what the link carries on the wire;
    `payload_share` of them is TCP payload (`TCP_PAYLOAD_SHARE`), so at the
    scaled port rate the phase lasts as long as on the testbed.

    >>> phase_bytes(Phase(100.0, 50.0), 0.001, payload_share=1.0)
    625000
    >>> phase_bytes(Phase(100.0, 50.0), 0.001)
    571699
    """
    return round(phase.duration_ms * 1e-3 * phase.gbps * 1e9 / 8 * scale * payload_share)


def gradient_bytes(bytes_per_worker: int, workers: int) -> int:
    """The S of a ring AllReduce in which each worker sends `bytes_per_worker`
    (the inverse of `scheduler.workloads.profiles.allreduce_bytes_per_worker`).

    >>> gradient_bytes(1_500_000, 4)
    1000000
    """
    if workers < 2:
        return 0
    return round(bytes_per_worker * workers / (2 * (workers - 1)))
