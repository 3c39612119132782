"""The pure helpers of `benchmarks/bench_controlplane.py` (before/after pairs, ratios,
the environments that pick a protobuf implementation) and, untimed, that its
encode child really runs the implementation its environment asks for."""

from __future__ import annotations

import json
import math
import subprocess
from types import ModuleType

import pytest

from tests.helpers.benchmark_scripts import BENCHMARKS, load_benchmark


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("bench_controlplane")


def test_paired_costs_ratio_is_before_over_after(bench: ModuleType) -> None:
    p = bench.paired([0.30, 0.36, 0.33], [0.010, 0.020, 0.011])
    assert (p.before, p.after) == (0.33, 0.011)
    # per-pair ratios 30, 18, 30: median 30, range 18-30
    assert math.isclose(p.ratio, 30.0) and math.isclose(p.ratio_low, 18.0)
    assert math.isclose(p.ratio_high, 30.0)


def test_paired_rates_ratio_is_after_over_before(bench: ModuleType) -> None:
    p = bench.paired([3000.0, 4000.0], [90000.0, 100000.0], rate=True)
    assert (p.before, p.after) == (3500.0, 95000.0)
    assert math.isclose(p.ratio, (30.0 + 25.0) / 2)  # median of two: their mean
    assert (p.ratio_low, p.ratio_high) == (25.0, 30.0)


def test_paired_refuses_unpaired_rounds(bench: ModuleType) -> None:
    with pytest.raises(ValueError, match="need pairs: 2 before, 1 after"):
        bench.paired([1.0, 2.0], [1.0])
    with pytest.raises(ValueError):
        bench.paired([], [])


def test_paired_zero_cost_after_is_an_infinite_ratio(bench: ModuleType) -> None:
    assert bench.paired([0.5], [0.0]).ratio == math.inf


def test_order_alternates_which_implementation_goes_first(bench: ModuleType) -> None:
    assert [bench.order(r) for r in range(3)] == [
        ("python", "upb"),
        ("upb", "python"),
        ("python", "upb"),
    ]


def test_environment_sets_or_clears_the_pure_python_switch(bench: ModuleType) -> None:
    base = {"PATH": "/bin", bench.PURE_ENV: "python", "PYTHONPATH": "elsewhere"}
    slow, fast = bench.environment("python", base), bench.environment("upb", base)
    assert slow[bench.PURE_ENV] == "python" and bench.PURE_ENV not in fast
    root = str(BENCHMARKS.parent)
    assert fast["PYTHONPATH"].split(":") == [root, "elsewhere"]
    assert bench.environment("upb", {})["PYTHONPATH"] == root


def test_met_against_goals_below_and_at_least(bench: ModuleType) -> None:
    assert bench.met(9.9, 10.0, below=True) == "met"
    assert bench.met(10.0, 10.0, below=True) == "missed"
    assert bench.met(20.0, 20.0, below=False) == "met"
    assert bench.met(19.9, 20.0, below=False) == "missed"


@pytest.mark.parametrize("impl", ["python", "upb"])
def test_encode_child_runs_the_implementation_asked_for(bench: ModuleType, impl: str) -> None:
    done = subprocess.run(
        [*bench.MEASURE, "encode", "--seconds", "0"],
        env=bench.environment(impl),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    result = json.loads(done.stdout)
    assert result["implementation"] == impl
    assert result["entries"] == 1728 and result["rounds"] == 1  # the default testbed, once
    assert result["per_s"] > 0 and result["per_s_with_decode"] < result["per_s"]
