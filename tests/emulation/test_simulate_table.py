"""`cassini simulate`'s terminal table shows each scheduler's makespan and
communication overhead, the same numbers as its summary.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emulation.cli import main


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
