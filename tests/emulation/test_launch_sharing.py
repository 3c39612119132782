"""Replicas of a sharing group run the time-shared profile the simulator runs (`launch.time_shared`).

Hand case on leaf-spine:2:1:2 (one GPU per server, 50 Gbps NICs), on the earlier
sequential figures (`tests/helpers/legacy_models.py`): a = VGG16
(compute C = 100 ms, communication M = 88.576 ms at 2 workers), b = ResNet50
on the other two servers, c = VGG11 (C = 70, M = 85.056) arriving at 0.5 s.
NAGS puts c on a's servers in order (a, c): stage 0 = max(C_a, M_c) =
max(100, 85.056) = 100, stage 1 = max(C_c, M_a) = max(70, 88.576) = 88.576;
cycle 188.576 ms, a computes from 0, c from 100. c's compute is stretched
from 70 to 88.576 ms (it waits for a's transfers to leave the GPU's turn);
a's stays 100. (c with b would cost b 155.056 / 91.384 = 1.70 > 1.5: refused.)
"""

from __future__ import annotations

import pytest

from emulation.emulate.plan import plan_trace
from emulation.emulate.segments import segments
from emulation.jobs.launch import JobPlan, parse_schedule, plan_jobs, replica_specs
from scheduler.baselines.base import Allocation, ClusterView
from scheduler.cassini.timeshare import share
from scheduler.simulator.decisions import decision_of
from scheduler.workloads.profiles import build_profile
from scheduler.workloads.traces import TraceJob
from tests.helpers.legacy_models import legacy_models
from topologies.errors import UserInputError
from topologies.library import load_topology

TOPO = load_topology("leaf-spine:2:1:2")
MODELS = legacy_models()  # the figures of the hand case: compute, then one AllReduce
TRACE = [
    TraceJob("a", "vgg16", 2, 20, 0.0),
    TraceJob("b", "resnet50", 2, 20, 0.0),
    TraceJob("c", "vgg11", 2, 20, 0.5),
]
CYCLE = 100.0 + 88.576


def _shared_segment_plans() -> dict[str, JobPlan]:
    plan = plan_trace(TRACE, TOPO, ["nags"], 20, models=MODELS)
    parts = segments(plan.of("nags").decisions)
    shared = [p for p in parts if p.runs.sharing]
    assert len(shared) == 1, [p.runs for p in parts]
    schedule = shared[0].runs.as_schedule()
    assert schedule.sharing == (("a", "c"),)
    return {j.name: j for j in plan_jobs(schedule, TOPO, models=MODELS)}


def test_a_nags_decision_plans_its_group_on_the_time_shared_profiles() -> None:
    jobs = _shared_segment_plans()
    a, b, c = jobs["a"], jobs["b"], jobs["c"]
    # by hand (module docstring): compute stages, transfers unchanged, offsets, cycle
    assert [(p.duration_ms, p.gbps) for p in c.profile.phases] == [
        (pytest.approx(88.576), 0.0),
        (pytest.approx(85.056), 50.0),
    ]
    assert [(p.duration_ms, p.gbps) for p in a.profile.phases] == [
        (100.0, 0.0),
        (pytest.approx(88.576), 50.0),
    ]
    assert (a.shift_ms, c.shift_ms) == (0.0, 100.0)
    assert a.period_ms == pytest.approx(CYCLE) and c.period_ms == pytest.approx(CYCLE)
    assert a.sharing == c.sharing == ("a", "c") and b.sharing == ()
    # the very layout the simulator runs (`scheduler.simulator.playout` shares the same way)
    laid = share({n: build_profile(m, 2, nic_gbps=50.0, models=MODELS) for n, m in (("a", "vgg16"),
                                                                   ("c", "vgg11"))},
                 order=("a", "c"))  # fmt: skip
    assert (a.profile, c.profile) == (laid.profiles["a"], laid.profiles["c"])
    assert (a.shift_ms, c.shift_ms) == (laid.offsets_ms["a"], laid.offsets_ms["c"])
    # a job in no group keeps its own profile and runs free
    assert b.profile == build_profile("resnet50", 2, nic_gbps=50.0, models=MODELS) and b.period_ms is None


