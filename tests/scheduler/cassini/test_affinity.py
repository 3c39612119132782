"""Affinity graph and unique time-shifts (Algorithm 1), by hand and by property."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.cassini.affinity import (
    ACYCLIC,
    CONSISTENT_CYCLE,
    INCONSISTENT_CYCLE,
    build_affinity_graph,
    find_cycle,
    unique_shifts,
)

L1, L2, L3 = ("s1", "tor1"), ("tor1", "agg1"), ("agg1", "tor2")


def test_graph_keeps_only_shared_links_and_their_jobs() -> None:
    g = build_affinity_graph({"a": frozenset({L1, L2}), "b": frozenset({L2}), "c": frozenset({L3})})
    assert {n for n, k in g.nodes(data="kind") if k == "job"} == {"a", "b"}
    assert {n for n, k in g.nodes(data="kind") if k == "link"} == {L2}
    assert g.number_of_edges() == 2


def test_bfs_sign_rule_on_a_chain_of_three_jobs() -> None:
    # a -L1- b -L2- c. On L1 a wants 70 ms, b 10 ms; on L2 b wants 5, c 45.
    g = build_affinity_graph({"a": frozenset({L1}), "b": frozenset({L1, L2}), "c": frozenset({L2})})
    assert find_cycle(g) is None
    res = unique_shifts(
        g,
        {L1: {"a": 70.0, "b": 10.0}, L2: {"b": 5.0, "c": 45.0}},
        {"a": 100.0, "b": 100.0, "c": 50.0},
    )
    # t_a = 0; t_b = 0 - 70 + 10 = -60 mod 100 = 40; t_c = 40 - 5 + 45 = 80 mod 50 = 30.
    assert res.shifts_ms == {"a": 0.0, "b": pytest.approx(40.0), "c": pytest.approx(30.0)}
    assert res.rule == ACYCLIC
    assert res.components == (("a", "b", "c"),)


def test_separate_components_each_start_at_zero() -> None:
    g = build_affinity_graph(
        {"a": frozenset({L1}), "b": frozenset({L1}), "c": frozenset({L3}), "d": frozenset({L3})}
    )
    res = unique_shifts(
        g, {L1: {"a": 0.0, "b": 20.0}, L3: {"c": 30.0, "d": 10.0}}, dict.fromkeys("abcd", 100.0)
    )
    assert res.shifts_ms == {"a": 0.0, "b": 20.0, "c": 0.0, "d": pytest.approx(80.0)}
    assert res.components == (("a", "b"), ("c", "d"))


def test_cycle_is_found_and_kept_only_when_consistent() -> None:
    # a and b both cross L2 and L3: a 4-cycle a-L2-b-L3-a.
    job_links = {"a": frozenset({L2, L3}), "b": frozenset({L2, L3})}
    g = build_affinity_graph(job_links)
    cycle = find_cycle(g)
    assert cycle is not None and set(cycle) == {"a", "b", L2, L3}
    periods = {"a": 100.0, "b": 100.0}
    agree = unique_shifts(
        g, {L2: {"a": 0.0, "b": 50.0}, L3: {"a": 10.0, "b": 60.5}}, periods, tolerance_ms=1.0
    )
    assert agree.rule == CONSISTENT_CYCLE and agree.conflicts == ()
    clash = unique_shifts(
        g, {L2: {"a": 0.0, "b": 50.0}, L3: {"a": 0.0, "b": 20.0}}, periods, tolerance_ms=1.0
    )
    assert clash.rule == INCONSISTENT_CYCLE
    assert len(clash.conflicts) == 1 and "off by 30.0 ms" in clash.conflicts[0]


def test_consistency_is_checked_modulo_the_iteration() -> None:
    g = build_affinity_graph({"a": frozenset({L2, L3}), "b": frozenset({L2, L3})})
    # 95 ms and -5 ms are the same shift of a 100 ms job.
    res = unique_shifts(
        g, {L2: {"a": 0.0, "b": 95.0}, L3: {"a": 10.0, "b": 5.0}}, {"a": 100.0, "b": 100.0}
    )
    assert res.rule == CONSISTENT_CYCLE


@st.composite
def random_forest(draw: st.DrawFn) -> tuple[dict[str, frozenset], dict, dict]:
    """A random tree of jobs and links: each new link joins one existing job and new ones."""
    n_links = draw(st.integers(1, 6))
    job_links: dict[str, set] = {"j0": set()}
    link_shifts: dict = {}
    counter = 1
    for li in range(n_links):
        link = (f"x{li}", f"y{li}")
        anchor = draw(st.sampled_from(sorted(job_links)))
        new_jobs = [f"j{counter + k}" for k in range(draw(st.integers(1, 3)))]
        counter += len(new_jobs)
        members = [anchor, *new_jobs]
        for job in members:
            job_links.setdefault(job, set()).add(link)
        link_shifts[link] = {job: draw(st.floats(0, 99.9)) for job in members}
    return (
        {j: frozenset(v) for j, v in job_links.items()},
        link_shifts,
        dict.fromkeys(job_links, 100.0),
    )


@given(random_forest())
@settings(max_examples=80, deadline=None)
def test_theorem1_acyclic_shifts_satisfy_every_link(case: tuple) -> None:
    job_links, link_shifts, periods = case
    g = build_affinity_graph(job_links)
    assert find_cycle(g) is None
    res = unique_shifts(g, link_shifts, periods)
    assert res.rule == ACYCLIC
    for weights in link_shifts.values():
        jobs = sorted(weights)
        for j in jobs:
            for k in jobs:
                # Relative shift on the link is the one that link's solver chose.
                gap = (res.shifts_ms[k] - res.shifts_ms[j] - (weights[k] - weights[j])) % 100.0
                assert min(gap, 100.0 - gap) < 1e-6
