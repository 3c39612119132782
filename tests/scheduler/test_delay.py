"""Delay scheduling with network-sensitive preemption: the timer, preemption, the auto-tuner.

Shares used below (the earlier sequential profiles at 4 workers,
`tests/helpers/legacy_models.py`): gpt3 0.93, vgg19 0.545, bert 0.54 (sensitive,
>= 0.5); resnet50 0.25, gpt2 0.21 (insensitive).
"""

from __future__ import annotations

import pytest

from scheduler.baselines import make_scheduler, parse_scheduler_names
from scheduler.baselines.augmented import CassiniAugmented
from scheduler.baselines.base import ClusterInfo, JobStatus, ProfileBook, racks_spanned
from scheduler.baselines.delay import DelayScheduler
from scheduler.baselines.delay_tuner import DelayTuner, sensitivity_class, tune_timer
from scheduler.simulator import SimSettings, simulate
from scheduler.workloads.traces import TraceJob, poisson_trace
from scheduler.workloads.types import Phase, Profile
from tests.helpers.legacy_models import legacy_book
from tests.helpers.schedulers import INFO, TOPO, cluster_view
from tests.scheduler.simulator.test_simulator import HALF, FixedBook
from topologies.generators import leaf_spine

BOOK = legacy_book()  # the profiles these cases were computed on
TIMERS = {"sensitive": 60.0, "insensitive": 15.0}


def _delay(**kw: object) -> DelayScheduler:
    return DelayScheduler(INFO, BOOK, timers_s=dict(TIMERS), autotune=False, **kw)  # type: ignore[arg-type]


def _rack(name: str) -> tuple[str, ...]:
    return tuple(sorted(INFO.racks[name]))


def _job(name: str, model: str, servers: tuple[str, ...] = (), arrival: float = 0.0,
         since: float = 0.0, workers: int | None = None) -> JobStatus:  # fmt: skip
    n = workers if workers is not None else len(servers) or 4
    return JobStatus(
        name, model, n, 1000, arrival, 0.0, servers, since,
        BOOK.get(model, n).iteration_ms,
    )  # fmt: skip


def _fragmented_cluster() -> list[JobStatus]:
    """Racks tor1-tor4 hold one free GPU each, tor5 and tor6 none: 4 free, no rack of 4."""
    busy = []
    for i, rack in enumerate(sorted(INFO.racks)):
        servers = _rack(rack)
        busy.append(_job(f"bg{i}", "gpt3", servers[:3] if i < 4 else servers, since=-100.0))
    return busy


def test_sensitivity_classes_by_communication_share() -> None:
    sched = _delay()
    assert sched.share(_job("v", "vgg19")) == pytest.approx(BOOK.get("vgg19", 4).up_fraction())
    assert sensitivity_class(sched.share(_job("v", "vgg19"))) == "sensitive"
    assert sensitivity_class(sched.share(_job("r", "resnet50"))) == "insensitive"
    assert sched.preferred_racks(4) == 1 and sched.preferred_racks(5) == 2
    assert sched.preferred_racks(12) == 3


def test_job_waits_while_its_timer_runs_and_fragments_at_expiry() -> None:
    sched = _delay()
    busy = _fragmented_cluster()
    w = _job("w", "vgg19", arrival=100.0)  # sensitive: 60 s timer
    for now in (100.0, 130.0, 159.0):
        alloc = sched.decide(cluster_view([*busy, w], now))
        assert "w" not in alloc.placement  # a fragmented placement is free, but it waits
    assert sched.next_tick(100.0, cluster_view([*busy, w], 100.0)) == pytest.approx(160.0)
    alloc = sched.decide(cluster_view([*busy, w], 160.0, "tick"))
    # expired; every running job is more sensitive (gpt3), so no preemption: fragmented
    assert racks_spanned(alloc.placement["w"], INFO.rack_of) == 4
    assert all(alloc.placement[j.name] == j.servers for j in busy)


def test_consolidated_placement_is_taken_at_once() -> None:
    sched = _delay()
    busy = _fragmented_cluster()[:-1]  # tor6 empty
    alloc = sched.decide(cluster_view([*busy, _job("w", "vgg19", arrival=10.0)], 10.0))
    assert alloc.placement["w"] == _rack("tor6")


