"""Traffic patterns of a job's Up phase: the plan against brute-force expectations.

The expectations are rebuilt here from the scheduler's own statements
(`scheduler.workloads.traffic` docstring: who talks to whom; the simulator's share
rule: 1 / max(flows the source sends, flows the destination receives)).
"""

from __future__ import annotations

import itertools

import pytest

from emulation.jobs.patterns import (
    bytes_sent,
    neighbours,
    pacing_shares,
    pattern_flows,
    phase_plan,
)
from emulation.jobs.ring_plan import gradient_bytes, ring_allreduce_plan
from scheduler.workloads.traffic import job_flows
from topologies.errors import UserInputError


def brute_pipeline_flows(n: int) -> set[tuple[int, int]]:
    """Stages talk both ways to their neighbours; the ring closes from the last to the first."""
    chain = {(i, i + 1) for i in range(n - 1)} | {(i + 1, i) for i in range(n - 1)}
    ring = {(i, (i + 1) % n) for i in range(n)}
    return chain | ring


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8])
@pytest.mark.parametrize("kind", ["data", "tensor", "hybrid", "pipeline"])
def test_flows_are_the_schedulers_over_ranks(kind: str, n: int) -> None:
    flows = set(pattern_flows(kind, n))
    expected = (
        brute_pipeline_flows(n) if kind == "pipeline" else {(i, (i + 1) % n) for i in range(n)}
    )
    assert flows == expected
    # The same pattern the simulator routes, server names for ranks.
    servers = [f"s{i:02d}" for i in range(n)]
    assert {(int(a[1:]), int(b[1:])) for a, b in job_flows(servers, kind)} == expected


@pytest.mark.parametrize("n", [2, 3, 4, 6])
@pytest.mark.parametrize("per_worker", [0, 1, 999, 375_000])
def test_pipeline_plan_is_one_step_of_shared_bytes_that_fits_every_nic(
    n: int, per_worker: int
) -> None:
    (step,) = phase_plan("pipeline", n, per_worker)
    flows = brute_pipeline_flows(n)
    assert {(t.src, t.dst) for t in step.transfers} == flows
    for t in step.transfers:
        out_deg = sum(1 for a, _ in flows if a == t.src)
        in_deg = sum(1 for _, b in flows if b == t.dst)
        assert t.bytes == round(per_worker / max(out_deg, in_deg))
    for rank in range(n):
        # No worker sends or receives more than its NIC moves in the phase.
        assert sum(step.sends(rank).values()) <= per_worker + n
        assert sum(step.receives(rank).values()) <= per_worker + n
        shares = pacing_shares("pipeline", n, rank)
        assert sum(shares.values()) <= 1.0 + 1e-9
        sends_to, receives_from = neighbours("pipeline", n, rank)
        assert set(step.sends(rank)) == set(sends_to) == set(shares)
        assert set(step.receives(rank)) == set(receives_from)


@pytest.mark.parametrize("n", [2, 3, 4, 5])
@pytest.mark.parametrize("kind", ["data", "tensor", "hybrid"])
def test_ring_patterns_are_the_ring_allreduce_step_by_step(kind: str, n: int) -> None:
    per_worker = 375_000
    plan = phase_plan(kind, n, per_worker)
    total = gradient_bytes(per_worker, n)
    rings = [ring_allreduce_plan(total, n, r) for r in range(n)]
    assert len(plan) == 2 * (n - 1)
    for i, step in enumerate(plan):
        for rank in range(n):
            assert step.sends(rank) == {(rank + 1) % n: rings[rank][i].send_bytes}
            # What arrives is what the left neighbour's plan sends in that step.
            assert step.receives(rank) == {(rank - 1) % n: rings[rank][i].recv_bytes}
    for rank in range(n):
        assert bytes_sent(plan, rank) == pytest.approx(per_worker, abs=n)
        assert pacing_shares(kind, n, rank) == {(rank + 1) % n: 1.0}


def test_every_transfer_is_received_by_its_destination_in_the_same_step() -> None:
    for kind, n in itertools.product(["data", "pipeline"], [2, 3, 7]):
        for step in phase_plan(kind, n, 10_000):
            sent = {(t.src, t.dst): t.bytes for t in step.transfers}
            got = {(src, r): b for r in range(n) for src, b in step.receives(r).items()}
            assert sent == got


def test_bad_patterns_are_refused_by_name() -> None:
    with pytest.raises(UserInputError, match="pipelin"):
        phase_plan("pipelin", 4, 100)
    assert phase_plan("data", 1, 100) == ()
