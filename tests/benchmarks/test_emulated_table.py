"""`benchmarks/emulated_table.py` on emulate folders built by hand: the printed means,
t half-widths, JCT and makespan against hand computations, paired ratios, the
untrusted runs left out and listed, and one-line errors for bad folders."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.helpers.benchmark_scripts import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "emulated_table.py"
CLOCK = 1_796_181_252_000.0  # a run's clock is the epoch, in ms


@pytest.fixture(scope="module")
def table() -> ModuleType:
    return load_benchmark("emulated_table")


Spans = Mapping[str, Sequence[tuple[float, float]]]  # job -> (start, end) ms past CLOCK


def scheduler(
    mean: float, p99: float, ecn: int, shared: int, overlap: float | None = None,
    trusted: bool | None = True, reasons: Sequence[str] = (), policy: str = "none",
) -> dict[str, Any]:  # fmt: skip
    """summary.json's `schedulers.<name>`, the fields the table reads and a few it does not."""
    return {
        "mean_iteration_ms": mean, "p99_iteration_ms": p99, "iterations": 8,
        "ecn_marks": ecn, "ecn_marks_shared_links": shared, "overlap_shared_links": overlap,
        "network_policy": {"policy": policy, "segments": []}, "trustworthy": trusted,
        "fidelity": {"trustworthy": trusted, "reasons": list(reasons)},
        "duration_s": 5.0, "jobs": {}, "schedule": {},
    }  # fmt: skip


def emulate_dir(
    path: Path,
    schedulers: Mapping[str, dict[str, Any]],
    spans: Mapping[str, Spans],
    arrivals: Mapping[str, float],
    transport: str = "tcp",
) -> Path:
    """A `cassini emulate --out` folder: summary.json and iterations.csv (two workers a job)."""
    path.mkdir(parents=True)
    settings = {
        "transport": transport,
        "policy": "none",
        "jobs": [
            {"name": j, "model": "vgg19", "workers": 2, "arrival_s": a} for j, a in arrivals.items()
        ],
    }
    (path / "summary.json").write_text(
        json.dumps({"schedulers": schedulers, "trustworthy": True, "settings": settings})
    )
    with (path / "iterations.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["scheduler", "job", "model", "worker", "iteration", "start_ms", "end_ms",
                    "bytes", "comm_ms", "wait_ms", "adjusted", "ce_marks", "late_ms", "late_max_ms"])  # fmt: skip
        for name, jobs in spans.items():
            for job, its in jobs.items():
                for worker in (0, 1):
                    for k, (start, end) in enumerate(its):
                        w.writerow([name, job, "vgg19", worker, k, CLOCK + start, CLOCK + end,
                                    1000, 10.0, 0.0, False, 0, "", ""])  # fmt: skip
    return path


# themis's iterations per folder: j1 arrives at 0, j2 at 2 s (it starts then)
A_SPANS: Spans = {"j1": [(0, 500), (500, 1000)], "j2": [(2000, 2500), (2500, 3500)]}
B_SPANS: Spans = {"j1": [(0, 500), (500, 1000)], "j2": [(2000, 2500), (2500, 3700)]}
CASSINI_SPANS: Spans = {"j1": [(0, 400), (400, 800)], "j2": [(2000, 2400), (2400, 2800)]}
ARRIVALS = {"j1": 0.0, "j2": 2.0}


@pytest.fixture()
def three(tmp_path: Path) -> list[Path]:
    """Three runs: themis 300/330/360 ms; th+cassini 250/220 ms, then one untrusted."""
    out = []
    for name, themis, cassini, trust, spans in (
        ("A", (300.0, 400.0, 100, 80, 0.5), (250.0, 300.0, 50, 40, 0.2), True, A_SPANS),
        ("B", (330.0, 420.0, 120, 90, 0.6), (220.0, 310.0, 30, 20, 0.1), True, B_SPANS),
        ("C", (360.0, 440.0, 110, 70, 0.4), (900.0, 990.0, 5, 5, 0.0), False, A_SPANS),
    ):
        reasons = () if trust else ("machine CPU 99% busy (limit 95%)",)
        summaries = {
            "th+cassini": scheduler(*cassini, trusted=trust, reasons=reasons),
            "themis": scheduler(*themis),
        }
        spans_by = {"themis": spans, "th+cassini": CASSINI_SPANS}
        out.append(emulate_dir(tmp_path / name, summaries, spans_by, ARRIVALS))
    return out


def run(table: ModuleType, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert table.main(list(args)) == 0
    return capsys.readouterr().out


def row(out: str, label: str) -> list[str]:
    """A markdown row's cells."""
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] == label:
            return cells[1:]
    raise AssertionError(f"no row {label!r} in\n{out}")


