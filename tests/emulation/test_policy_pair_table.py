"""`benchmarks/bench_policy_pair.py`'s pure parts (issue 30): per-run rows into the table
(means and t-intervals computed by hand), which ways run, untrusted runs left out, and
`mltcp_turns.turns_after`. Rows are built by hand, no fabric."""

from __future__ import annotations

import math

import pytest

from tests.helpers.benchmark_scripts import load_benchmark

bench = load_benchmark("bench_policy_pair")
turns = load_benchmark("mltcp_turns")


def _row(way: str, run: int, **given: object) -> object:
    base: dict[str, object] = dict(
        way=way, run=run, mean_ms=300.0, p99_ms=400.0, marks_per_iteration=10.0,
        overlap=0.5, trusted=True,
    )  # fmt: skip
    base.update(given)
    return bench.RunRow(**base)


def test_means_and_intervals_by_hand() -> None:
    rows = [
        _row("themis", 1, mean_ms=300.0, p99_ms=400.0, marks_per_iteration=10.0, overlap=0.6),
        _row("themis", 2, mean_ms=310.0, p99_ms=420.0, marks_per_iteration=20.0, overlap=0.4),
        _row("themis", 3, mean_ms=320.0, p99_ms=440.0, marks_per_iteration=30.0, overlap=0.5),
    ]
    (w,) = bench.aggregate(rows, ("themis",))
    # mean 310, sample sd 10, t(2) = 4.303: half-width 4.303 * 10 / sqrt(3) = 24.843
    half = 4.303 * 10.0 / math.sqrt(3)
    assert w.mean_ms.mean == pytest.approx(310.0)
    assert (w.mean_ms.high - w.mean_ms.low) / 2 == pytest.approx(half, abs=1e-5)
    assert w.p99_ms.mean == pytest.approx(420.0)
    assert (w.p99_ms.high - w.p99_ms.low) / 2 == pytest.approx(2 * half, abs=1e-5)
    assert w.marks_per_iteration.mean == pytest.approx(20.0)
    assert w.overlap.mean == pytest.approx(0.5)  # sd 0.1: half-width 0.24843
    assert (w.overlap.high - w.overlap.low) / 2 == pytest.approx(half / 100, abs=1e-5)
    assert (w.runs, w.trusted, w.kept, w.mean_ms.n) == (3, 3, 3, 3)
    text = bench.table([w])
    assert "| themis | 3 / 3 | 310.0 ± 24.8 (n=3) | 420.0 ± 49.7 (n=3) |" in text
    assert "| 50 ± 25 (n=3) |" in text  # the overlap in per cent


def test_untrusted_and_failed_runs_are_left_out_and_listed() -> None:
    rows = [
        _row("crux", 1, mean_ms=300.0),
        _row(
            "crux",
            2,
            mean_ms=900.0,
            trusted=False,
            reasons=("machine CPU 99% busy on average (limit 95%)",),
        ),  # fmt: skip
        _row("crux", 3, mean_ms=500.0, error="job crux-1 failed"),
        _row("crux", 4, mean_ms=310.0),
        _row("crux", 5, mean_ms=800.0, trusted=None),
    ]
    (w,) = bench.aggregate(rows, ("crux",))
    assert (w.runs, w.trusted, w.kept) == (5, 2, 2)
    assert w.mean_ms.mean == pytest.approx(305.0)  # runs 1 and 4 only
    left = dict(w.left_out)
    assert sorted(left) == [2, 3, 5]
    assert left[2] == "untrusted: machine CPU 99% busy on average (limit 95%)"
    assert left[3] == "error: job crux-1 failed"
    assert left[5].startswith("verdict unknown")
    lines = bench.notes([w])
    assert "  crux run 2 left out: untrusted: machine CPU 99% busy on average (limit 95%)" in lines
    assert "| crux | 2 / 5 |" in bench.table([w])


