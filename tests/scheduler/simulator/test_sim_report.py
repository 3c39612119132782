"""The simulator's report: which plots it draws, from which series, and what it cites.

Plots are checked through their data functions and the title each PNG carries
in its metadata, not through pixels.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from scheduler.simulator.experiment import Experiment, run_experiment
from scheduler.simulator.report import (
    PLOT_FILES,
    congestion_over_time,
    marked_per_job,
    slowdown_cdfs,
    subtitle,
    write_outputs,
)
from scheduler.workloads.traces import dynamic_trace, poisson_trace
from topologies.library import load_topology


@pytest.fixture(scope="module")
def dynamic() -> Experiment:
    topo = load_topology("cassini-testbed")
    trace = dynamic_trace(topo.total_gpus(), seed=1)
    label = f"dynamic (jobs={len(trace)}, seed=1)"
    return run_experiment(
        trace, topo, ["themis", "th+cassini", "ideal"], 1, trace_label=label, trace_kind="dynamic"
    )


@pytest.fixture(scope="module")
def from_file() -> Experiment:
    topo = load_topology("cassini-testbed")
    trace = poisson_trace(8, topo.total_gpus(), 0.9, seed=3)
    return run_experiment(trace, topo, ["themis", "ideal"], 3, trace_label="my.csv")


def _png_title(path: Path) -> str:
    """The Title of a PNG's tEXt chunks (walked chunk by chunk: length, type, data, CRC)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    at = 8
    while at < len(data):
        length = int.from_bytes(data[at : at + 4], "big")
        kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + length]
        if kind == b"tEXt" and body.startswith(b"Title\x00"):
            return body[6:].decode("latin-1")
        at += 12 + length
    raise AssertionError(f"{path.name} carries no title")


def test_the_report_names_every_plot_and_each_title_names_the_trace(
    dynamic: Experiment, tmp_path: Path
) -> None:
    paths = write_outputs(dynamic, tmp_path)
    report = paths["report"].read_text()
    for key, name in PLOT_FILES.items():
        assert paths[key] == tmp_path / name
        assert f"]({name})" in report, name
        title = _png_title(paths[key])
        assert "trace dynamic (jobs=5, seed=1)" in title and "cassini-testbed" in title
    assert {"slowdown_cdf", "marked_per_job", "congestion_over_time"} <= set(PLOT_FILES)


def test_a_trace_file_title_adds_the_seed(from_file: Experiment) -> None:
    assert subtitle(from_file) == "trace my.csv, seed 3, cassini-testbed"


def test_the_dynamic_report_cites_the_papers_dynamic_figures(
    dynamic: Experiment, from_file: Experiment, tmp_path: Path
) -> None:
    report = write_outputs(dynamic, tmp_path / "d")["report"].read_text()
    assert "dynamic trace" in report and "1.5x mean / 2.2x p99" in report and "27x" in report
    assert "Poisson trace" not in report
    dlrm = next(j for j in dynamic.results["themis"].jobs if j.name == "new-dlrm")
    assert f"new-dlrm: marked {dlrm.marked_mbit / 1e3:.1f} Gbit under themis" in report
    other = write_outputs(from_file, tmp_path / "f")["report"].read_text()
    assert "Poisson trace" in other and "27x" not in other and "loose" in other


def test_slowdown_cdf_pools_every_iterations_slowdown(dynamic: Experiment) -> None:
    series = slowdown_cdfs(dynamic)
    assert list(series) == ["ideal", "th+cassini", "themis"]
    for name, (x, y) in series.items():
        pooled = np.concatenate([j.slowdown for j in dynamic.results[name].jobs])
        assert np.array_equal(x, np.sort(pooled)) and y[-1] == 1.0
        assert np.all(np.diff(x) >= 0) and np.all(np.diff(y) > 0)
    ideal = series["ideal"][0]
    assert ideal.min() >= 1 - 1e-9 and ideal.max() <= 1.0 + 1e-6  # alone on the network
    assert series["themis"][0].mean() > series["ideal"][0].mean()


def test_marked_per_job_ranks_jobs_for_the_cassini_pairs(dynamic: Experiment) -> None:
    jobs, marked = marked_per_job(dynamic)
    assert list(marked) == ["th+cassini", "themis"]  # the pair; Ideal marks nothing
    assert "new-dlrm" in jobs and len(jobs) == 5
    for name, values in marked.items():
        by_job = {j.name: j.marked_mbit / 1e3 for j in dynamic.results[name].jobs}
        assert values == [by_job[j] for j in jobs]
    peaks = [max(marked[n][i] for n in marked) for i in range(len(jobs))]
    assert peaks == sorted(peaks, reverse=True)
    top, few = marked_per_job(dynamic, top=2)
    assert top == jobs[:2] and all(len(v) == 2 for v in few.values())


def test_congestion_over_time_is_smoothed_to_a_readable_number_of_points(
    dynamic: Experiment,
) -> None:
    fine = congestion_over_time(dynamic, points=10**9)
    coarse = congestion_over_time(dynamic, points=20)
    for name in ("themis", "th+cassini"):
        links = dynamic.results[name].links
        t, raw, smooth = fine[name]
        expected = links.oversub_ms.sum(axis=1) / (links.bucket_s * 1e3)
        assert np.array_equal(raw, expected) and np.array_equal(smooth, raw)
        assert t[1] - t[0] == links.bucket_s
        _, raw2, smooth2 = coarse[name]
        assert smooth2.size == raw2.size and smooth2.max() <= raw2.max()
        window = round(max(r.links.oversub_ms.shape[0] for r in dynamic.results.values()) / 20)
        middle = raw2.size // 2
        lo = middle - window // 2
        assert smooth2[middle] == pytest.approx(raw2[lo : lo + window].mean())
