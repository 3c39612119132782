"""GPU time-sharing (the model and the simulator), NAGS and Muri-style grouping, by hand.

Hand profiles: a = 60 ms compute + 40 ms at 50 Gbps, b = 30 + 50, c = 20 + 10.
Sharing a and b in order (a, b): stage 0 = max(C_a, M_b) = max(60, 50) = 60,
stage 1 = max(C_b, M_a) = max(30, 40) = 40, cycle 100 ms; a computes at 0
and sends at 60-100, b computes at 60-90 and sends at 100-150 (stage 0 of the
next cycle). Factors: a 100 / 100 = 1, b 100 / 80 = 1.25.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest

from scheduler.baselines import make_scheduler, parse_scheduler_names
from scheduler.baselines.base import Allocation, ClusterView, JobStatus, ProfileBook
from scheduler.baselines.nags import SharingScheduler
from scheduler.baselines.nags_groups import Member, evaluate
from scheduler.cassini.timeshare import (
    cycle_ms,
    share,
    sharing_factor,
    slots_in_use,
    stages,
    utilisation,
)
from scheduler.simulator import SimSettings, simulate
from scheduler.workloads.traces import TraceJob, poisson_trace
from scheduler.workloads.types import Phase, Profile
from tests.helpers.legacy_models import legacy_book
from tests.helpers.schedulers import INFO, TOPO, cluster_view
from topologies.generators import leaf_spine

A = Profile("a", "a", "data", 2, 100.0, (Phase(60.0, 0.0), Phase(40.0, 50.0)))
B = Profile("b", "b", "data", 2, 80.0, (Phase(30.0, 0.0), Phase(50.0, 50.0)))
C = Profile("c", "c", "data", 2, 30.0, (Phase(20.0, 0.0), Phase(10.0, 50.0)))
BOOK = legacy_book()  # the profiles these cases were computed on


class ModelBook(ProfileBook):
    """Each model name is one hand profile, whatever the worker count."""

    def __init__(self, profiles: Mapping[str, Profile]) -> None:
        self.profiles = dict(profiles)
        self.models = {}
        self._cache = {}
        self.nic_gbps = 50.0

    def get(self, model: str, workers: int, batch_size: int | None = None) -> Profile:
        return self.profiles[model]


# -- the model
def test_two_job_cycle_offsets_and_profiles_by_hand() -> None:
    g = share({"a": A, "b": B}, order=("a", "b"))
    assert g.cycle_ms == pytest.approx(100.0)
    assert dict(g.offsets_ms) == {"a": 0.0, "b": 60.0}
    # a: computes its stage (60) then sends 40; b: its stage lasts max(30, 40) = 40, then sends 50
    assert [(p.duration_ms, p.gbps) for p in g.profiles["a"].phases] == [(60.0, 0.0), (40.0, 50.0)]
    assert [(p.duration_ms, p.gbps) for p in g.profiles["b"].phases] == [(40.0, 0.0), (50.0, 50.0)]
    # a two-job cycle is the same in either order (a rotation)
    assert share({"a": A, "b": B}, order=("b", "a")).cycle_ms == pytest.approx(100.0)


def test_sharing_factor_and_utilisation_by_hand() -> None:
    g = share({"a": A, "b": B})
    assert sharing_factor(g, {"a": A, "b": B}) == pytest.approx(1.25)
    # both 2-GPU jobs on the same 2 slots: (60 x 2 + 30 x 2) / (100 x 2)
    assert utilisation(g, {"a": A, "b": B}, {"a": 2, "b": 2}, 2) == pytest.approx(0.9)
    # alone: a job's factor is 1 and its GPU use its compute share
    solo = share({"a": A})
    assert solo.cycle_ms == 100.0 and sharing_factor(solo, {"a": A}) == 1.0
    assert utilisation(solo, {"a": A}, {"a": 2}, 2) == pytest.approx(0.6)


def test_three_jobs_take_the_order_with_the_shortest_cycle() -> None:
    # (a, b, c): max(60, 10) + max(30, 40) + max(20, 50) = 150
    # (a, c, b): max(60, 50) + max(20, 40) + max(30, 10) = 130
    seq = [stages(A), stages(B), stages(C)]
    assert cycle_ms(seq) == pytest.approx(150.0)
    g = share({"a": A, "b": B, "c": C})
    assert g.order == ("a", "c", "b") and g.cycle_ms == pytest.approx(130.0)
    assert dict(g.offsets_ms) == {"a": 0.0, "c": 60.0, "b": 100.0}
    # worst member: c, 130 / 30; one GPU each: (60 + 20 + 30) / 130
    assert sharing_factor(g, {"a": A, "b": B, "c": C}) == pytest.approx(130.0 / 30.0)
    workers = {"a": 1, "b": 1, "c": 1}
    assert utilisation(g, {"a": A, "b": B, "c": C}, workers, 1) == pytest.approx(110.0 / 130.0)


def test_group_score_fixed_and_network_aware_communication() -> None:
    s = evaluate([Member("a", A, ("s01", "s02")), Member("b", B, ("s01", "s02"))])
    assert s.factor == pytest.approx(1.25) and s.utilisation == pytest.approx(0.9)
    # Muri's weight: both resources' busy time (100 + 80) x 2 slots over 2 x 100 x 2
    assert s.muri_weight == pytest.approx(0.9)
    assert s.factors == pytest.approx({"a": 1.0, "b": 1.25})


def test_slots_of_a_group_count_once() -> None:
    placement = {"a": ("s01", "s02"), "b": ("s01",), "c": ("s03",)}
    assert slots_in_use(placement, [("a", "b")]) == {"s01": 1, "s02": 1, "s03": 1}
    assert slots_in_use(placement, []) == {"s01": 2, "s02": 1, "s03": 1}


# -- the simulator runs it
class _Shared:
    """Places a and b on the same two GPUs as one group, paced as the model lays it out."""

    name = "shared"
    dedicated = False
    migration_s = 0.0

    def __init__(self, pace: bool = True) -> None:
        self.pace = pace

    def decide(self, view: ClusterView) -> Allocation:
        placed = {j.name: ("s01", "s02") for j in view.jobs}
        group = tuple(sorted(placed))
        if len(group) < 2:
            return Allocation(placement=placed)
        if not self.pace:
            return Allocation(placement=placed, sharing=(group,))
        return Allocation(
            placement=placed,
            periods_ms={"a": 100.0, "b": 100.0},
            shifts_ms={"a": 0.0, "b": 60.0},  # by hand: stage 0 lasts max(60, 50)
            new_schedule=True,
            groups=(group,),
            sharing=(group,),
        )

    def next_tick(self, now_s: float, view: ClusterView) -> float:
        return float("inf")


def _run_shared(pace: bool = True):  # type: ignore[no-untyped-def]
    topo = leaf_spine(2, 1, 2)  # s01, s02 on leaf1, one GPU each
    trace = [TraceJob("a", "a", 2, 20), TraceJob("b", "b", 2, 20)]
    book = ModelBook({"a": A, "b": B})
    res = simulate(trace, topo, _Shared(pace), SimSettings(fast_forward=False), book=book)
    return {j.name: j for j in res.jobs}, res


def test_simulator_interleaves_two_jobs_on_one_gpu_set_by_hand() -> None:
    jobs, res = _run_shared()
    a, b = jobs["a"], jobs["b"]
    # Both ready at 0; the group offset that waits least starts b at once and a
    # 40 ms later (a - b = -60 = 40 mod 100). b: 40 + 50 -> ends 90, then every
    # 100 ms; a: waits 40, 60 + 40 -> ends 140, then every 100 ms.
    assert b.iteration_end_ms[0] == pytest.approx(90.0)
    assert a.iteration_end_ms[0] == pytest.approx(140.0)
    assert np.allclose(b.iteration_ms[1:], 100.0) and np.allclose(a.iteration_ms[1:-1], 100.0)
    assert b.finish_s == pytest.approx(0.090 + 19 * 0.1)
    # b's end leaves a alone: its group changed, so its in-flight 20th iteration
    # (from 1.94 s) restarts at 1.99 s on its own profile and ends 100 ms later
    assert a.iteration_start_ms[-1] == pytest.approx(1990.0)
    assert a.finish_s == pytest.approx(1.99 + 0.1) and len(a.iteration_ms) == 20
    # the ideal is each job's time alone, so the slowdown is the sharing factor
    assert np.allclose(a.ideal_iteration_ms, 100.0) and np.allclose(b.ideal_iteration_ms, 80.0)
    assert np.allclose(b.slowdown[1:], 1.25) and np.allclose(a.slowdown[1:], 1.0)
    # a sends at 0-40, b at 40-90 of each cycle: the shared NICs never carry both
    assert float(res.links.excess_mbit.sum()) == pytest.approx(0.0)


def test_without_pacing_the_shared_jobs_collide_on_their_nics() -> None:
    _, res = _run_shared(pace=False)
    assert float(res.links.excess_mbit.sum()) > 0.0


# -- NAGS and Muri decisions
def _status(name: str, model: str, servers: tuple[str, ...] = (), workers: int = 4) -> JobStatus:
    n = len(servers) or workers
    return JobStatus(name, model, n, 1000, 0.0, 0.0, servers, 0.0, BOOK.get(model, n).iteration_ms)


def _rack(i: int) -> tuple[str, ...]:
    return tuple(sorted(INFO.racks[sorted(INFO.racks)[i]]))


def _nags() -> SharingScheduler:
    return make_scheduler("nags", TOPO, book=BOOK)  # type: ignore[return-value]


def _full_cluster(models: list[str]) -> list[JobStatus]:
    return [_status(f"r{i}", m, _rack(i)) for i, m in enumerate(models)]


def test_nags_joins_the_group_with_the_best_score_above_the_threshold() -> None:
    # every rack busy: r0 ResNet50 (75 + 24.6 ms), r1 VGG16 (100 + 132.9), r2-r5 GPT-3 (20 + 280)
    running = _full_cluster(["resnet50", "vgg16", "gpt3", "gpt3", "gpt3", "gpt3"])
    view = cluster_view([*running, _status("w", "vgg16")], 10.0)
    alloc = _nags().decide(view)
    v = stages(BOOK.get("vgg16", 4))
    # with VGG16: cycle 2 x max(100, 132.9), factor 265.8 / 232.9 = 1.14 (admitted);
    # with ResNet50: cycle 132.9 + 100, ResNet's factor 232.9 / 99.6 = 2.3 (> 1.5);
    # with GPT-3: cycle 132.9 + 280, VGG's factor 1.77 (> 1.5)
    assert alloc.sharing == (("r1", "w"),)
    assert alloc.placement["w"] == _rack(1)
    cyc = 2 * max(v.compute_ms, v.comm_ms)
    assert alloc.periods_ms == pytest.approx({"r1": cyc, "w": cyc})
    assert alloc.shifts_ms == pytest.approx({"r1": 0.0, "w": max(v.compute_ms, v.comm_ms)})
    assert alloc.new_schedule


def test_nags_waits_when_no_group_passes_the_threshold() -> None:
    running = _full_cluster(["resnet50", "gpt3", "gpt3", "gpt3", "gpt3", "gpt3"])
    alloc = _nags().decide(cluster_view([*running, _status("w", "vgg16")], 10.0))
    assert "w" not in alloc.placement and alloc.sharing == ()


def test_nags_takes_free_consolidated_gpus_alone_first() -> None:
    running = _full_cluster(["vgg16", "vgg16", "vgg16", "vgg16", "vgg16"])  # rack 6 free
    alloc = _nags().decide(cluster_view([*running, _status("w", "vgg16")], 10.0))
    assert alloc.placement["w"] == _rack(5) and alloc.sharing == ()


def test_nags_shares_across_gpu_counts() -> None:
    # a 2-GPU VGG16 may share half of a 4-GPU VGG16's slots (one rack)
    running = _full_cluster(["resnet50", "vgg16", "gpt3", "gpt3", "gpt3", "gpt3"])
    alloc = _nags().decide(cluster_view([*running, _status("w", "vgg16", workers=2)], 10.0))
    assert alloc.sharing and set(alloc.sharing[0]) == {"r1", "w"}
    assert set(alloc.placement["w"]) < set(_rack(1)) and len(alloc.placement["w"]) == 2


@pytest.mark.parametrize(("iterations", "moves"), [(1000, True), (100, False)])
def test_a_member_leaves_its_group_for_free_gpus_only_when_that_pays_back(
    iterations: int, moves: bool
) -> None:
    # r1 and w (VGG16, 4 GPUs) share rack 1, racks 2-5 busy, rack 6 free. Sharing
    # still costs each remaining iteration 265.8 - 232.9 = 32.9 ms: 32.9 s over
    # 1,000 iterations (> the 15 s migration: r1 moves), 3.3 s over 100 (stays).
    vgg = BOOK.get("vgg16", 4)
    r1 = JobStatus("r1", "vgg16", 4, iterations, 0.0, 0.0, _rack(0), 0.0, vgg.iteration_ms)
    w = JobStatus("w", "vgg16", 4, iterations, 0.0, 0.0, _rack(0), 0.0, vgg.iteration_ms)
    busy = [_status(f"b{i}", "gpt3", _rack(i)) for i in range(1, 5)]
    jobs = [r1, w, *busy]
    used = {s: 1 for j in (r1, *busy) for s in j.servers}
    free = {s: g - used.get(s, 0) for s, g in INFO.gpus.items()}
    view = ClusterView(10.0, INFO.gpus, free, tuple(jobs), "departure", (("r1", "w"),))
    alloc = _nags().decide(view)
    if moves:
        assert alloc.sharing == () and alloc.placement["r1"] == _rack(5)
        assert alloc.placement["w"] == _rack(0) and alloc.new_schedule
    else:
        assert alloc.sharing == (("r1", "w"),) and not alloc.new_schedule


def test_muri_groups_only_jobs_of_the_same_gpu_count() -> None:
    muri = make_scheduler("muri", TOPO, book=BOOK)
    running = _full_cluster(["resnet50", "vgg16", "gpt3", "gpt3", "gpt3", "gpt3"])
    # a 2-GPU job finds only 4-GPU jobs: Muri leaves it waiting
    alloc = muri.decide(cluster_view([*running, _status("w", "vgg16", workers=2)], 10.0))
    assert "w" not in alloc.placement and alloc.sharing == ()
    # a 4-GPU job joins the 4-GPU job of the best weight, on exactly its slots
    alloc = muri.decide(cluster_view([*running, _status("w", "vgg16")], 10.0))
    assert len(alloc.sharing) == 1 and "w" in alloc.sharing[0]
    (host,) = [n for n in alloc.sharing[0] if n != "w"]
    assert sorted(alloc.placement["w"]) == sorted(alloc.placement[host])


def test_muri_rejects_a_group_slower_than_running_its_jobs_one_after_another() -> None:
    # y = 5 ms compute + 5 ms sending (10 alone), x = 100 + 10 (110 alone).
    # x with y: cycle max(100, 5) + max(5, 10) = 110 > 2 x 10: Muri's weight 0, x waits;
    # y2 with y: cycle 5 + 5 = 10 <= 2 x 10: formed.
    x = Profile("x", "x", "data", 4, 110.0, (Phase(100.0, 0.0), Phase(10.0, 50.0)))
    y = Profile("y", "y", "data", 4, 10.0, (Phase(5.0, 0.0), Phase(5.0, 50.0)))
    book = ModelBook({"x": x, "y": y})
    muri = make_scheduler("muri", TOPO, book=book)

    def st(name: str, model: str, servers: tuple[str, ...] = ()) -> JobStatus:
        return JobStatus(
            name, model, 4, 1000, 0.0, 0.0, servers, 0.0, book.get(model, 4).iteration_ms
        )

    running = [st(f"r{i}", "y", _rack(i)) for i in range(6)]
    assert "x" not in muri.decide(cluster_view([*running, st("x", "x")], 1.0)).placement
    alloc = muri.decide(cluster_view([*running, st("y2", "y")], 1.0))
    assert len(alloc.sharing) == 1 and "y2" in alloc.sharing[0]
    assert alloc.periods_ms["y2"] == pytest.approx(10.0)


def test_names_in_the_registry() -> None:
    assert parse_scheduler_names("nags,muri,themis") == ["nags", "muri", "themis"]


@pytest.mark.parametrize("name", ["nags", "muri"])
def test_a_trace_runs_within_capacity_and_forms_groups(name: str) -> None:
    trace = poisson_trace(25, TOPO.total_gpus(), 1.2, seed=3)
    sched = make_scheduler(name, TOPO, book=BOOK)
    seen: list[Allocation] = []

    def check(now_s: float, used: Mapping[str, int], gpus: Mapping[str, int]) -> None:
        assert all(u <= gpus[s] for s, u in used.items())

    res = simulate(
        trace, TOPO, sched, book=BOOK, on_event=check,
        on_decision=lambda t, v, a: seen.append(a),
    )  # fmt: skip
    assert all(j.finish_s > j.arrival_s for j in res.jobs)
    groups = [g for a in seen for g in a.sharing]
    assert groups, "no sharing group formed at load 1.2"
    if name == "muri":
        for a in seen:
            for g in a.sharing:
                assert len(g) == 2
                assert len({tuple(sorted(a.placement[n])) for n in g}) == 1
