"""Experiment summaries, report files and the `cassini simulate` command."""

from __future__ import annotations

import importlib.metadata
import json

import numba
import pytest

from emulation.cli import main
from scheduler.baselines.base import ProfileBook
from scheduler.simulator.experiment import run_experiment
from scheduler.simulator.report import write_outputs
from scheduler.workloads.traces import poisson_trace
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
    # the versions that produced the numbers travel with them
    assert summary["settings"]["numba"] == numba.__version__
    assert summary["settings"]["harness"] == importlib.metadata.version("cassini-harness")
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


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_dynamic_case_cassini_picks_compatible_placement(seed: int) -> None:
    """DLRM + ResNet50 into a busy cluster: Th+Cassini's pick scores higher, congests less.

    Measured on seeds 1-4, Themis / Th+Cassini: oversubscribed link-seconds
    1.97, 2.10, 1.68, 1.64; traffic through oversubscribed links 1.34, 1.43,
    1.16, 1.12. Both are bounded by the background's data-parallel jobs,
    whose compatibility with the newcomers is 0.83-0.89 on any link (0.96 at
    best for DLRM with anything): every candidate must use every free GPU, so
    the newcomers always meet them somewhere.
    """
    from scheduler.baselines import make_scheduler
    from scheduler.cassini.plans import evaluate_candidate
    from scheduler.workloads.traces import dynamic_trace
    from scheduler.workloads.traffic import JobRouter as Router
    from tests.helpers.schedulers import dynamic_arrival_view

    topo = load_topology("cassini-testbed")
    router = Router(topo)
    view, _ = dynamic_arrival_view(seed)
    themis = make_scheduler("themis", topo, seed, router=router).decide(view)
    cassini = make_scheduler("th+cassini", topo, seed, router=router).decide(view)
    assert cassini.placement in themis.candidates  # Cassini only picks among Themis's own
    by = {j.name: j for j in view.jobs}
    book = ProfileBook()
    profiles = {n: book.get(by[n].model, len(s)) for n, s in themis.placement.items()}
    themis_pick = evaluate_candidate(themis.placement, profiles, router, topo.capacity_gbps())
    cassini_pick = evaluate_candidate(cassini.placement, profiles, router, topo.capacity_gbps())
    assert cassini.score == pytest.approx(cassini_pick.score)
    assert cassini_pick.value > themis_pick.value  # compatibility net of pacing idle

    trace = dynamic_trace(topo.total_gpus(), seed)
    exp = run_experiment(trace, topo, ["themis", "th+cassini"], seed=seed)
    by_name = {s.name: s for s in exp.summaries}
    assert by_name["th+cassini"].oversub_link_s > 0.0  # incompatible neighbours remain
    assert exp.speedups["th+cassini"]["congestion"] >= 1.5
    assert exp.speedups["th+cassini"]["marked"] > 1.05


def test_congestion_ratios_when_a_scheduler_leaves_none() -> None:
    from dataclasses import replace

    from scheduler.baselines import make_scheduler
    from scheduler.simulator import simulate
    from scheduler.simulator.experiment import speedups, summarise

    topo = load_topology("cassini-testbed")
    trace = poisson_trace(4, topo.total_gpus(), 0.5, 2)
    base = summarise(simulate(trace, topo, make_scheduler("themis", topo, 2)))
    quiet = replace(base, oversub_link_s=0.0, marked_gbit=0.0)
    both_quiet = speedups([replace(quiet, name="themis"), replace(quiet, name="th+cassini")])
    assert both_quiet["th+cassini"]["congestion"] == 1.0  # neither congests: equal
    loud = replace(base, name="themis", oversub_link_s=5.0, marked_gbit=2.0)
    only_base = speedups([loud, replace(quiet, name="th+cassini")])
    assert only_base["th+cassini"]["congestion"] == float("inf")
    assert only_base["th+cassini"]["marked"] == float("inf")
    half = speedups([loud, replace(loud, name="th+cassini", oversub_link_s=2.5, marked_gbit=0.5)])
    assert half["th+cassini"]["congestion"] == 2.0 and half["th+cassini"]["marked"] == 4.0


