"""`cassini simulate`'s terminal table shows each scheduler's makespan and
communication overhead, the same numbers as its summary.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emulation.cli import main
from tests.helpers.legacy_models import legacy_cli_args


def test_table_rows_carry_makespan_and_overhead_from_the_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "sim"
    args = ["simulate", "--trace", "snapshot", "--jobs", "8", "--schedulers", "themis,random"]
    assert main([*args, "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = lines[0].split()
    assert "makespan" in header and "ovh" in header
    summary = json.loads((out / "summary.json").read_text())
    rows = {line.split()[0]: line.split() for line in lines[1:3]}
    for s in summary["schedulers"].values():
        row = rows[s["name"]]
        assert s["comm_overhead"] > 0  # a congested trace, so a wrong column shows
        assert float(row[4]) == pytest.approx(s["makespan_s"], abs=0.05)
        assert float(row[5].rstrip("%")) == pytest.approx(100 * s["comm_overhead"], abs=0.05)


def test_policy_runs_every_scheduler_under_its_classes_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--policy crux on the four-jobs trace: the lowest class waits, so the p99 rises
    while the mean falls (scheduler/README.md's policy table: 333.6 -> 311.2 ms)."""
    base = ["simulate", "--trace", "four-jobs", "--schedulers", "themis", "--seed", "21",
            *legacy_cli_args(tmp_path)]  # the figures the README's table was measured on
    means = {}
    for policy in ("none", "crux"):
        out = tmp_path / policy
        assert main([*base, "--policy", policy, "--out", str(out)]) == 0
        summary = json.loads((out / "summary.json").read_text())
        assert summary["settings"]["policy"] == policy
        means[policy] = summary["schedulers"]["themis"]
    capsys.readouterr()
    assert means["crux"]["mean_ms"] < 0.97 * means["none"]["mean_ms"]
    assert means["crux"]["p99_ms"] > 1.2 * means["none"]["p99_ms"]


@pytest.mark.parametrize(
    ("policy", "says"),
    [("crus", "Did you mean 'crux'"), ("echelon-rate", "classes only")],
)
def test_a_policy_the_simulator_cannot_run_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str, says: str
) -> None:
    args = ["simulate", "--trace", "four-jobs", "--policy", policy, "--out", str(tmp_path / "o")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()