def test_jct_counts_from_arrival_and_a_queued_jobs_wait(table: ModuleType) -> None:
    # a: 1000..1500 ms, arrives with the run; b arrives 0.2 s later but starts at 1600
    # (it waited): JCT a 0.5 s, b (1900 - 1200) = 0.7 s; makespan 1900 - 1000 = 0.9 s
    recs = [("a", 1000.0, 1200.0), ("a", 1200.0, 1500.0), ("b", 1600.0, 1900.0)]
    jct, makespan = table.jct_and_makespan(recs, {"a": 0.0, "b": 0.2})
    assert jct == pytest.approx(0.6) and makespan == pytest.approx(0.9)
    # a job the settings do not list arrives at its own first start: b 0.3 s
    jct, _ = table.jct_and_makespan(recs, {"a": 0.0})
    assert jct == pytest.approx(0.4)
    # arrivals past the trace's earliest one: a trace starting at 5 s is the same run
    assert table.jct_and_makespan(recs, {"a": 5.0, "b": 5.2}) == pytest.approx((0.6, 0.9))
    assert table.jct_and_makespan([], {}) == (None, None)


def test_means_intervals_jct_and_makespan_match_the_hand_computation(
    table: ModuleType, three: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    out = run(table, capsys, *map(str, three), "--markdown")
    head = row(out, "row")
    assert head == ["mean iter ms", "p99 iter ms", "ECN marks", "ECN shared",
                    "overlap shared", "JCT s", "makespan s", "trusted"]  # fmt: skip
    themis = row(out, "themis")
    # 300, 330, 360: mean 330, sd 30, t(2) = 4.303: 4.303 * 30 / sqrt(3) = 74.53
    assert themis[0] == "330.0 ± 74.5 (3)"
    # 400, 420, 440: sd 20 -> 49.69
    assert themis[1] == "420.0 ± 49.7 (3)"
    # 100, 120, 110: sd 10 -> 24.84; shared 80, 90, 70 -> same spread
    assert themis[2] == "110 ± 25 (3)" and themis[3] == "80 ± 25 (3)"
    # 0.5, 0.6, 0.4: sd 0.1 -> 0.2484
    assert themis[4] == "0.500 ± 0.248 (3)"
    # JCT: A j1 1.0 s, j2 (3500 - 2000) = 1.5 s -> 1.25; B j2 1.7 -> 1.35; C 1.25
    # mean 1.2833, sd 0.057735 -> 4.303 * 0.057735 / sqrt(3) = 0.1434
    assert themis[5] == "1.28 ± 0.14 (3)"
    # makespan 3.5, 3.7, 3.5: mean 3.5667, sd 0.11547 -> 0.2869
    assert themis[6] == "3.57 ± 0.29 (3)"
    assert themis[7] == "3/3"
    cassini = row(out, "th+cassini")
    # C left out: 250, 220: mean 235, sd 21.2132, t(1) = 12.706: 12.706 * 21.2132 / sqrt(2)
    assert cassini[0] == "235.0 ± 190.6 (2)"
    # both kept runs the same iterations: JCT (0.8 + 0.8) / 2 = 0.8, makespan 2.8, sd 0
    assert cassini[5] == "0.80 ± 0.00 (2)" and cassini[6] == "2.80 ± 0.00 (2)"
    assert cassini[7] == "2/3"


def test_ratios_are_base_over_variant_paired_by_folder(
    table: ModuleType, three: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    out = run(table, capsys, *map(str, three), "--markdown")
    ratio = row(out, "th+cassini vs themis")
    # mean ms: 300/250 = 1.2, 330/220 = 1.5: mean 1.35, sd 0.212132 -> 12.706 * 0.15 = 1.9059
    assert ratio[0] == "1.350 ± 1.906 (2)"
    # ECN marks: 100/50 = 2, 120/30 = 4: mean 3, sd sqrt(2) -> 12.706
    assert ratio[2] == "3.000 ± 12.706 (2)"
    # makespan: 3.5/2.8 = 1.25, 3.7/2.8 = 1.3214: mean 1.2857
    assert ratio[5].startswith("1.286 ± ")
    back = row(out, "themis vs th+cassini")
    # 250/300 and 220/330: mean (0.8333 + 0.6667) / 2 = 0.75
    assert back[0].startswith("0.750 ± ") and back[0].endswith("(2)")


def test_untrusted_runs_are_left_out_listed_and_kept_on_request(
    table: ModuleType, three: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    out = run(table, capsys, *map(str, three), "--markdown")
    assert "not trusted by the fidelity monitor (1, left out of the figures):" in out
    assert f"- {three[2]} th+cassini: machine CPU 99% busy (limit 95%)" in out
    kept = run(table, capsys, *map(str, three), "--markdown", "--include-untrusted")
    # 250, 220, 900: mean 456.67
    assert row(kept, "th+cassini")[0].startswith("456.7 ± ") and row(kept, "th+cassini")[
        0
    ].endswith("(3)")
    assert row(kept, "th+cassini vs themis")[0].endswith("(3)")
    assert "(1, kept in the figures)" in kept


def test_policy_rows_pair_by_order_and_roce_names_its_transport(
    table: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spans = {"themis": A_SPANS}
    dirs = [
        emulate_dir(tmp_path / "none1", {"themis": scheduler(300.0, 400.0, 100, 80)}, spans, ARRIVALS),
        emulate_dir(tmp_path / "crux1", {"themis": scheduler(250.0, 500.0, 20, 10, policy="crux")}, spans, ARRIVALS),
        emulate_dir(tmp_path / "none2", {"themis": scheduler(320.0, 400.0, 100, 80)}, spans, ARRIVALS),
        emulate_dir(tmp_path / "crux2", {"themis": scheduler(200.0, 500.0, 25, 10, policy="crux")}, spans, ARRIVALS),
        emulate_dir(tmp_path / "roce", {"themis": scheduler(310.0, 410.0, 90, 70)}, spans, ARRIVALS, "roce"),
    ]  # fmt: skip
    out = run(table, capsys, *map(str, dirs), "--markdown")
    # the first crux run with the first themis run: 300/250 = 1.2, 320/200 = 1.6 -> mean 1.4
    assert row(out, "themis+crux vs themis (paired by order)")[0].startswith("1.400 ± ")
    assert row(out, "themis (roce)")[0] == "310.0 (1)"
    assert row(out, "themis")[0] == "310.0 ± 127.1 (2)"  # 300, 320: 12.706 * 14.1421 / sqrt 2
    # no overlap in these summaries: no such column
    assert "overlap shared" not in row(out, "row")
    labelled = run(table, capsys, *map(str, dirs[:2]), "--markdown", "--label-by", "policy")
    assert row(labelled, "themis+none")[0] == "300.0 (1)"
    assert row(labelled, "themis+crux vs themis+none (paired by order)")[0] == "1.200 (1)"


def test_plain_text_table_lines_up(
    table: ModuleType, three: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    out = run(table, capsys, *map(str, three))
    lines = out.splitlines()
    head = next(line for line in lines if line.startswith("row "))
    themis = next(line for line in lines if line.startswith("themis "))
    assert themis.split("  ")[-1].strip() == "3/3" and len(themis) == len(head)
    assert "330.0 ± 74.5 (3)" in themis


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda d: d.mkdir(), "summary.json: missing"),
        (
            lambda d: (d.mkdir(), (d / "summary.json").write_text("{not json")),
            "summary.json: not JSON",
        ),
        (
            lambda d: (d.mkdir(), (d / "summary.json").write_text("[]")),
            "summary.json: no 'schedulers'",
        ),
        (
            lambda d: (d.mkdir(), (d / "summary.json").write_text('{"schedulers": {}}')),
            "iterations.csv: missing",
        ),
        (lambda d: None, "no such folder"),
    ],
)
def test_bad_folders_get_one_line_naming_the_file(
    table: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str], make: Any, needle: str
) -> None:
    bad = tmp_path / "bad"
    make(bad)
    assert table.main([str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err and needle in err, err


def test_bad_csv_line_and_the_command_line_give_one_line_no_traceback(
    tmp_path: Path, three: list[Path]
) -> None:
    path = three[0] / "iterations.csv"
    lines = path.read_text().splitlines()
    lines[3] = lines[3].replace(str(CLOCK + 500), "soon")
    path.write_text("\n".join(lines) + "\n")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(three[1]), str(three[0])],
        capture_output=True, text=True, check=False, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip() == f"emulated_table: {path}: line 4: bad start_ms/end_ms"


def test_the_half_width_comes_from_the_projects_t_table() -> None:
    from emulation.reproduce.stats import interval, mean_half_width

    mean, half = mean_half_width([2, 4, 4, 4, 5, 5, 7, 9])
    assert mean == 5.0 and half == pytest.approx(2.365 * math.sqrt(32 / 7) / math.sqrt(8))
    assert interval([2, 4, 4, 4, 5, 5, 7, 9]).high == pytest.approx(mean + half, abs=1e-6)
    with pytest.raises(ValueError):
        mean_half_width([])