def test_include_untrusted_keeps_them_but_never_an_error() -> None:
    rows = [
        _row("crux", 1, mean_ms=300.0),
        _row("crux", 2, mean_ms=900.0, trusted=False, reasons=("x",)),
        _row("crux", 3, mean_ms=500.0, error="boom"),
    ]
    (w,) = bench.aggregate(rows, ("crux",), untrusted=True)
    assert (w.trusted, w.kept) == (1, 2)
    assert w.mean_ms.mean == pytest.approx(600.0)
    lines = bench.notes([w], untrusted=True)
    assert "  crux run 2 kept though: untrusted: x" in lines
    assert "  crux run 3 left out: error: boom" in lines
    assert "runs kept (untrusted included)" in bench.table([w], untrusted=True)


def test_a_way_without_kept_runs_prints_dashes_and_one_run_has_no_interval() -> None:
    rows = [_row("echelon", 1, trusted=False, reasons=("late",)), _row("themis", 1)]
    ech, th = bench.aggregate(rows, ("echelon", "themis"))
    assert ech.mean_ms is None and ech.overlap is None and ech.kept == 0
    assert "| echelon | 0 / 1 | - | - | - | - |" in bench.table([ech])
    assert th.mean_ms.low is None
    assert "| themis | 1 / 1 | 300.0 (n=1) |" in bench.table([th])


def test_overlap_interval_skips_runs_whose_link_was_never_busy() -> None:
    rows = [_row("themis", 1, overlap=None), _row("themis", 2, overlap=0.3)]
    (w,) = bench.aggregate(rows, ("themis",))
    assert (w.overlap.mean, w.overlap.n, w.mean_ms.n) == (0.3, 1, 2)


def test_ways_are_picked_in_a_fixed_order_and_unknown_ones_refused() -> None:
    assert bench.select_ways("mltcp, crux,themis") == ("themis", "crux", "mltcp")
    assert bench.select_ways(",".join(bench.WAYS)) == bench.WAYS
    with pytest.raises(ValueError, match="unknown tcp"):
        bench.select_ways("themis,tcp")
    with pytest.raises(ValueError, match="empty"):
        bench.select_ways(" , ")


def test_aggregate_only_reports_the_ways_asked_for() -> None:
    rows = [_row("themis", 1), _row("mltcp", 1, turns_after=15), _row("mltcp", 2)]
    (w,) = bench.aggregate(rows, ("mltcp",))
    assert (w.way, w.runs, w.turns_after) == ("mltcp", 2, (15, None))
    assert any("per run: after 15, never" in line for line in bench.notes([w]))


def test_way_plans_follow_the_shift_cases() -> None:
    from topologies.library import load_topology

    topo = load_topology(bench.TOPOLOGY)
    cases = bench.shift_cases(topo, "wideresnet101")
    plans = {w: bench.way_plan(w, topo, "wideresnet101") for w in bench.WAYS}
    assert plans["themis"] == (cases["a"], "tcp", "none")
    assert plans["cassini"] == (cases["b"], "tcp", "none")
    assert plans["crux"] == (cases["a"], "tcp", "crux")
    assert plans["echelon"] == (cases["a"], "tcp", "echelon")
    assert plans["mltcp"] == (cases["a"], "roce", "mltcp")
    assert max(cases["b"]["shifts_ms"].values()) > 0.0


def test_turns_after_needs_every_later_block_low() -> None:
    assert turns.turns_after([0.9, 0.1, 0.6, 0.2, 0.1], 5, 0.2) == 15
    assert turns.turns_after([0.1, 0.1], 5, 0.2) == 0
    assert turns.turns_after([0.1, 0.5], 5, 0.2) is None
    assert turns.turns_after([0.1, None], 5, 0.2) is None  # an idle last block says nothing
    assert turns.turns_after([], 5, 0.2) is None


def test_the_period_stretch_scales_the_paced_ways_period_and_shift() -> None:
    from topologies.library import load_topology

    topo = load_topology("cassini-testbed")
    plain, _, _ = bench.way_plan("cassini", topo, "wideresnet101")
    wide, _, _ = bench.way_plan("cassini", topo, "wideresnet101", 1.05)
    for key in ("periods_ms", "shifts_ms"):
        for job, value in plain[key].items():
            assert wide[key][job] == pytest.approx(value * 1.05)
