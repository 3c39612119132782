"""The fluid simulator: max-min sharing, contention vs interleaving, determinism, capacity."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest

from scheduler.baselines import make_scheduler
from scheduler.baselines.base import ProfileBook
from scheduler.simulator import SimResult, SimSettings, simulate
from scheduler.workloads.max_min import max_min_rates
from scheduler.workloads.traces import TraceJob, poisson_trace
from scheduler.workloads.types import Phase, Profile
from tests.helpers.schedulers import FixedScheduler
from topologies.generators import leaf_spine
from topologies.library import load_topology


def test_max_min_three_flows_two_links() -> None:
    # A crosses both links, B only link 0, C only link 1.
    inc = np.array([[1, 1], [1, 0], [0, 1]], dtype=bool)
    rates = max_min_rates(inc, np.array([100.0, 100.0, 100.0]), np.array([10.0, 30.0]))
    # link 0 (10) split A/B = 5/5; C takes what A leaves on link 1: 25
    assert rates.tolist() == pytest.approx([5.0, 5.0, 25.0])
    # demand caps bind first: B only wants 2, so A gets 8 on link 0
    rates = max_min_rates(inc, np.array([100.0, 2.0, 100.0]), np.array([10.0, 30.0]))
    assert rates.tolist() == pytest.approx([8.0, 2.0, 22.0])


def test_max_min_no_link_over_capacity_random() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        inc = rng.random((12, 6)) < 0.4
        demand = rng.uniform(1, 50, 12)
        cap = rng.uniform(10, 60, 6)
        r = max_min_rates(inc, demand, cap)
        assert np.all(r <= demand + 1e-9)
        assert np.all(r @ inc <= cap + 1e-6)
        # every flow is demand-capped or crosses a saturated link (max-min optimality)
        load = r @ inc
        for f in range(12):
            if r[f] < demand[f] - 1e-6 and inc[f].any():
                assert np.any(load[inc[f]] >= cap[inc[f]] - 1e-6)


HALF = Profile("half", "half", "data", 2, 200.0, (Phase(100.0, 0.0), Phase(100.0, 50.0)))


class FixedBook(ProfileBook):
    """Every job gets the 50%-duty profile (100 ms compute, 100 ms at 50 Gbps)."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.models = {}
        self._cache = {}

    def get(self, model: str, workers: int, batch_size: int | None = None) -> Profile:
        return self.profile


def _two_jobs(
    shift_b: float | None, fast: bool = True, iterations: int = 50, profile: Profile = HALF
) -> SimResult:
    """Two jobs of `profile`, free or on a 200 ms grid with b shifted by `shift_b`."""
    # 2 leaves x 2 servers, one spine: both jobs' rings cross leaf1 <-> spine1 <-> leaf2
    topo = leaf_spine(2, 1, 2)
    trace = [TraceJob("a", "vgg16", 2, iterations), TraceJob("b", "vgg16", 2, iterations)]
    sched = FixedScheduler(
        {"a": ("s01", "s03"), "b": ("s02", "s04")},
        {} if shift_b is None else {"a": 0.0, "b": shift_b},
        {} if shift_b is None else {"a": 200.0, "b": 200.0},
    )
    return simulate(trace, topo, sched, SimSettings(fast_forward=fast), book=FixedBook(profile))


def test_overlapped_jobs_stretch_by_hand_computed_amount() -> None:
    res = _two_jobs(None)
    # both Up phases overlap: 25 Gbps each, so 100 ms of sending takes 200 ms
    for job in res.jobs:
        assert job.iteration_ms == pytest.approx(np.full(50, 300.0))
        # both ring flows (one each way) crossed a link offered 100 of 50 Gbps
        # for their whole Up phase: every bit marked, 2 x 50 Gbps x 100 ms per iteration
        assert job.marked_mbit == pytest.approx(50 * 2 * 50.0 * 100.0)
    assert res.links.oversub_ms.sum() > 0
    exact = _two_jobs(None, fast=False)
    assert [j.marked_mbit for j in exact.jobs] == pytest.approx([j.marked_mbit for j in res.jobs])


