"""Strict priority in the fluid simulator: the classes a network policy gives flows."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from scheduler.policies import make_policy
from scheduler.policies.base import NetworkPlan, NetworkPolicy, PolicyInput, job_flows_of
from scheduler.simulator import SimSettings, simulate
from scheduler.simulator.results import SimResult
from scheduler.workloads.max_min import max_min_rates, priority_rates
from scheduler.workloads.traces import TraceJob
from tests.helpers.schedulers import FixedScheduler
from tests.scheduler.simulator.test_simulator import HALF, FixedBook
from topologies.generators import leaf_spine


def test_high_class_gets_its_demand_low_the_rest() -> None:
    one_link = np.array([[1], [1]], dtype=bool)
    cap = np.array([50.0])
    assert priority_rates(one_link, np.array([30.0, 40.0]), cap, np.array([1, 0])).tolist() == (
        pytest.approx([30.0, 20.0])
    )
    assert priority_rates(one_link, np.array([30.0, 40.0]), cap, np.array([0, 1])).tolist() == (
        pytest.approx([10.0, 40.0])
    )
    # one class is max-min exactly (the same code)
    same = priority_rates(one_link, np.array([30.0, 40.0]), cap, np.array([3, 3]))
    assert same.tolist() == max_min_rates(one_link, np.array([30.0, 40.0]), cap).tolist()


def test_max_min_within_a_class_after_the_class_above() -> None:
    # link 0 (60): H (class 2, wants 20) and L1, L2 (class 1); link 1 (100): L2 and M (class 0)
    inc = np.array([[1, 0], [1, 0], [1, 1], [0, 1]], dtype=bool)
    rates = priority_rates(
        inc, np.array([20.0, 100.0, 100.0, 100.0]), np.array([60.0, 100.0]), np.array([2, 1, 1, 0])
    )
    # H 20; L1, L2 share the 40 left: 20 each; M takes the 80 L2 leaves on link 1
    assert rates.tolist() == pytest.approx([20.0, 20.0, 20.0, 80.0])


@dataclass(frozen=True)
class FirstClass:
    """A test policy: one job's flows in class 1, every other flow in class 0."""

    job: str
    name: str = "first"

    def plan(self, inp: PolicyInput) -> NetworkPlan:
        flows = job_flows_of(inp, self.job) if self.job in inp.placement else ()
        return NetworkPlan(self.name, {f.key: 1 for f in flows})


def _two_jobs(policy: NetworkPolicy | None, fast: bool = True) -> SimResult:
    # both jobs' rings cross leaf1 <-> spine1 <-> leaf2 (50 Gbps); each job
    # computes 100 ms, then sends 100 ms at 50 Gbps
    topo = leaf_spine(2, 1, 2)
    trace = [TraceJob("a", "vgg16", 2, 50), TraceJob("b", "vgg16", 2, 50)]
    sched = FixedScheduler({"a": ("s01", "s03"), "b": ("s02", "s04")})
    return simulate(
        trace, topo, sched, SimSettings(fast_forward=fast), book=FixedBook(HALF), policy=policy
    )


@pytest.mark.parametrize("fast", [True, False])
def test_priority_makes_two_jobs_take_turns(fast: bool) -> None:
    # Both send at 100 ms. a's class first: it sends at 50 Gbps to 200 ms while b
    # waits, b sends 200-300. Then a computes 200-300 and sends 300-400 while b
    # computes: they take turns, a every 200 ms, b 300 ms once then 200 ms.
    # Crux: equal intensities, a first by name, so a is class 7 and b 6.
    cases: tuple[tuple[NetworkPolicy, str, str], ...] = (
        (make_policy("crux"), "a", "b"),
        (FirstClass("b"), "b", "a"),
    )
    for policy, first, second in cases:
        res = _two_jobs(policy, fast)
        by = {j.name: j for j in res.jobs}
        assert by[first].iteration_ms == pytest.approx(np.full(50, 200.0))
        assert by[second].iteration_ms == pytest.approx(np.r_[300.0, np.full(49, 200.0)])
    # without a policy they share max-min: 25 Gbps each, 300 ms every iteration
    plain = _two_jobs(None, fast)
    for job in plain.jobs:
        assert job.iteration_ms == pytest.approx(np.full(50, 300.0))


def test_a_rate_policy_is_refused_by_the_simulator() -> None:
    from topologies.errors import UserInputError

    with pytest.raises(UserInputError, match="honours classes only"):
        _two_jobs(make_policy("echelon-rate"))


@pytest.mark.parametrize("name", ["crux", "echelon"])
def test_incremental_solving_with_classes_equals_full_resolve(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Strict priority decomposes over the same groups of flows joined by tight
    # links as max-min does; the optimised path must agree with re-solving
    # every flow at every event, and the classes must change the run.
    import scheduler.simulator.component as sim
    from scheduler.baselines import make_scheduler
    from scheduler.workloads.traces import poisson_trace

    topo = leaf_spine(4, 2, 2)
    trace = poisson_trace(12, topo.total_gpus(), 0.9, 3)
    settings = SimSettings(fast_forward=False, seed=3)

    def run(policy: NetworkPolicy | None) -> SimResult:
        sched = make_scheduler("random", topo, seed=3)
        return simulate(trace, topo, sched, settings, policy=policy)

    fast = run(make_policy(name))
    plain = run(None)
    monkeypatch.setattr(sim.Component, "always_full", True)
    full = run(make_policy(name))
    assert fast.events > 100
    jobs = fast.jobs
    for f, p in zip(jobs, full.jobs, strict=True):
        assert len(f.iteration_ms) == len(p.iteration_ms)
        assert f.iteration_ms.mean() == pytest.approx(p.iteration_ms.mean(), rel=1e-6)
        assert f.finish_s == pytest.approx(p.finish_s, rel=1e-6)
    means = [j.iteration_ms.mean() for j in jobs]
    assert means != pytest.approx([j.iteration_ms.mean() for j in plain.jobs], rel=1e-6)
