"""What does the network side of a placement look like to a policy?

A network policy (Crux, EchelonFlow) runs after the placement side (any
scheduler) has decided: it sees the running jobs, their servers and
profiles and the topology, and answers per flow a strict-priority class
(0-7, higher served first, as a switch's priority queues) and/or a host
rate target. Flows are a job's (src, dst) server pairs (`scheduler.workloads.traffic`),
so the answer names exactly the flows the simulator and the fabric carry.

    >>> from topologies.generators import cassini_testbed
    >>> from scheduler.workloads.profiles import build_profile
    >>> vgg = build_profile("vgg19", 2)
    >>> inp = PolicyInput.of(cassini_testbed(), {"a": ("s01", "s05")}, {"a": vgg})
    >>> [f.key for f in job_flows_of(inp, "a")]
    [('a', 's01', 's05'), ('a', 's05', 's01')]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from scheduler.workloads.traffic import JobRouter, job_flows, nic_shares
from scheduler.workloads.types import Profile
from topologies.errors import UserInputError
from topologies.model import DirectedLink, Topology

# The classes a switch port offers (Tofino's and bmv2's priority queues).
SWITCH_CLASSES = 8

FlowKey = tuple[str, str, str]  # (job, src server, dst server)


@dataclass(frozen=True)
class PolicyInput:
    """The placement decision a policy answers: running jobs, servers, profiles, links."""

    placement: Mapping[str, tuple[str, ...]]
    profiles: Mapping[str, Profile]
    paths: Mapping[tuple[str, str], tuple[DirectedLink, ...]]
    capacity_gbps: Mapping[DirectedLink, float]
    classes: int = SWITCH_CLASSES
    now_ms: float = 0.0

    @staticmethod
    def of(
        topology: Topology,
        placement: Mapping[str, tuple[str, ...]],
        profiles: Mapping[str, Profile],
        classes: int = SWITCH_CLASSES,
        now_ms: float = 0.0,
        router: JobRouter | None = None,
    ) -> PolicyInput:
        """Route every placed job's flows once (the topology's own routing)."""
        router = router or JobRouter(topology)
        paths: dict[tuple[str, str], tuple[DirectedLink, ...]] = {}
        for job, servers in placement.items():
            for src, dst in router.job_flows(servers, profiles[job].parallelism, job):
                if (src, dst) not in paths:
                    paths[(src, dst)] = router.path_links(router.path(src, dst))
        return PolicyInput(
            placement={j: tuple(s) for j, s in placement.items()},
            profiles=dict(profiles),
            paths=paths,
            capacity_gbps=topology.capacity_gbps(),
            classes=check_classes(classes),
            now_ms=now_ms,
        )


@dataclass(frozen=True)
class FlowInfo:
    """One flow of a job: its ends, the links it crosses, the Mbit it sends per iteration."""

    job: str
    src: str
    dst: str
    links: tuple[DirectedLink, ...]
    mbit_per_iteration: float

    @property
    def key(self) -> FlowKey:
        return (self.job, self.src, self.dst)


@dataclass(frozen=True)
class NetworkPlan:
    """A policy's answer: class per flow (higher served first) and/or host rate per flow.

    Flows absent from `classes` are in class 0; absent from `rates_gbps`, unpaced.
    """

    policy: str
    classes: Mapping[FlowKey, int] = field(default_factory=dict)
    rates_gbps: Mapping[FlowKey, float] = field(default_factory=dict)
    note: str = ""


class NetworkPolicy(Protocol):
    """The network side of a run; composes with any scheduler (the placement side)."""

    @property
    def name(self) -> str: ...

    def plan(self, inp: PolicyInput) -> NetworkPlan: ...


def check_classes(classes: int) -> int:
    """A switch port has 1-8 priority classes; anything else is one line."""
    if not 1 <= classes <= SWITCH_CLASSES:
        raise UserInputError(f"classes must be 1-{SWITCH_CLASSES}, got {classes}")
    return classes


def up_mbit(profile: Profile) -> float:
    """Mbit one worker sends per iteration at its profile's rates (Gbps x ms)."""
    return sum(p.gbps * p.duration_ms for p in profile.phases if p.gbps > 0)


def compute_ms(profile: Profile) -> float:
    """Time per iteration the job computes (its Down phases)."""
    return sum(p.duration_ms for p in profile.phases if p.gbps <= 0)


def job_flows_of(inp: PolicyInput, job: str) -> tuple[FlowInfo, ...]:
    """A job's flows with their links and volume: the worker's volume split as the
    simulator splits a NIC's demand over a worker's flows (`nic_shares`)."""
    prof = inp.profiles[job]
    ends = job_flows(inp.placement[job], prof.parallelism)
    shares = nic_shares(list(ends))
    mbit = up_mbit(prof)
    return tuple(
        FlowInfo(job, s, d, inp.paths[(s, d)], mbit * share)
        for (s, d), share in zip(ends, shares, strict=True)
    )


def job_links(flows: tuple[FlowInfo, ...]) -> frozenset[DirectedLink]:
    """Every directed link a set of flows crosses."""
    return frozenset(lk for f in flows for lk in f.links)


def flow_classes(
    policy: NetworkPolicy,
    topology: Topology,
    placement: Mapping[str, tuple[str, ...]],
    profiles: Mapping[str, Profile],
    now_ms: float = 0.0,
    router: JobRouter | None = None,
) -> dict[str, tuple[int, ...]]:
    """Per placed job, its flows' classes in `job_flows` order (what the simulator
    numbers); jobs whose flows are all in class 0 are left out.

    The simulator asks at each scheduler decision, with every placed job on
    its own profile (a time-shared job's too, our choice); a class holds
    until the next decision. It honours classes only: a policy that sets
    host rates is refused in one line.
    """
    router = router or JobRouter(topology)
    inp = PolicyInput.of(topology, placement, profiles, now_ms=now_ms, router=router)
    plan = policy.plan(inp)
    if plan.rates_gbps:
        raise UserInputError(
            f"policy {plan.policy} sets host rates; the simulator honours classes only"
        )
    out: dict[str, tuple[int, ...]] = {}
    for job, servers in placement.items():
        ends = router.job_flows(servers, profiles[job].parallelism)
        classes = tuple(plan.classes.get((job, a, b), 0) for a, b in ends)
        if any(classes):
            out[job] = classes
    return out
