"""A network policy's plan as queue_class_by_flow entries (emulation/jobs/policy_entries.py),
checked against hand-written connections of the leaf-spine:2:1:2 pair."""

from __future__ import annotations

import pytest

from controlplane.p4names import QUEUE_CLASS_BY_FLOW_TABLE
from controlplane.queue_classes import Flow, queue_class_entries
from emulation.cli.fabric_run_cmds import fabric_policy
from emulation.jobs.launch import JobPlan
from emulation.jobs.policy_entries import (
    WorkerSocket,
    connection_classes,
    covered,
    expected_keys,
    merged_record,
    parse_proc_tcp,
    plan_for,
    run_record,
)
from emulation.jobs.run_settings import RunSettings
from scheduler.workloads.profiles import build_profile
from topologies.errors import UserInputError
from topologies.library import load_topology

WORKERS = (
    WorkerSocket("a", "s01", "10.0.0.1", 47000),
    WorkerSocket("a", "s03", "10.0.0.3", 47001),
    WorkerSocket("b", "s02", "10.0.0.2", 47002),
    WorkerSocket("b", "s04", "10.0.0.4", 47003),
)
CLASSES = {("a", "s01", "s03"): 7, ("a", "s03", "s01"): 7, ("b", "s02", "s04"): 6}


def _pair() -> list[JobPlan]:
    profile = build_profile("resnet50", 2)
    return [
        JobPlan("a", "resnet50", ("s01", "s03"), profile),
        JobPlan("b", "resnet50", ("s02", "s04"), profile),
    ]


def test_proc_tcp_gives_established_connections_only() -> None:
    text = (
        "  sl  local_address rem_address   st tx_queue rx_queue\n"
        "   0: 0100000A:B7C8 0300000A:B799 01 00000000:00000000 00:00000000 0 0 1 1\n"
        "   1: 0100000A:B798 00000000:0000 0A 00000000:00000000 00:00000000 0 0 2 1\n"
        "   2: 0400000A:B79B 0200000A:A5B0 01 00000000:00000000 00:00000000 0 0 3 1\n"
    )
    assert parse_proc_tcp(text) == [
        Flow("10.0.0.1", "10.0.0.3", "tcp", 47048, 47001),  # the listener (0A) is left out
        Flow("10.0.0.4", "10.0.0.2", "tcp", 47003, 42416),
    ]


def test_a_connection_gets_its_flows_class_both_ways_from_either_end() -> None:
    # s01 connected to s03's worker; s03's ss shows the same connection reversed
    seen = [
        Flow("10.0.0.1", "10.0.0.3", "tcp", 40000, 47001),
        Flow("10.0.0.3", "10.0.0.1", "tcp", 47001, 40000),
        Flow("10.0.0.3", "10.0.0.1", "tcp", 41000, 47000),  # a's s03 -> s01
        Flow("10.0.0.2", "10.0.0.4", "tcp", 42000, 47003),  # b's s02 -> s04
        Flow("10.0.0.4", "10.0.0.2", "tcp", 43000, 47002),  # b's s04 -> s02: not planned
        Flow("10.0.0.1", "10.0.0.9", "tcp", 44000, 22),  # no worker's
    ]
    got = connection_classes(CLASSES, WORKERS, seen)
    assert got == {
        Flow("10.0.0.1", "10.0.0.3", "tcp", 40000, 47001): 7,
        Flow("10.0.0.3", "10.0.0.1", "tcp", 47001, 40000): 7,
        Flow("10.0.0.3", "10.0.0.1", "tcp", 41000, 47000): 7,
        Flow("10.0.0.1", "10.0.0.3", "tcp", 47000, 41000): 7,
        Flow("10.0.0.2", "10.0.0.4", "tcp", 42000, 47003): 6,
        Flow("10.0.0.4", "10.0.0.2", "tcp", 47003, 42000): 6,
        Flow("10.0.0.4", "10.0.0.2", "tcp", 43000, 47002): 0,
        Flow("10.0.0.2", "10.0.0.4", "tcp", 47002, 43000): 0,
    }
    assert covered(got, WORKERS) == {
        ("a", "s01", "s03"), ("a", "s03", "s01"), ("b", "s02", "s04"), ("b", "s04", "s02")
    }  # fmt: skip
    entries = queue_class_entries({}, got)
    assert {e.table for e in entries} == {QUEUE_CLASS_BY_FLOW_TABLE}
    first = entries[0]
    assert dict(first.match) == {
        "src_addr": 0x0A000001, "dst_addr": 0x0A000003, "protocol": 6,
        "src_port": 40000, "dst_port": 47001,
    }  # fmt: skip
    assert dict(first.params) == {"queue_class": 7}


def test_a_connection_inside_one_server_gets_no_entry() -> None:
    workers = (*WORKERS, WorkerSocket("a", "s01", "10.0.0.1", 47004))
    seen = [Flow("10.0.0.1", "10.0.0.1", "tcp", 45000, 47004)]
    assert connection_classes(CLASSES, workers, seen) == {}


def test_crux_ranks_the_pair_into_two_classes() -> None:
    topo = load_topology("leaf-spine:2:1:2")
    plan = plan_for("crux", topo, _pair())
    assert expected_keys(_pair()) == set(plan.classes)
    a = {c for (job, _, _), c in plan.classes.items() if job == "a"}
    b = {c for (job, _, _), c in plan.classes.items() if job == "b"}
    assert len(a) == len(b) == 1 and a != b  # ties by name: a first (our choice in crux.py)
    assert a == {7} and b == {6}


def test_records_merge_segment_by_segment() -> None:
    one, two = run_record("crux", {"entries": 8}), run_record("crux", {"entries": 4})
    assert merged_record([one, two]) == {
        "policy": "crux", "segments": [{"entries": 8}, {"entries": 4}]
    }  # fmt: skip
    assert run_record("none", None) == {"policy": "none", "segments": []}


@pytest.mark.parametrize("policy", ["crux", "echelon"])
def test_class_policies_run_over_tcp_only(policy: str) -> None:
    assert fabric_policy(policy, "tcp") == policy
    assert RunSettings(policy=policy).policy == policy
    with pytest.raises(UserInputError, match=f"--policy {policy} .*--transport tcp, not roce"):
        fabric_policy(policy, "roce")
    with pytest.raises(ValueError, match="needs transport tcp"):
        RunSettings(policy=policy, transport="roce")


def test_a_host_rate_policy_is_one_line() -> None:
    with pytest.raises(UserInputError, match="echelon-rate sets host rates, which neither the fabric nor `cassini simulate`"):
        fabric_policy("echelon-rate", "tcp")
