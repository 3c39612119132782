"""Which core the switch's packet loop runs on, and where the hosts' receive work goes.

A frame the switch sends into a host's veth is received by that host's IP and
TCP stack at once, in the sender's context: without steering, every host's
receive processing (and the ACK it sends back) ran on the switch's core and
was billed to the packet loop. Measured with `benchmarks/bench_fabric_flows.py`
(12 TCP flows): 35% of the loop's time was the hosts' `tcp_v4_rcv` under its
`sendmmsg`. (our choice) With two or more CPUs the loop is pinned to the last
one and every host veth's receive queue is steered (RPS) to the others, so the
loop's core does the switch's work only; the hosts' stacks and the replicas
share the rest. With one CPU nothing is pinned.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from topologies.errors import UserInputError


@dataclass(frozen=True)
class CpuSplit:
    """The packet loop's core and the cores the hosts' receive processing goes to."""

    loop_cpu: int
    host_cpus: frozenset[int]

    @property
    def rps_mask(self) -> str:
        """`host_cpus` as `/sys/class/net/IF/queues/rx-0/rps_cpus` takes it: hex words
        of 32 CPUs each, most significant first, separated by commas."""
        bits = sum(1 << cpu for cpu in self.host_cpus)
        words = max(1, (max(self.host_cpus) // 32) + 1)
        return ",".join(f"{(bits >> (32 * w)) & 0xFFFFFFFF:x}" for w in reversed(range(words)))


def split_cpus(available: Iterable[int]) -> CpuSplit | None:
    """The loop on the highest available CPU, the hosts on the others; None for one CPU."""
    cpus = sorted(set(available))
    if any(cpu < 0 for cpu in cpus):
        raise UserInputError(f"CPU numbers must be >= 0, got {cpus}")
    if len(cpus) < 2:
        return None
    return CpuSplit(loop_cpu=cpus[-1], host_cpus=frozenset(cpus[:-1]))
