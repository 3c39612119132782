"""Experiment summaries, report files and the `cassini simulate` command."""

from __future__ import annotations

import json

import pytest

from emulation.cli import main
from emulation.sim_report import write_outputs
from scheduler.experiment import run_experiment
from scheduler.traces import poisson_trace
from topologies.library import load_topology


def test_experiment_summary_and_outputs(tmp_path) -> None:
    topo = load_topology("cassini-testbed")
    trace = poisson_trace(12, topo.total_gpus(), 0.9, seed=4)
    exp = run_experiment(trace, topo, ["themis", "th+cassini", "ideal"], seed=4, trace_label="t")
    by = {s.name: s for s in exp.summaries}
    assert by["ideal"].oversub_link_s == 0.0
    # alone, only a pipeline job's own flows can share its NIC: never worse than Themis
    assert 1.0 - 1e-9 <= by["ideal"].mean_slowdown <= by["themis"].mean_slowdown
    assert by["themis"].iterations == sum(j.iterations for j in trace)
    sp = exp.speedups["th+cassini"]
    assert sp["mean"] == pytest.approx(by["themis"].mean_ms / by["th+cassini"].mean_ms)
    paths = write_outputs(exp, tmp_path)
    summary = json.loads(paths["summary"].read_text())
    assert set(summary["schedulers"]) == {"themis", "th+cassini", "ideal"}
    assert summary["settings"]["seed"] == 4
    rows = paths["iterations"].read_text().splitlines()
    assert len(rows) == 1 + 3 * sum(j.iterations for j in trace)
    for key in ("cdf", "per_model", "congestion"):
        assert paths[key].read_bytes()[:4] == b"\x89PNG"
    report = paths["report"].read_text()
    assert "iteration_cdf.png" in report and "th+cassini" in report


def test_cli_unknown_scheduler(capsys, tmp_path) -> None:
    assert main(["simulate", "--schedulers", "themis,polux", "--out", str(tmp_path)]) == 2
    assert "Did you mean 'pollux'" in capsys.readouterr().err


def test_cli_trace_generate_and_simulate_file(capsys, tmp_path) -> None:
    out = tmp_path / "t.csv"
    assert (
        main(
            [
                "trace",
                "generate",
                "--kind",
                "poisson",
                "--jobs",
                "6",
                "--seed",
                "2",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "simulate",
                "--trace",
                str(out),
                "--schedulers",
                "random,ideal",
                "--out",
                str(tmp_path / "o"),
                "--json",
            ]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out.split("\n", 1)[1])
    assert summary["schedulers"]["ideal"]["jobs"] == 6