def test_later_jobs_take_the_gpus_a_waiting_job_passes_up() -> None:
    sched = _delay()
    busy = _fragmented_cluster()
    w = _job("w", "vgg19", arrival=100.0)
    small = _job("small", "gpt2", arrival=101.0, workers=1)
    alloc = sched.decide(cluster_view([*busy, w, small], 101.0))
    assert "w" not in alloc.placement and len(alloc.placement["small"]) == 1


def test_timer_restarts_at_preemption() -> None:
    sched = _delay()
    busy = _fragmented_cluster()
    w = _job("w", "vgg19", arrival=0.0, since=500.0)  # preempted at 500 s
    assert "w" not in sched.decide(cluster_view([*busy, w], 530.0)).placement
    assert "w" in sched.decide(cluster_view([*busy, w], 560.0, "tick")).placement


def _full_cluster(tor1_model: str, since: float = 0.0) -> list[JobStatus]:
    """Every rack full with one 4-GPU job; tor1's job is `tor1_model`, the others gpt3."""
    jobs = [_job("low", tor1_model, _rack("tor1"), since=since)]
    for i, rack in enumerate(sorted(INFO.racks)[1:]):
        jobs.append(_job(f"hi{i}", "gpt3", _rack(rack), since=since))
    return jobs


def test_sensitive_job_preempts_a_less_sensitive_one_at_expiry() -> None:
    sched = _delay()
    running = _full_cluster("resnet50")
    w = _job("w", "vgg19", arrival=100.0)
    assert "low" in sched.decide(cluster_view([*running, w], 120.0)).placement  # timer runs
    alloc = sched.decide(cluster_view([*running, w], 160.0, "tick"))
    assert alloc.placement["w"] == _rack("tor1")
    assert "low" not in alloc.placement
    assert all(alloc.placement[f"hi{i}"] == running[i + 1].servers for i in range(5))
    assert "w preempts low" in alloc.note


@pytest.mark.parametrize(
    "model",
    [
        "gpt3",  # more sensitive (0.93)
        "vgg19",  # equally sensitive (0.545)
        "bert",  # less (0.54) but sensitive itself: our class rule protects it
    ],
)
def test_never_preempts_a_job_as_sensitive_or_more(model: str) -> None:
    sched = _delay()
    running = _full_cluster(model)
    w = _job("w", "vgg19", arrival=100.0)
    alloc = sched.decide(cluster_view([*running, w], 160.0, "tick"))
    assert "w" not in alloc.placement
    assert {j.name: j.servers for j in running} == dict(alloc.placement)


def test_insensitive_jobs_never_preempt() -> None:
    sched = _delay()
    running = _full_cluster("gpt2")  # 0.21
    w = _job("w", "resnet50", arrival=100.0)  # 0.25: larger share, but insensitive
    alloc = sched.decide(cluster_view([*running, w], 200.0, "tick"))
    assert "w" not in alloc.placement and "low" in alloc.placement


def test_a_job_just_restarted_is_not_preempted() -> None:
    sched = _delay()
    running = _full_cluster("resnet50", since=130.0)  # restarted 30 s ago (protect_s 60)
    w = _job("w", "vgg19", arrival=100.0)
    assert "w" not in sched.decide(cluster_view([*running, w], 160.0, "tick")).placement
    assert "w" in sched.decide(cluster_view([*running, w], 190.0, "tick")).placement


def test_fewest_gpus_preempted() -> None:
    sched = _delay()
    # tor1: one insensitive 4-GPU job; tor2: an insensitive 1-GPU job and three free GPUs
    t2 = _rack("tor2")
    running = [
        _job("four", "resnet50", _rack("tor1")),
        _job("one", "resnet50", t2[:1]),
        *(_job(f"hi{i}", "gpt3", _rack(r)) for i, r in enumerate(sorted(INFO.racks)[2:])),
    ]
    w = _job("w", "vgg19", arrival=0.0)
    alloc = sched.decide(cluster_view([*running, w], 60.0, "tick"))
    assert alloc.placement["w"] == t2 and "one" not in alloc.placement
    assert alloc.placement["four"] == _rack("tor1")


def test_tune_timer_direction_and_bounds() -> None:
    assert tune_timer(60.0, 90.0, 30.0) == pytest.approx(90.0)  # consolidation pays off: up
    assert tune_timer(60.0, 10.0, 30.0) == pytest.approx(40.0)  # waiting dominates: down
    assert tune_timer(60.0, 30.0, 30.0) == 60.0
    assert tune_timer(500.0, 1e9, 0.0) == 600.0 and tune_timer(1.2, 0.0, 5.0) == 1.0