def test_two_replicas_on_one_host_compute_in_turns() -> None:
    jobs = _shared_segment_plans()
    placed = replica_specs(
        list(jobs.values()),
        {s.name: f"10.0.0.{i + 1}" for i, s in enumerate(TOPO.servers)},
        "run",
        20,
        0.001,
    )
    on_s01 = {p.spec.job: p.spec for p in placed if p.server == "s01"}
    assert set(on_s01) == {"a", "c"}
    a, c = on_s01["a"], on_s01["c"]
    assert a.peers[a.worker] != c.peers[c.worker]  # own ports on one host
    # a computes [0, 100) and sends from 100; c computes [100, 188.576) while a sends,
    # then sends from 188.576 (the next cycle's stage 0, while a computes)
    assert (a.shift_ms, a.shift_ms + a.comm_offset_ms) == (0.0, 100.0)
    assert c.shift_ms == 100.0 and c.shift_ms + c.comm_offset_ms == pytest.approx(CYCLE)
    assert a.period_ms is not None and c.period_ms is not None
    assert a.iteration_ms <= a.period_ms and c.iteration_ms <= c.period_ms


def test_a_decision_carries_the_allocations_groups() -> None:
    view = ClusterView(0.0, {"s01": 1, "s02": 1}, {"s01": 0, "s02": 1}, (), "arrival")
    alloc = Allocation({"x": ("s01",), "y": ("s01",), "z": ("s02",)},
                       sharing=(("y", "x"), ("z",)))  # fmt: skip
    decision = decision_of(0.0, view, alloc)
    assert decision.sharing == (("y", "x"),)
    assert decision.as_schedule().sharing == (("y", "x"),)
    # a member the decision no longer places leaves a group of one: no sharing
    gone = decision.__class__(1.0, "departure", {"x": ("s01",)}, {}, sharing=(("y", "x"),))
    assert gone.as_schedule().sharing == ()


def test_a_schedule_file_names_its_groups_and_may_leave_the_layout_to_them() -> None:
    doc = {"placement": {"a": ["s01", "s02"], "c": ["s01", "s02"]},
           "models": {"a": "vgg16", "c": "vgg11"}, "sharing": [["a", "c"]]}  # fmt: skip
    a, c = plan_jobs(parse_schedule(doc, "f.json"), TOPO, models=MODELS)
    # no periods or shifts given: the layout's (cycle, stage offsets)
    assert (a.shift_ms, c.shift_ms) == (0.0, 100.0)
    assert a.period_ms == pytest.approx(CYCLE) == c.period_ms
    assert c.profile.phases[0].duration_ms == pytest.approx(88.576)


@pytest.mark.parametrize(
    ("sharing", "message"),
    [
        ([["a", "x"]], "f.json: field 'sharing' names job 'x', which 'placement' does not"),
        ([["a"]], "is not a list of two or more jobs"),
        ({"a": "c"}, "field 'sharing' must be a list of groups"),
        ([["a", "c"], ["c", "a"]], "puts job 'c' in two groups"),
    ],
)
def test_a_bad_sharing_field_is_named(sharing: object, message: str) -> None:
    doc = {"placement": {"a": ["s01"], "c": ["s01"]}, "sharing": sharing}
    with pytest.raises(UserInputError, match=message):
        parse_schedule(doc, "f.json")


def test_a_member_left_alone_by_a_departure_keeps_its_shared_profile() -> None:
    """(our choice, `launch` docstring) a's simulated departure (3.98 s) only frees its share:
    no boundary, so a, behind the simulator in the fabric, runs on to its iterations."""
    plan = plan_trace(TRACE, TOPO, ["nags"], 20, models=MODELS)
    parts = segments(plan.of("nags").decisions)
    assert [p.start_s for p in parts] == [0.0, 0.5] and parts[-1].end_s is None
    jobs = {j.name: j for j in plan_jobs(parts[-1].runs.as_schedule(), TOPO, models=MODELS)}
    assert jobs["c"].profile.phases[0].duration_ms == pytest.approx(88.576)