def test_links_csv_holds_the_utilization_and_congestion_series(tmp_path) -> None:
    import csv

    topo = load_topology("cassini-testbed")
    trace = poisson_trace(12, topo.total_gpus(), 0.9, seed=4)
    exp = run_experiment(trace, topo, ["themis", "ideal"], seed=4)
    paths = write_outputs(exp, tmp_path)
    rows = list(csv.DictReader(paths["links"].open()))
    # Ideal gives every job its own copy of the cluster: no shared series to write
    assert {r["scheduler"] for r in rows} == {"themis"}
    assert all(0.0 < float(r["utilization"]) <= 1.0 + 1e-6 for r in rows)
    assert all("->" in r["link"] for r in rows)
    for s in exp.summaries:
        oversub_s = sum(float(r["oversub_ms"]) for r in rows if r["scheduler"] == s.name) / 1e3
        assert oversub_s == pytest.approx(s.oversub_link_s, rel=1e-6, abs=1e-3)
    jobs = list(csv.DictReader(paths["jobs"].open()))
    marked = sum(float(j["marked_mbit"]) for j in jobs if j["scheduler"] == "themis") / 1e3
    assert marked == pytest.approx(
        next(s for s in exp.summaries if s.name == "themis").marked_gbit, abs=1e-2
    )


QUIET_MODEL = """\
models:
  quiet:
    display: Quiet
    params_m: 1.0
    parallelism: data
    batch_size: 64
    compute_ms: 100
"""


def test_cli_simulate_with_a_models_file(capsys, tmp_path) -> None:
    """A user's measured model runs in every command of the simulation path."""
    models = tmp_path / "measured.yaml"
    models.write_text(QUIET_MODEL)
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,model,workers,iterations\n0,quiet,2,50\n")
    # without the file the model is unknown: the trace line is named
    assert main(["simulate", "--trace", str(trace), "--out", str(tmp_path / "x")]) == 2
    assert "t.csv:2: model: no model named 'quiet'" in capsys.readouterr().err
    args = ["--schedulers", "ideal", "--models", str(models), "--json"]
    assert main(["simulate", "--trace", str(trace), "--out", str(tmp_path / "o"), *args]) == 0
    summary = json.loads(capsys.readouterr().out)
    # 100 ms compute + ring AllReduce of 1 M fp32 params over 2 workers at 50 Gbps
    allreduce_ms = 2 * (2 - 1) / 2 * 1e6 * 4 * 8 / 50e9 * 1e3
    assert summary["schedulers"]["ideal"]["mean_ms"] == pytest.approx(100 + allreduce_ms)
    assert summary["settings"]["models"] == str(models)
    assert str(models) in (tmp_path / "o" / "report.md").read_text()
    # generated traces draw from the user's models as well as the built-in ones
    out = tmp_path / "g.csv"
    gen = ["trace", "generate", "--jobs", "200", "--seed", "1", "--models", str(models)]
    assert main([*gen, "--out", str(out)]) == 0
    assert ",quiet," in out.read_text()


def test_cli_simulate_names_a_bad_models_file(capsys, tmp_path) -> None:
    models = tmp_path / "bad.yaml"
    models.write_text(QUIET_MODEL.replace("compute_ms: 100", "compute_ms: -5"))
    assert main(["simulate", "--models", str(models), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "bad.yaml" in err and "quiet" in err and "compute_ms" in err


def test_time_shifts_interleave_jobs_of_one_period() -> None:
    """The ablation without shifts keeps the placement and loses the interleaving.

    Four 6-GPU VGG19s fill the testbed; each spans two racks and shares
    uplinks. One period, so Cassini's shifts interleave them without idling.
    """
    from dataclasses import replace

    from scheduler.baselines import make_scheduler
    from scheduler.simulator import SimSettings, simulate
    from scheduler.simulator.experiment import summarise
    from scheduler.workloads.traces import TraceJob
    from scheduler.workloads.traffic import JobRouter as Router

    topo = load_topology("cassini-testbed")
    router = Router(topo)
    book = ProfileBook(nic_gbps=topo.nic_gbps())
    trace = tuple(TraceJob(f"j{i}", "vgg19", 6, 200) for i in range(4))
    full = make_scheduler("th+cassini", topo, 1, 10, router, book=book)
    ablated = replace(full, apply_shifts=False, solutions={})
    # Exact bytes: no fast-forward, which extrapolates a cycle that is exact only when the
    # component's grids are commensurate (the free 268 ms job beside the held ~300 ms grid
    # is not: 0.3% more bytes on two links over 50 iterations).
    settings = SimSettings(seed=1, fast_forward=False)
    with_shifts = simulate(trace, topo, full, settings, router, book=book)
    without = simulate(trace, topo, ablated, settings, router, book=book)
    # same placements (the same links carry the same bytes): the ablation
    # changes only when the agents start iterations
    for res in (with_shifts, without):
        assert res.links.links == with_shifts.links.links
    carried = [r.links.carried_mbit.sum(axis=0) for r in (with_shifts, without)]
    assert carried[0] == pytest.approx(carried[1], rel=1e-6)
    a, b = summarise(with_shifts), summarise(without)
    assert a.mean_ms < 0.85 * b.mean_ms
    assert a.oversub_link_s < 0.5 * b.oversub_link_s
    assert all(j.adjustments == 0 for j in without.jobs)