def _tuner_with(wait_s: float) -> DelayTuner:
    """Hand-fed evidence: consolidated slowdown 1.0, fragmented 1.5, 100 s alone, `wait_s` wait."""
    tuner = DelayTuner({"sensitive": 60.0, "insensitive": 15.0}, period_s=120.0)
    # consolidated: 100 iterations of a 200 ms profile in 20 s -> 200 ms each, slowdown 1.0
    tuner.sample("c", "sensitive", 10.0, 0.0, ("s1",), 0.0, 200.0, True, 0.0)
    tuner.sample("c", "sensitive", 30.0, 100.0, ("s1",), 0.0, 200.0, True, 0.0)
    # fragmented: 100 iterations in 30 s -> 300 ms each, slowdown 1.5
    tuner.sample("f", "sensitive", 10.0, 0.0, ("s2",), 0.0, 200.0, False, 0.0)
    tuner.sample("f", "sensitive", 40.0, 100.0, ("s2",), 0.0, 200.0, False, 0.0)
    tuner.pass_up("w", 50.0)
    tuner.started("w", "sensitive", 50.0 + wait_s, 100.0)
    return tuner


def test_auto_tuner_raises_the_timer_when_consolidation_pays_off() -> None:
    tuner = _tuner_with(wait_s=10.0)  # benefit (1.5 - 1.0) x 100 s = 50 s > 10 s of waiting
    tuner.maybe_tune(119.0)
    assert tuner.timers["sensitive"] == 60.0  # not yet an epoch
    tuner.maybe_tune(120.0)
    assert tuner.timers["sensitive"] == pytest.approx(90.0)
    assert tuner.timers["insensitive"] == 15.0  # no evidence: unchanged
    assert tuner.history == [(120.0, "sensitive", 60.0, 90.0, pytest.approx(50.0), 10.0)]


def test_auto_tuner_lowers_the_timer_when_waiting_dominates() -> None:
    tuner = _tuner_with(wait_s=80.0)  # 50 s benefit < 80 s of waiting
    tuner.maybe_tune(120.0)
    assert tuner.timers["sensitive"] == pytest.approx(40.0)


def test_restart_penalty_is_not_charged_as_slowdown() -> None:
    tuner = DelayTuner({"sensitive": 60.0})
    # restarted at 0 with a 15 s penalty: the sample from 0 to 20 s is dropped
    tuner.sample("j", "sensitive", 0.0, 0.0, ("s1",), 0.0, 200.0, True, 15.0)
    tuner.sample("j", "sensitive", 20.0, 25.0, ("s1",), 0.0, 200.0, True, 15.0)
    assert "sensitive" not in tuner.evidence
    tuner.sample("j", "sensitive", 40.0, 125.0, ("s1",), 0.0, 200.0, True, 15.0)
    assert tuner.evidence["sensitive"].slowdown(True) == pytest.approx(1.0)


def test_auto_tuner_moves_the_timers_on_a_trace() -> None:
    trace = poisson_trace(60, TOPO.total_gpus(), 0.9, seed=1)
    sched = make_scheduler("delay", TOPO, seed=1)
    assert isinstance(sched, DelayScheduler)
    simulate(trace, TOPO, sched)
    moved = {cls for _, cls, old, new, _, _ in sched.tuner.history if new != old}
    assert moved == {"sensitive", "insensitive"}
    assert sched.tuner.timers != {"sensitive": 60.0, "insensitive": 15.0}
    for _, _, old, new, benefit, cost in sched.tuner.history:
        assert (new > old) == (benefit > cost)  # every move in the rule's direction


# ------------------------------------------------------------------ in the simulator, by hand


def _tiny(timer_s: float):  # type: ignore[no-untyped-def]
    """2 racks x 3 servers; HALF profile (200 ms alone, share 0.5: sensitive).

    t=0: a (2 GPUs, 50 its) -> leaf1 s01,s02; c (2 GPUs, 10 its) -> leaf2 s04,s05.
    t=0.1: b (2 GPUs, 10 its): only s03 and s06 free, on two racks: b waits.
    c ends at 2.0 s and frees leaf2.
    """
    topo = leaf_spine(2, 1, 3)
    trace = [
        TraceJob("a", "m", 2, 50, 0.0),
        TraceJob("c", "m", 2, 10, 0.0),
        TraceJob("b", "m", 2, 10, 0.1),
    ]
    book = FixedBook(HALF)
    sched = DelayScheduler(
        ClusterInfo.of(topo), book, timers_s={"sensitive": timer_s, "insensitive": 0.0},
        autotune=False,
    )  # fmt: skip
    res = simulate(trace, topo, sched, SimSettings(), book=book)
    return {j.name: j for j in res.jobs}, res


