"""The RoCE goals `benchmarks/bench_shift_cases.py --transport roce` prints (issue 26):
no drop, a CNP per host CE mark at most, the aligned case paused and the shifted one
not; and a TCP run prints none of them. Rows are built by hand, no fabric."""

from __future__ import annotations

from tests.helpers.benchmark_scripts import load_benchmark

bench = load_benchmark("bench_shift_cases")


def _row(case: str, **given: object) -> object:
    base = dict(
        case=case, shift_ms=0.0, iterations=10, ce_per_iteration=0.0, iterations_marked=0.0,
        shared_link_marks=0, switch_ecn_marked=0, host_ce_marks=0, mean_ms=100.0,
        p99_ms=110.0, profile_ms=100.0, simulated_ms=100.0, error=None,
    )  # fmt: skip
    base.update(given)
    return bench.CaseFigures(**base)


def _goals(rows: list[object]) -> dict[str, bool]:
    return dict(bench.goals(rows))


def test_roce_rows_are_judged_on_drops_cnps_and_pauses() -> None:
    a = _row("a", host_ce_marks=50, switch_ecn_marked=50, cnps=48, drops=0, pause_frames=7,
             paused_ms=3.5, ce_per_iteration=5.0, iterations_marked=1.0)  # fmt: skip
    b = _row("b", shift_ms=40.0, host_ce_marks=2, cnps=3, drops=1, pause_frames=0, paused_ms=0.0)
    goals = _goals([a, b])
    assert goals["(a) no drop: 0"] is True
    assert goals["(b) no drop: 1"] is False
    assert goals["(a) CNPs 48 <= host CE marks 50"] is True
    assert goals["(b) CNPs 3 <= host CE marks 2"] is False  # a CNP without a mark
    assert goals["(a) paused by PFC: 7 pauses, 3.5 ms"] is True
    assert goals["(b) not paused: 0 pauses"] is True


def test_an_aligned_case_never_paused_misses_the_pause_goal() -> None:
    a = _row("a", cnps=0, pause_frames=0, paused_ms=0.0)
    assert _goals([a])["(a) paused by PFC: 0 pauses, 0.0 ms"] is False


def test_tcp_rows_get_no_roce_goals_and_no_roce_columns() -> None:
    rows = [_row("a"), _row("b", shift_ms=40.0)]
    assert not [text for text in _goals(rows) if "CNP" in text or "paus" in text]
    head = bench.table(rows).splitlines()[0]
    assert "CNPs" not in head and head.endswith("| drops |")
    roce = bench.table([_row("a", cnps=4, host_ce_marks=5, pause_frames=1, paused_ms=0.5)])
    assert roce.splitlines()[2].endswith("| 0 | 5 | 4 | 1 | 0.5 |")