def test_interleaved_jobs_do_not_stretch() -> None:
    res = _two_jobs(100.0)  # shift T/2: b sends while a computes
    a, b = res.jobs
    assert a.iteration_ms == pytest.approx(np.full(50, 200.0))
    # the agent delayed b's first iteration by its shift; that wait is b's cost
    assert b.iteration_ms == pytest.approx(np.r_[300.0, np.full(49, 200.0)])
    assert b.iteration_end_ms[0] == pytest.approx(300.0)
    assert res.links.oversub_ms.sum() == pytest.approx(0.0)
    assert a.marked_mbit == b.marked_mbit == 0.0


@pytest.mark.parametrize("fast", [True, False])
def test_link_series_by_hand(fast: bool) -> None:
    # Overlapped: the shared uplink is offered 2 x 50 Gbps for 200 ms of each
    # 300 ms iteration and carries 50; 50 iterations over three 5 s buckets.
    over = _two_jobs(None, fast=fast).links
    up = over.links.index(("leaf1", "spine1"))
    nic = over.links.index(("s01", "leaf1"))
    assert over.carried_mbit.shape == (3, len(over.links))
    assert over.carried_mbit[:, up].sum() == pytest.approx(50 * 50.0 * 200.0)
    assert over.oversub_ms[:, up].sum() == pytest.approx(50 * 200.0)
    assert over.excess_mbit[:, up].sum() == pytest.approx(50 * 50.0 * 200.0)
    assert over.carried_mbit[:, nic].sum() == pytest.approx(50 * 25.0 * 200.0)
    assert over.oversub_ms[:, nic].sum() == 0.0
    # Interleaved: the same bits cross the uplink, none while it is oversubscribed.
    apart = _two_jobs(100.0, fast=fast).links
    assert apart.carried_mbit[:, up].sum() == pytest.approx(2 * 50 * 50.0 * 100.0)
    assert apart.oversub_ms.sum() == apart.excess_mbit.sum() == 0.0
    if not fast:  # fast-forward spreads a skipped window's traffic evenly over it
        # Each bucket holds what was sent in it. An iteration is 100 ms of
        # compute, then 200 ms sending: the first 5 s hold 16 iterations and
        # 100 ms more sending.
        assert over.carried_mbit[:, up] == pytest.approx(
            [(16 * 200.0 + 100.0) * 50.0, (16 * 200.0 + 100.0) * 50.0, 17 * 200.0 * 50.0]
        )


def test_pipeline_job_alone_runs_at_its_profile_time() -> None:
    # Middle pipeline stages send to both neighbours; together they must not
    # offer more than one worker's NIC demand, or a job would slow itself.
    pipe = Profile("pipe", "pipe", "pipeline", 4, 200.0, (Phase(100.0, 0.0), Phase(100.0, 50.0)))
    topo = leaf_spine(2, 1, 2)
    trace = [TraceJob("p", "gpt2", 4, 20)]
    sched = FixedScheduler({"p": ("s01", "s02", "s03", "s04")})
    res = simulate(trace, topo, sched, SimSettings(fast_forward=False), book=FixedBook(pipe))
    (job,) = res.jobs
    assert job.iteration_ms == pytest.approx(np.full(20, 200.0))
    assert res.links.oversub_ms.sum() == pytest.approx(0.0)


def test_fast_forward_matches_exact() -> None:
    prof = Profile("mix", "mix", "data", 2, 230.0, (Phase(130.0, 0.0), Phase(100.0, 50.0)))
    topo = leaf_spine(2, 1, 2)
    trace = [TraceJob("a", "vgg16", 2, 400), TraceJob("b", "vgg16", 2, 300, 0.05)]
    sched = FixedScheduler({"a": ("s01", "s03"), "b": ("s02", "s04")})
    out = [
        simulate(trace, topo, sched, SimSettings(fast_forward=ff), book=FixedBook(prof))
        for ff in (True, False)
    ]
    fast, exact = out
    assert fast.fast_forwarded_ms > 0 and exact.fast_forwarded_ms == 0
    assert fast.events < exact.events / 3
    for f, e in zip(fast.jobs, exact.jobs, strict=True):
        assert len(f.iteration_ms) == len(e.iteration_ms)
        assert f.iteration_ms.mean() == pytest.approx(e.iteration_ms.mean(), rel=0.02)
        assert f.finish_s == pytest.approx(e.finish_s, rel=0.02)