def test_in_the_simulator_a_long_timer_waits_for_the_consolidated_rack() -> None:
    jobs, res = _tiny(5.0)
    # b starts when c ends (2.0 s) on leaf2 and runs 10 x 200 ms: ends at 4.0 s
    assert jobs["b"].iteration_start_ms[0] == pytest.approx(2000.0)
    assert jobs["b"].finish_s == pytest.approx(4.0)
    assert jobs["a"].finish_s == pytest.approx(10.0) and jobs["c"].finish_s == pytest.approx(2.0)
    assert res.makespan_s == pytest.approx(10.0)
    # JCTs 10, 2 and 3.9 s
    assert res.mean_jct_s == pytest.approx((10.0 + 2.0 + 3.9) / 3)
    assert res.comm_overhead == pytest.approx(0.0)


def test_in_the_simulator_a_short_timer_expires_and_fragments() -> None:
    jobs, res = _tiny(1.0)
    # the timer expires at 0.1 + 1.0 s: b takes s03 + s06 (alone on the spine: no slowdown)
    assert jobs["b"].iteration_start_ms[0] == pytest.approx(1100.0)
    assert jobs["b"].finish_s == pytest.approx(3.1)
    assert res.mean_jct_s == pytest.approx((10.0 + 2.0 + 3.0) / 3)
    assert res.makespan_s == pytest.approx(10.0)


def test_makespan_jct_and_overhead_under_contention_by_hand() -> None:
    # both rings cross leaf1 <-> spine: Up phases overlap at 25 Gbps each, 300 ms iterations
    from tests.helpers.schedulers import FixedScheduler

    topo = leaf_spine(2, 1, 2)
    trace = [TraceJob("a", "m", 2, 10, 0.0), TraceJob("b", "m", 2, 10, 1.0)]
    sched = FixedScheduler({"a": ("s01", "s03"), "b": ("s02", "s04")})
    res = simulate(trace, topo, sched, SimSettings(), book=FixedBook(HALF))
    by = {j.name: j for j in res.jobs}
    # a: 5 iterations alone (0-1 s), 5 overlapped with b (1-2.5 s); b: 5 overlapped, 5 alone
    assert by["a"].iteration_ms == pytest.approx([200.0] * 5 + [300.0] * 5)
    assert by["b"].iteration_ms == pytest.approx([300.0] * 5 + [200.0] * 5)
    assert by["a"].finish_s == pytest.approx(2.5) and by["b"].finish_s == pytest.approx(3.5)
    assert res.makespan_s == pytest.approx(3.5)
    assert res.mean_jct_s == pytest.approx(2.5)  # 2.5 s each
    # 10 iterations 100 ms above the 200 ms profile, out of 5000 ms of iterations
    assert res.comm_overhead == pytest.approx(1000.0 / 5000.0)


def test_registry_names_and_delay_cassini_composition() -> None:
    assert parse_scheduler_names("delay, Delay+Cassini") == ["delay", "delay+cassini"]
    aug = make_scheduler("delay+cassini", TOPO, seed=1)
    assert isinstance(aug, CassiniAugmented) and isinstance(aug.base, DelayScheduler)
    assert aug.name == "delay+cassini" and aug.migration_s == 15.0
    # Cassini ranks the delay scheduler's own candidates: same jobs, same rack counts
    busy = _fragmented_cluster()[:-2]  # tor5, tor6 empty
    view = cluster_view([*busy, _job("w", "vgg19", arrival=0.0)], 0.0)
    alloc = aug.decide(view)
    assert len(alloc.candidates) == 2  # tor5 or tor6
    assert racks_spanned(alloc.placement["w"], INFO.rack_of) == 1
    assert alloc.new_schedule and "w" in alloc.shifts_ms


