"""Network-side policies: Crux's intensities, ranks and compression; EchelonFlow's targets."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.policies import POLICIES, make_policy, parse_policy
from scheduler.policies.base import PolicyInput
from scheduler.policies.compression import compress, group_loss
from scheduler.policies.crux import intensity, ranked
from scheduler.policies.echelon import flow_targets
from scheduler.workloads.types import Phase, Profile
from topologies.errors import UserInputError
from topologies.library import load_topology


def _prof(name: str, compute_ms: float, up_ms: float, gbps: float, par: str = "data") -> Profile:
    phases = (Phase(compute_ms, 0.0), Phase(up_ms, gbps))
    return Profile(name, name, par, 2, compute_ms + up_ms, phases)


# Five 2-server data-parallel jobs; every job's forward flow x1 -> x2 crosses its
# NICs, and all but d also a 25 Gbps "core" link (hand-made paths).
JOBS = {  # compute ms, up ms at 50 Gbps
    "a": (300.0, 40.0),
    "b": (200.0, 20.0),
    "c": (100.0, 50.0),
    "d": (180.0, 30.0),
    "e": (50.0, 10.0),
}


def _five() -> PolicyInput:
    paths = {}
    caps = {}
    for j in JOBS:
        x1, x2 = f"{j}1", f"{j}2"
        fwd = [(x1, f"t{j}"), (f"t{j}", x2)]
        if j != "d":
            fwd.insert(1, ("core_in", "core_out"))
        paths[(x1, x2)] = tuple(fwd)
        paths[(x2, x1)] = ((x2, f"t{j}"), (f"t{j}", x1))
        for lk in (*fwd, *paths[(x2, x1)]):
            caps[lk] = 50.0
    caps[("core_in", "core_out")] = 25.0
    return PolicyInput(
        placement={j: (f"{j}1", f"{j}2") for j in JOBS},
        profiles={j: _prof(j, c, u, 50.0) for j, (c, u) in JOBS.items()},
        paths=paths,
        capacity_gbps=caps,
    )


def test_intensity_by_hand() -> None:
    # a: W = 2 x 300 = 600 GPU-ms; M = 50 x 40 = 2000 Mbit over 25 Gbps = 80 ms; I = 7.5
    # b: 400 / (1000 / 25 = 40) = 10; c: 200 / 100 = 2; e: 100 / 20 = 5
    # d: no core: 1500 Mbit over 50 Gbps = 30 ms; 360 / 30 = 12
    inp = _five()
    got = {j: intensity(inp, j) for j in JOBS}
    assert {j: x.intensity for j, x in got.items() if x} == pytest.approx(
        {"a": 7.5, "b": 10.0, "c": 2.0, "d": 12.0, "e": 5.0}
    )
    a = got["a"]
    assert a is not None and a.bottleneck == ("core_in", "core_out")
    assert a.bottleneck_ms == pytest.approx(80.0) and a.work_gpu_ms == pytest.approx(600.0)
    assert [x.job for x in ranked(inp)] == ["d", "b", "a", "e", "c"]


def test_crux_compresses_five_jobs_into_two_and_three_classes() -> None:
    # Order d 12, b 10, a 7.5, e 5, c 2; all but d contend on core.
    # Into 2 runs: {d}{b,a,e,c} 26.5; {d,b}{a,e,c} 11; {d,b,a}{e,c} 2.5 + 3 = 5.5;
    # {d,b,a,e}{c} 10 -> {d,b,a}{e,c}.
    two = make_policy("crux").plan(PolicyInput(**{**_five().__dict__, "classes": 2}))
    assert {k[0]: c for k, c in two.classes.items()} == {"d": 1, "b": 1, "a": 1, "e": 0, "c": 0}
    # Into 3 runs: {d,b,a}{e}{c} 2.5 and {d,b}{a,e}{c} 2.5 tie (every other split
    # loses 3 or more); the tie goes to the larger top run.
    three = make_policy("crux").plan(PolicyInput(**{**_five().__dict__, "classes": 3}))
    assert {k[0]: c for k, c in three.classes.items()} == {"d": 2, "b": 2, "a": 2, "e": 1, "c": 0}
    # every flow of a job carries its job's class; with 8 classes each job has its own
    eight = make_policy("crux").plan(_five())
    assert len(eight.classes) == 10
    assert {k[0]: c for k, c in eight.classes.items()} == {"d": 7, "b": 6, "a": 5, "e": 4, "c": 3}


def test_compress_by_hand() -> None:
    every = [[int(i != j) for j in range(4)] for i in range(4)]
    # {9}{5,4,1}: 1 + 4 + 3 = 8; {9,5}{4,1}: 4 + 3 = 7; {9,5,4}{1}: 4 + 5 + 1 = 10
    assert compress([9.0, 5.0, 4.0, 1.0], every, 2) == (0, 0, 1, 1)
    none = [[0] * 4 for _ in range(4)]
    assert compress([9.0, 5.0, 4.0, 1.0], none, 2) == (0, 0, 0, 0)  # nothing to lose: one class
    assert compress([3.0, 2.0], every, 8) == (0, 1)


def _brute(values: list[float], contend: list[list[bool]], k: int) -> float:
    n = len(values)
    loss = group_loss(np.array(values), np.array(contend, dtype=bool))
    best = np.inf
    for m in range(1, min(k, n) + 1):
        for cuts in itertools.combinations(range(1, n), m - 1):
            bounds = [0, *cuts, n]
            best = min(best, sum(loss[a, b - 1] for a, b in itertools.pairwise(bounds)))
    return float(best)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0, 100), min_size=1, max_size=7),
    st.integers(1, 4),
    st.integers(0, 2**20),
)
def test_compress_is_optimal_and_keeps_the_order(values: list[float], k: int, seed: int) -> None:
    values = sorted(values, reverse=True)
    n = len(values)
    rng = np.random.default_rng(seed)
    upper = np.triu(rng.random((n, n)) < 0.6, 1)
    contend = (upper | upper.T).tolist()
    levels = compress(values, contend, k)
    assert list(levels) == sorted(levels) and max(levels) < max(k, 1)
    loss = group_loss(np.array(values), np.array(contend, dtype=bool))
    runs = [[i for i in range(n) if levels[i] == lv] for lv in sorted(set(levels))]
    got = sum(loss[r[0], r[-1]] for r in runs)
    if n > k:
        assert got == pytest.approx(_brute(values, contend, k), abs=1e-9)


def _pipeline_input(now: float = 1000.0) -> PolicyInput:
    servers = ("p1", "p2", "p3", "p4")
    prof = Profile(
        "gpt", "gpt", "pipeline", 4, 100.0,
        (Phase(40.0, 0.0), Phase(10.0, 50.0), Phase(40.0, 0.0), Phase(10.0, 50.0)),
    )  # fmt: skip
    paths = {}
    caps = {}
    for a, b in itertools.permutations(servers, 2):
        paths[(a, b)] = ((a, "sw"), ("sw", b))
        caps[(a, "sw")] = caps[("sw", b)] = 50.0
    return PolicyInput({"g": servers}, {"g": prof}, paths, caps, now_ms=now)


def test_echelon_staggers_a_four_stage_pipeline() -> None:
    # compute 80 ms over 2 x 4 stage passes: c = 10 ms; comm 20 ms; r = 1000
    targets = flow_targets(_pipeline_input(), "g")
    assert targets == pytest.approx({
        ("p1", "p2"): 1010.0, ("p2", "p3"): 1020.0, ("p3", "p4"): 1030.0,  # forward (s+1) c
        ("p4", "p3"): 1050.0, ("p3", "p2"): 1060.0, ("p2", "p1"): 1070.0,  # backward (2n - s) c
        ("p4", "p1"): 1100.0,  # the ring's closing flow: 2n c + comm
    })  # fmt: skip
    plan = make_policy("echelon").plan(_pipeline_input())
    order = [("p1", "p2"), ("p2", "p3"), ("p3", "p4"), ("p4", "p3"), ("p3", "p2"),
             ("p2", "p1"), ("p4", "p1")]  # fmt: skip
    assert [plan.classes[("g", *f)] for f in order] == [7, 6, 5, 4, 3, 2, 1]


def test_echelon_ring_flows_finish_together() -> None:
    topo = load_topology("leaf-spine:2:1:2")
    prof = Profile("v", "v", "data", 4, 250.0, (Phase(150.0, 0.0), Phase(100.0, 40.0)))
    inp = PolicyInput.of(topo, {"v": ("s01", "s02", "s03", "s04")}, {"v": prof}, now_ms=500.0)
    targets = flow_targets(inp, "v")
    assert len(targets) == 4 and set(targets.values()) == {750.0}  # r + compute + comm
    rates = make_policy("echelon-rate").plan(inp).rates_gbps
    # each ring flow carries a worker's 40 Gbps x 100 ms = 4000 Mbit in 250 ms: 16 Gbps
    assert rates == pytest.approx({("v", s, d): 16.0 for s, d in targets})
    classes = make_policy("echelon").plan(inp).classes
    assert classes == {("v", s, d): 7 for s, d in targets}  # one target: one class


def test_policy_names_are_checked_in_one_line() -> None:
    assert parse_policy(" Crux ") == "crux" and set(POLICIES) >= {"none", "crux", "echelon"}
    with pytest.raises(UserInputError, match=r"^--policy: no policy named 'ehcelon'.*known: crux"):
        parse_policy("ehcelon")
    assert make_policy("none").plan(_five()).classes == {}
