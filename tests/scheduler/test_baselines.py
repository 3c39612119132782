"""Baselines: Themis fairness order and leases, Pollux goodput, Cassini keeps worker counts."""

from __future__ import annotations

import pytest

from scheduler.baselines import make_scheduler, parse_scheduler_names
from scheduler.baselines.base import (
    JobStatus,
    ProfileBook,
    joint_candidates,
)
from scheduler.baselines.pollux import PolluxScheduler, statistical_efficiency
from scheduler.baselines.themis import ThemisScheduler, finish_time_fairness
from tests.helpers.schedulers import GPUS, INFO, TOPO, cluster_view, dynamic_arrival_view
from topologies.errors import UserInputError


def test_finish_time_fairness_values() -> None:
    j = JobStatus("a", "vgg16", 4, 100, 0.0, 50.0, ideal_iteration_ms=1000.0)
    assert finish_time_fairness(j, 100.0) == pytest.approx(1.5)
    assert finish_time_fairness(j, 100.0, slowdown=2.0) == pytest.approx(2.0)


def test_themis_farthest_from_fairness_bids_first() -> None:
    # 24 GPUs, 20 busy; two waiting jobs want 4 each: only one fits.
    busy = JobStatus(
        "busy",
        "bert",
        20,
        1000,
        0.0,
        10.0,
        servers=tuple(sorted(GPUS))[:20],
        ideal_iteration_ms=200.0,
    )
    old = JobStatus(
        "old", "vgg16", 4, 100, 0.0, 0.0, ideal_iteration_ms=200.0
    )  # waited 100 s for a 20 s job
    new = JobStatus("new", "vgg16", 4, 100, 99.0, 0.0, ideal_iteration_ms=200.0)
    sched = ThemisScheduler(INFO)
    order = sched.bid_order([new, old], 100.0)
    assert [j.name for j in order] == ["old", "new"]
    alloc = sched.decide(cluster_view([busy, new, old], 100.0))
    assert "old" in alloc.placement and "new" not in alloc.placement
    assert alloc.placement["busy"] == busy.servers  # no preemption on an arrival


def test_themis_lease_expiry_preempts_the_fairer_job() -> None:
    servers = tuple(sorted(GPUS))
    # "runner" is ahead of fairness, its lease expires now; "starved" waited long.
    runner = JobStatus(
        "runner",
        "vgg16",
        24,
        10000,
        0.0,
        9000.0,
        servers=servers,
        since_s=0.0,
        ideal_iteration_ms=100.0,
    )
    starved = JobStatus("starved", "vgg16", 24, 100, 0.0, 0.0, ideal_iteration_ms=100.0)
    sched = ThemisScheduler(INFO, lease_s=600.0)
    alloc = sched.decide(cluster_view([runner, starved], 600.0, "tick"))
    assert "starved" in alloc.placement and "runner" not in alloc.placement
    # between leases nothing moves
    alloc = sched.decide(cluster_view([runner, starved], 300.0, "arrival"))
    assert alloc.placement == {"runner": servers}
    assert sched.next_tick(300.0, cluster_view([runner, starved], 300.0)) == pytest.approx(600.0)


def test_candidates_same_counts_and_rack_spans_and_feasible() -> None:
    free = dict(GPUS)
    cands = joint_candidates({}, [("a", 6), ("b", 3)], free, INFO, 10, seed=1)
    assert len(cands) > 1
    for c in cands:
        assert len(c["a"]) == 6 and len(c["b"]) == 3
        used = [s for v in c.values() for s in v]
        assert len(used) == len(set(used))  # 1 GPU per server: never twice
        assert len({INFO.rack_of[s] for s in c["b"]}) == 1  # fits one rack, so all options do