def test_expired_job_without_room_reserves_and_only_short_jobs_back_fill() -> None:
    sched = _delay()
    racks = sorted(INFO.racks)

    def status(name: str, n: int, alone_s: float, servers: tuple[str, ...] = (),
               arrival: float = 1000.0) -> JobStatus:  # fmt: skip
        # 1000 iterations of alone_s ms each: alone_s seconds left
        return JobStatus(name, "gpt3", n, 1000, arrival, 0.0, servers, 0.0, alone_s)

    a = status("a", 12, 100.0, sum((_rack(r) for r in racks[:3]), ()), arrival=0.0)
    b = status("b", 8, 1000.0, sum((_rack(r) for r in racks[3:5]), ()), arrival=0.0)
    w = status("w", 16, 10.0, arrival=0.0)  # expired long ago; 4 GPUs free (tor6)
    long_job = status("long", 4, 500.0)
    short = status("short", 4, 50.0)
    # w starts when a ends, at 1000 + 100 s, needing all 16 GPUs then free: no spare
    alloc = sched.decide(cluster_view([a, b, w, long_job, short], 1000.0))
    assert "w" not in alloc.placement and "long" not in alloc.placement
    assert alloc.placement["short"] == _rack("tor6")  # ends at 1050 s, before w's start
    # without the blocked job, the long one starts
    alloc = sched.decide(cluster_view([a, b, long_job], 1000.0))
    assert alloc.placement["long"] == _rack("tor6")


class _TwoProfiles(ProfileBook):
    """Model "hi" runs HALF (share 0.5, sensitive); "lo" sends 50 of its 200 ms (0.25)."""

    LO = Profile("lo", "lo", "data", 2, 200.0, (Phase(150.0, 0.0), Phase(50.0, 50.0)))

    def __init__(self) -> None:
        self.models = {}
        self._cache = {}

    def get(self, model: str, workers: int, batch_size: int | None = None) -> Profile:
        return self.LO if model == "lo" else HALF


def test_in_the_simulator_preemption_charges_the_restart_to_the_victim() -> None:
    """2 racks x 2 servers, both full at t=0 (lo on one, hi on the other); w (hi) arrives at 1 s.

    w's 2 s timer expires at 3 s: it preempts lo (share 0.25 < 0.5), runs 10 x 200 ms
    and ends at 5 s; lo resumes then on its rack and waits 15 s (restart) before iterating.
    """
    topo = leaf_spine(2, 1, 2)
    book = _TwoProfiles()
    trace = [
        TraceJob("lo", "lo", 2, 100, 0.0),
        TraceJob("hi", "hi", 2, 200, 0.0),
        TraceJob("w", "hi", 2, 10, 1.0),
    ]
    sched = DelayScheduler(
        ClusterInfo.of(topo), book, timers_s={"sensitive": 2.0, "insensitive": 0.0},
        autotune=False, protect_s=1.0,
    )  # fmt: skip
    seen: list[tuple[float, dict[str, tuple[str, ...]], str]] = []
    res = simulate(
        trace, topo, sched, SimSettings(), book=book,
        on_decision=lambda now, view, alloc: seen.append((now, dict(alloc.placement), alloc.note)),
    )  # fmt: skip
    by = {j.name: j for j in res.jobs}
    first = seen[0][1]
    at3 = next(p for t, p, _ in seen if t == pytest.approx(3.0))
    assert "lo" not in at3 and at3["w"] == first["lo"]
    assert any(note == "w preempts lo" for _, _, note in seen)
    assert by["w"].iteration_start_ms[0] == pytest.approx(3000.0)
    assert by["w"].finish_s == pytest.approx(5.0)
    # lo: 15 iterations by 3 s, the in-flight one lost, then nothing until 5 + 15 s
    starts = by["lo"].iteration_start_ms
    assert (starts < 3000.0).sum() == 15
    assert starts[15] == pytest.approx(20000.0)
    assert by["lo"].migrations == 2  # preempted, then resumed
    assert "hi" in at3 and by["hi"].migrations == 0  # never the equally sensitive one


def test_emulate_plans_the_delay_schedulers() -> None:
    from emulation.emulate.plan import plan_trace
    from scheduler.workloads.traces import four_jobs_trace

    plan = plan_trace(four_jobs_trace(50), TOPO, ["delay", "delay+cassini"], 50, 1)
    assert [p.scheduler for p in plan.plans] == ["delay", "delay+cassini"]
    assert all(p.decisions for p in plan.plans)