def test_identical_seeds_identical_results() -> None:
    topo = load_topology("cassini-testbed")
    trace = poisson_trace(15, topo.total_gpus(), 0.9, seed=5)
    runs = [simulate(trace, topo, make_scheduler("random", topo, seed=7)) for _ in range(2)]
    for a, b in zip(runs[0].jobs, runs[1].jobs, strict=True):
        assert np.array_equal(a.iteration_end_ms, b.iteration_end_ms)
    other = simulate(trace, topo, make_scheduler("random", topo, seed=8))
    assert any(
        not np.array_equal(a.iteration_end_ms, b.iteration_end_ms)
        for a, b in zip(runs[0].jobs, other.jobs, strict=True)
    )


@pytest.mark.parametrize("name", ["themis", "th+cassini", "pollux", "po+cassini", "random"])
def test_no_server_over_allocated_at_any_event(name: str) -> None:
    topo = load_topology("cassini-testbed")
    trace = poisson_trace(25, topo.total_gpus(), 1.0, seed=11)
    checks: list[int] = []

    def on_event(now_s: float, used: Mapping[str, int], gpus: Mapping[str, int]) -> None:
        checks.append(1)
        for server, n in used.items():
            assert n <= gpus[server], f"{name} over-allocated {server} at {now_s}"

    res = simulate(trace, topo, make_scheduler(name, topo, seed=1), on_event=on_event)
    assert len(checks) >= len(trace)  # at least one decision per arrival
    assert all(len(j.iteration_ms) > 0 for j in res.jobs)
    # every job finished its work
    for j, t in zip(
        sorted(res.jobs, key=lambda j: j.name), sorted(trace, key=lambda t: t.name), strict=True
    ):
        assert j.finish_s >= t.arrival_s


def test_ideal_is_contention_free() -> None:
    topo = load_topology("cassini-testbed")
    trace = poisson_trace(15, topo.total_gpus(), 0.9, seed=2)
    res = simulate(trace, topo, make_scheduler("ideal", topo))
    for j in res.jobs:
        if j.model == "gpt2":  # pipeline: two of its own flows share each NIC, even alone
            continue
        assert j.slowdown == pytest.approx(np.ones_like(j.slowdown), rel=1e-6)
        assert j.iteration_start_ms[0] == pytest.approx(j.arrival_s * 1e3)


