"""The VGG19 cases of `benchmarks/bench_shift_cases.py` on fewer iterations, on the
default testbed (root): two jobs on one shared ToR uplink with shift 0, with
Cassini's shift, and one job alone.

The relations the issue asks for that this machine does not reach yet are
strict xfails with the measured cause (see README, `cassini fabric run`), so
they turn red the day they pass and the mark can go.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from emulation.fabric import EmulatedFabric
from emulation.netns import leftovers
from topologies.library import load_topology

ITERATIONS = 12
BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_shift_cases.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_shift_cases", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


bench = _bench()


def test_the_placement_shares_exactly_one_tor_uplink_and_b_takes_compats_shift() -> None:
    topo = load_topology(bench.TOPOLOGY)
    cases = bench.shift_cases(topo)
    assert cases["shared_link"] == "tor1->agg1"
    assert cases["a"]["shifts_ms"]["vgg19-1"] == 0.0
    assert cases["b"]["shifts_ms"]["vgg19-1"] == pytest.approx(126.476, abs=0.01)
    assert cases["b"]["periods_ms"] == cases["a"]["periods_ms"]
    assert list(cases["c"]["placement"]) == ["vgg19-0"]


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    topo = load_topology(bench.TOPOLOGY)
    out = tmp_path_factory.mktemp("cases")
    with EmulatedFabric(topo, 0.001) as fabric:
        prefix = fabric.prefix
        figures = bench.run_cases(fabric, topo, ITERATIONS, out)
    assert leftovers(prefix) == []
    yield {r.case: r for r in figures}


@pytest.mark.root
def test_overlapping_up_phases_mark_every_iteration_and_run_slower_than_alone(
    rows: dict[str, object],
) -> None:
    a, c = rows["a"], rows["c"]
    assert a.error is None and c.error is None  # type: ignore[attr-defined]
    assert a.iterations == ITERATIONS - bench.WARMUP  # type: ignore[attr-defined]
    assert a.iterations_marked == 1.0 and a.shared_link_marks > 0  # type: ignore[attr-defined]
    assert a.mean_ms > c.mean_ms  # type: ignore[attr-defined]


@pytest.mark.root
def test_host_ce_equals_the_switch_ecn_marked_in_case_a(rows: dict[str, object]) -> None:
    a = rows["a"]
    assert a.host_ce_marks is not None and a.host_ce_marks > 0  # type: ignore[attr-defined]
    assert a.host_ce_marks == a.switch_ecn_marked  # type: ignore[attr-defined]


@pytest.mark.root
@pytest.mark.xfail(
    strict=True,
    reason="measured: a job alone gets CE marks (15-17 per iteration) and runs 1.4-1.8x its "
    "profile here, so the shift cannot remove 10x of the marks; see README",
)
def test_cassinis_shift_removes_the_marks_and_the_job_alone_matches_its_profile(
    rows: dict[str, object],
) -> None:
    a, b, c = rows["a"], rows["b"], rows["c"]
    assert b.ce_per_iteration * 10 <= a.ce_per_iteration  # type: ignore[attr-defined]
    assert abs(b.mean_ms / c.mean_ms - 1) <= 0.10  # type: ignore[attr-defined]
    assert c.ce_per_iteration == 0  # type: ignore[attr-defined]
    assert abs(c.mean_ms / c.profile_ms - 1) <= 0.10  # type: ignore[attr-defined]