@pytest.mark.parametrize("variant,base", [("th+cassini", "themis"), ("po+cassini", "pollux")])
def test_cassini_keeps_base_worker_counts(variant: str, base: str) -> None:
    running = JobStatus(
        "r",
        "vgg19",
        6,
        500,
        0.0,
        10.0,
        servers=tuple(sorted(GPUS))[:6],
        ideal_iteration_ms=280.0,
    )
    jobs = [running] + [
        JobStatus(f"n{i}", m, w, 300, 5.0, 0.0, ideal_iteration_ms=200.0)
        for i, (m, w) in enumerate([("resnet50", 5), ("vgg16", 6), ("bert", 3)])
    ]
    view = cluster_view(jobs, 5.0)
    b = make_scheduler(base, TOPO, seed=3).decide(view)
    v = make_scheduler(variant, TOPO, seed=3).decide(view)
    assert {k: len(s) for k, s in v.placement.items()} == {
        k: len(s) for k, s in b.placement.items()
    }
    assert any(dict(v.placement) == dict(c) for c in b.candidates)  # picked one of the base's own
    assert v.score is not None and set(v.shifts_ms) <= set(v.placement)
    assert v.new_schedule and set(v.periods_ms) <= set(v.placement)
    for name, period in v.periods_ms.items():  # agents pace at or above the job's own time
        job = next(j for j in jobs if j.name == name)
        own = ProfileBook(nic_gbps=TOPO.nic_gbps()).get(job.model, len(v.placement[name]))
        assert own.iteration_ms <= period < own.iteration_ms * 1.1


def test_pollux_efficiency_and_greedy_counts() -> None:
    assert statistical_efficiency(1, 64, 1024.0) == pytest.approx(1.0)
    assert statistical_efficiency(8, 64, 1024.0) < statistical_efficiency(2, 64, 1024.0)
    sched = PolluxScheduler(INFO, ProfileBook())
    jobs = [
        JobStatus(f"j{i}", "vgg16", 12, 100, float(i), 0.0, ideal_iteration_ms=250.0)
        for i in range(4)
    ]
    counts = sched.counts(jobs, 24, {})
    assert sum(counts.values()) <= 24 and all(1 <= c <= 12 for c in counts.values())
    alloc = sched.decide(cluster_view(jobs, 0.0, "tick"))
    assert sum(len(s) for s in alloc.placement.values()) <= 24
    for wpi in alloc.work_per_iteration.values():
        assert 0 < wpi <= 1.0 + 1e-9


def test_scheduler_names_did_you_mean() -> None:
    assert parse_scheduler_names("themis, Th+Cassini") == ["themis", "th+cassini"]
    with pytest.raises(UserInputError, match="Did you mean 'themis'"):
        parse_scheduler_names("themsi")


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_dynamic_case_newcomers_must_share_and_candidates_differ(seed: int) -> None:
    """The paper's hook: no free rack to hide in, and equal placements meet different jobs."""
    from scheduler.workloads.traffic import JobRouter as Router

    view, background = dynamic_arrival_view(seed)
    free_per_rack = {
        rack: sum(view.free[s] for s in servers) for rack, servers in INFO.racks.items()
    }
    assert sum(free_per_rack.values()) == 6
    assert max(free_per_rack.values()) < 3  # no rack holds a 3-GPU newcomer
    alloc = ThemisScheduler(INFO, seed=seed).decide(view)
    assert len(alloc.candidates) == 10
    router = Router(TOPO)
    book = ProfileBook()
    by = {j.name: j for j in view.jobs}
    meetings = set()
    for cand in alloc.candidates:
        links = {
            name: router.job_links(
                servers, book.get(by[name].model, len(servers)).parallelism, name
            )
            for name, servers in cand.items()
        }
        met = []
        for new in ("new-dlrm", "new-resnet50"):
            assert len({INFO.rack_of[s] for s in cand[new]}) == 2
            partners = frozenset(b for b in background if links[new] & links[b])
            assert partners, f"{new} shares no link with a running job in {cand}"
            met.append((new, partners))
        meetings.add(tuple(met))
    assert len(meetings) >= 2  # the candidates differ in who meets whom