def _reference_max_min(inc: np.ndarray, demand: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Straightforward progressive filling over every flow and link (no pruning)."""
    rates = np.zeros(len(demand))
    active = demand > 1e-9
    remaining = capacity.astype(float).copy()
    incf = inc.astype(float)
    while active.any():
        counts = incf[active].sum(axis=0)
        used = counts > 0
        share = np.full(remaining.shape, np.inf)
        share[used] = remaining[used] / counts[used]
        step = max(0.0, min(float(share.min()), float((demand - rates)[active].min())))
        rates[active] += step
        remaining -= step * counts
        full = used & (remaining <= 1e-9 * np.maximum(capacity, 1.0))
        active &= ~((rates >= demand - 1e-9) | (incf[:, full].sum(axis=1) > 0))
    return rates


def test_pruned_max_min_equals_reference_filling() -> None:
    # Mixed cases: many links fit their demand (pruned), some are tight, some
    # flows are idle, and some tie exactly at capacity.
    rng = np.random.default_rng(7)
    for case in range(200):
        n_f, n_l = int(rng.integers(1, 30)), int(rng.integers(1, 12))
        inc = rng.random((n_f, n_l)) < 0.3
        demand = rng.choice([0.0, 12.5, 25.0, 50.0, 100.0], n_f) * rng.uniform(0.5, 1.0, n_f)
        cap = rng.choice([25.0, 100.0, 400.0], n_l)
        if case % 5 == 0:  # exact tie: a link offered exactly its capacity
            cap[0] = max(float(demand @ inc[:, 0]), 1.0)
        got = max_min_rates(inc, demand, cap)
        want = _reference_max_min(inc, demand, cap)
        assert got == pytest.approx(want, rel=1e-9, abs=1e-9), case


def test_incremental_simulation_equals_full_resolve(monkeypatch: pytest.MonkeyPatch) -> None:
    # The optimised path (an event re-solves only the flows joined to the ones
    # it changed through tight links) against re-solving every flow at every
    # event, on a seeded multi-job trace with contention.
    import scheduler.simulator.component as sim

    topo = leaf_spine(4, 2, 2)
    trace = poisson_trace(12, topo.total_gpus(), 0.9, 3)
    settings = SimSettings(fast_forward=False, seed=3)
    fast = simulate(trace, topo, make_scheduler("random", topo, seed=3), settings)
    monkeypatch.setattr(sim.Component, "always_full", True)
    plain = simulate(trace, topo, make_scheduler("random", topo, seed=3), settings)
    assert fast.events > 100
    assert fast.links.oversub_ms.sum() > 0  # jobs really contend, so max-min matters
    assert len(fast.jobs) == len(plain.jobs)
    for f, p in zip(fast.jobs, plain.jobs, strict=True):
        assert len(f.iteration_ms) == len(p.iteration_ms)
        assert f.iteration_ms.mean() == pytest.approx(p.iteration_ms.mean(), rel=1e-6)
        assert f.finish_s == pytest.approx(p.finish_s, rel=1e-6)
        assert f.marked_mbit == pytest.approx(p.marked_mbit, rel=1e-6, abs=1e-6)
    assert fast.links.carried_mbit.sum() == pytest.approx(plain.links.carried_mbit.sum(), rel=1e-6)


def test_profiles_follow_the_topologys_nic_rate() -> None:
    # One source of truth: a 100 Gbps cluster runs 100 Gbps profiles, so a job
    # alone takes its 100 Gbps iteration time, not the 50 Gbps default's.
    from scheduler.workloads.profiles import build_profile

    topo = leaf_spine(2, 1, 2, server_gbps=100, uplink_gbps=100)
    trace = [TraceJob("v", "vgg16", 2, 10)]
    res = simulate(trace, topo, FixedScheduler({"v": ("s01", "s03")}), SimSettings())
    (job,) = res.jobs
    fast = build_profile("vgg16", 2, nic_gbps=100.0).iteration_ms
    assert fast < build_profile("vgg16", 2, nic_gbps=50.0).iteration_ms
    assert job.iteration_ms == pytest.approx(np.full(10, fast))


def test_fast_forward_is_exact_without_contention() -> None:
    # Jobs alone repeat their iteration exactly, so skipping windows must
    # neither repeat an iteration (records overlapping, jobs ending early) nor
    # drop one: finish times match the exact mode.
    topo = load_topology("cassini-testbed")
    trace = poisson_trace(25, topo.total_gpus(), 0.9, seed=1)
    fast, exact = (
        simulate(trace, topo, make_scheduler("ideal", topo), SimSettings(fast_forward=ff, seed=1))
        for ff in (True, False)
    )
    assert fast.fast_forwarded_ms > 0
    for f, e in zip(fast.jobs, exact.jobs, strict=True):
        assert np.all(f.iteration_start_ms[1:] >= f.iteration_end_ms[:-1] - 1e-6), f.name
        assert len(f.iteration_ms) == len(e.iteration_ms)
        assert f.finish_s == pytest.approx(e.finish_s, rel=1e-9), f.name


# DDP's bursts (scheduler.workloads.buckets): 60 ms of forward pass and backprop, a 40 ms
# burst, a 20 ms gap (the next bucket not ready), a 20 ms burst.
BURSTS = Profile(
    "ddp", "ddp", "data", 2, 140.0,
    (Phase(60.0, 0.0), Phase(40.0, 50.0), Phase(20.0, 0.0), Phase(20.0, 50.0)),
)  # fmt: skip


def test_bucketed_profiles_share_burst_by_burst_and_take_turns_when_shifted() -> None:
    # Aligned, each burst meets the other job's: 25 Gbit/s each, 40 -> 80 ms and 20 -> 40
    # ms; the gap keeps its 20 ms (the profile's phases): 60 + 80 + 20 + 40 = 200 ms.
    aligned = _two_jobs(None, fast=False, iterations=20, profile=BURSTS)
    for job in aligned.jobs:
        assert job.iteration_ms == pytest.approx(np.full(20, 200.0))
    # On a 200 ms grid with b shifted 100 ms, b's bursts (160-200, 220-240 = 20-40) sit in
    # a's compute and idle: no link is ever asked for more than it carries.
    shifted = _two_jobs(100.0, fast=False, iterations=20, profile=BURSTS)
    a, b = shifted.jobs
    # a's first iteration starts on grid point 0 (140 ms); each after waits for its slot
    assert a.iteration_ms == pytest.approx(np.r_[140.0, np.full(19, 200.0)])
    assert b.iteration_ms[1:] == pytest.approx(np.full(19, 200.0))
    assert shifted.links.oversub_ms.sum() == pytest.approx(0.0)
    assert a.marked_mbit == b.marked_mbit == 0.0
