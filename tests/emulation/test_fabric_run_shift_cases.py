"""The VGG19 cases of `benchmarks/bench_shift_cases.py` on fewer iterations, on the
default testbed (root): two jobs on one shared ToR uplink with shift 0, with
Cassini's shift, and one job alone.

The goals this machine does not reach yet ((b) 10x fewer marks than (a),
iteration times within 10% of the profile) are measured by the benchmark and
reported as missed, with the cause, in the README; the tests assert the
relations that hold.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from emulation.fabric.emulated import EmulatedFabric
from emulation.fabric.options import FabricOptions
from tests.helpers.benchmark_scripts import load_benchmark
from tests.helpers.leftovers import leftovers
from topologies.library import load_topology

ITERATIONS = 12
bench = load_benchmark("bench_shift_cases")


def test_the_placement_shares_exactly_one_tor_uplink_and_b_takes_compats_shift() -> None:
    topo = load_topology(bench.TOPOLOGY)
    cases = bench.shift_cases(topo)
    assert cases["shared_link"] == "tor1->agg1"
    assert cases["a"]["shifts_ms"]["vgg19-1"] == 0.0
    # `cassini compat --jobs vgg19,vgg19`: the grid the pair holds (318.8 ms; DDP's last
    # buckets still meet for a few ms a period, inside the slot: `scheduler.cassini.holding`),
    # not the profile's 307.5 ms, and the solver's centred rotation on it (175 degrees)
    period = cases["b"]["periods_ms"]["vgg19-1"]
    assert period == pytest.approx(318.8, abs=0.1)
    assert cases["b"]["shifts_ms"]["vgg19-1"] == pytest.approx(period * 175 / 360, abs=0.01)
    assert cases["b"]["periods_ms"] == cases["a"]["periods_ms"]
    assert list(cases["c"]["placement"]) == ["vgg19-0"]


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    topo = load_topology(bench.TOPOLOGY)
    out = tmp_path_factory.mktemp("cases")
    with EmulatedFabric(topo, FabricOptions(scale=0.001)) as fabric:
        prefix = fabric.prefix
        figures = bench.run_cases(fabric, topo, ITERATIONS, out)
    assert leftovers(prefix) == []
    yield {r.case: r for r in figures}


@pytest.mark.root
def test_overlapping_up_phases_mark_most_iterations_and_run_slower_than_alone(
    rows: dict[str, object],
) -> None:
    a, c = rows["a"], rows["c"]
    assert a.error is None and c.error is None  # type: ignore[attr-defined]
    assert a.iterations == ITERATIONS - bench.WARMUP  # type: ignore[attr-defined]
    # (our choice) most, not all: once an agent re-aligns past the other job's Up phase
    # the pair can run apart for a while (measured: 92% of 39 in the README; 100% in six
    # runs alone; 68% of 22 in one CI run). Shifted, the same pair marks almost none.
    assert a.iterations_marked > 0.5 and a.shared_link_marks > 0  # type: ignore[attr-defined]
    assert a.mean_ms > c.mean_ms  # type: ignore[attr-defined]


@pytest.mark.root
def test_host_ce_equals_the_switch_ecn_marked_in_case_a(rows: dict[str, object]) -> None:
    a = rows["a"]
    assert a.host_ce_marks is not None and a.host_ce_marks > 0  # type: ignore[attr-defined]
    assert a.host_ce_marks == a.switch_ecn_marked  # type: ignore[attr-defined]


@pytest.mark.root
def test_the_job_alone_is_never_marked(rows: dict[str, object]) -> None:
    """Its NIC, not the switch, is its bottleneck (the hosts' shaping), as on the testbed."""
    c = rows["c"]
    assert c.error is None  # type: ignore[attr-defined]
    # (our choice) none on the uplink; under one per iteration at its hosts (0 on a quiet
    # machine, 1 in 11 iterations once under load, from the switch's own lateness; 17 per
    # iteration in every iteration before the hosts' NIC shaping)
    assert c.shared_link_marks == 0  # type: ignore[attr-defined]
    assert c.ce_per_iteration < 1  # type: ignore[attr-defined]
