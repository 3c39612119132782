"""The emulation report: figures computed from the records and counters, files a reader can open."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from controlplane.telemetry import LinkDelta, PortDelta, TelemetryLog
from emulation.emulate.plan import SchedulerPlan
from emulation.emulate.report import write_report
from emulation.emulate.results import SchedulerRun, job_iterations, summarise
from emulation.jobs.launch import JobPlan
from emulation.jobs.records import IterationRecord
from emulation.jobs.run_result import RunResult, summarize_job
from emulation.jobs.run_settings import RunSettings
from scheduler.simulator.decisions import Decision
from scheduler.workloads.profiles import build_profile


def _records(
    job: str, model: str, workers: int, times: list[float], marks: list[int]
) -> list[IterationRecord]:
    out, t = [], 1_000.0
    for k, (ms, ce) in enumerate(zip(times, marks, strict=True)):
        for w in range(workers):
            # worker w starts w ms late and ends at the common end: the job's iteration is `ms`
            out.append(
                IterationRecord(
                    job,
                    model,
                    w,
                    k,
                    t + w,
                    t + ms,
                    100,
                    ms / 2,
                    0.0,
                    k == 1 and w == 0,
                    ce if w == 0 else 0,
                )
            )
        t += ms + 10
    return out


def _link(t: float, link: str, port: int, marks: int, tx: int = 100) -> LinkDelta:
    return LinkDelta(
        time_s=t,
        interval_s=0.1,
        link=link,
        port=port,
        tx_packets=tx,
        tx_bytes=tx * 1500,
        ecn_marked_packets=marks,
        wred_dropped_packets=0,
        gbps=tx * 1500 * 8 / 0.1 / 1e9,
    )


def _run(
    name: str, times: list[float], marks: list[int], link_marks: dict[str, int], late: int = 0
) -> SchedulerRun:
    decision = Decision(
        0.0, "arrival", {"a": ("s01", "s05"), "b": ("s02", "s06")}, {"a": "vgg19", "b": "vgg16"}
    )
    paced = name.endswith("cassini")  # b shifted on a 310 ms grid, a left free
    plan = SchedulerPlan(name, (decision,), {"a": 300.0, "b": 280.0}, 290.0, 320.0)
    tel = TelemetryLog()
    for i, (link, m) in enumerate(link_marks.items()):
        for t in (0.1, 0.2):
            tel.ports.append(PortDelta(time_s=t, interval_s=0.1, port=10 + i, ecn_marked_packets=m))
            tel.links.append(_link(t, link, 10 + i, m))
    jobs = tuple(
        JobPlan(j, m, decision.placement[j], build_profile(m, 2),
                shift_ms=150.0 if paced and j == "b" else 0.0,
                period_ms=310.0 if paced and j == "b" else None)
        for j, m in decision.models.items()
    )  # fmt: skip
    records = tuple(
        _records("a", "vgg19", 2, times, marks) + _records("b", "vgg16", 2, times, marks)
    )
    result = RunResult(
        jobs=jobs,
        summaries=tuple(summarize_job(j, records) for j in jobs),
        records=records,
        ports=tuple(tel.ports),
        links=tuple(tel.links),
        settings=RunSettings(iterations=len(times)),
        scale=0.001,
        emulation_profile="S = 0.001",
        duration_s=60.0,
        fidelity={"switch_cpu_cores": 0.4, "machine_cpu": {"busy": 0.5, "steal": 0.01}},
    )
    return SchedulerRun(
        scheduler=name, plan=plan, result=result, shared_links={"tor1->agg1": ("a", "b")},
        switch_lateness={"frames": 10_000, "late_frames": late, "loop_wakeups": 1000,
                         "late_wakeups": 0},
    )  # fmt: skip


def test_job_iterations_span_first_start_to_last_end_and_sum_marks() -> None:
    its = job_iterations(_records("a", "vgg19", 3, [300.0, 310.0], [7, 2]))["a"]
    assert its.workers == 3
    assert its.iteration_ms.tolist() == [299.0, 309.0]  # workers 0, 1, 2 start 0, 1, 2 ms late
    assert its.ce_marks.tolist() == [7.0, 2.0]
    assert its.adjustments == 1


def test_an_iteration_some_workers_did_not_finish_is_dropped() -> None:
    recs = _records("a", "vgg19", 2, [300.0, 310.0], [1, 1])[:-1]  # worker 1 of iteration 1 missing
    assert job_iterations(recs)["a"].iteration_ms.tolist() == [299.5]


def test_summary_follows_the_records_and_counts_only_shared_links() -> None:
    run = _run("themis", [300.0, 320.0, 340.0], [10, 20, 30], {"tor1->agg1": 5, "tor2->agg2": 100})
    s = summarise(run)
    per_worker = [t - w for t in (300.0, 320.0, 340.0) for w in (0, 1)] * 2  # two jobs
    assert s["mean_iteration_ms"] == pytest.approx(np.mean(per_worker))
    assert s["p99_iteration_ms"] == pytest.approx(np.percentile(per_worker, 99))
    assert s["ecn_marks"] == 2 * (5 + 100)
    assert s["ecn_marks_shared_links"] == 2 * 5
    assert s["host_ce_marks"] == 2 * 60
    assert s["jobs"]["a"]["ce_marks"] == 60 and s["jobs"]["a"]["adjustments"] == 1
    assert s["jobs"]["b"]["sim_mean_iteration_ms"] == 280.0
    assert s["trustworthy"] is True


def test_a_run_whose_switch_fell_behind_is_not_trustworthy() -> None:
    s = summarise(_run("themis", [300.0], [0], {"tor1->agg1": 0}, late=500))
    assert s["trustworthy"] is False
    assert "5.0% of frames" in s["fidelity"]["reasons"][0]


def test_report_files(tmp_path: Path) -> None:
    runs = [
        _run("themis", [300.0, 320.0], [10, 20], {"tor1->agg1": 50}),
        _run("th+cassini", [250.0, 260.0], [1, 0], {"tor1->agg1": 2}),
    ]
    report = write_report(
        runs, {"trace": "four-jobs", "topology": "cassini-testbed", "scale": 0.001}, tmp_path
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert list(summary["schedulers"]) == ["th+cassini", "themis"]  # the paper's order
    assert summary["speedups"]["th+cassini"]["mean"] == pytest.approx(309.5 / 254.5, rel=1e-3)
    # One word for the scheduler a variant is measured against, as scheduler.simulator.experiment says it.
    assert summary["speedups"]["th+cassini"]["base"] == "themis"
    assert summary["schedulers"]["themis"]["ecn_marks_shared_links"] == 100
    rows = (tmp_path / "iterations.csv").read_text().splitlines()
    assert rows[0].startswith("scheduler,job,model,worker,iteration")
    assert len(rows) == 1 + 2 * 2 * 2 * 2
    for name in (
        "iteration_cdf",
        "iteration_by_model",
        "speedup",
        "ecn_per_iteration",
        "ecn_shared_links",
        "measured_vs_simulated",
        "links_themis",
        "links_th_cassini",
    ):
        png = report.paths[name]
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        assert png.stat().st_size > 10_000, name
    page = (tmp_path / "report.html").read_text()
    assert "NOT TRUSTWORTHY" not in page
    assert len(re.findall(r"src='data:image/png;base64,", page)) == 8
    assert not re.search(r"src=['\"](?!data:)", page)  # nothing outside the file
    md = (tmp_path / "report.md").read_text()
    for target in re.findall(r"\]\(([^)]+)\)", md):
        assert (tmp_path / target).exists(), target
    # the per-job table says what ran: b shifted on its grid, a free, Themis's jobs free
    assert "| th+cassini | b | vgg16 | 2 | 150.0 | 310.0 |" in md
    assert "| th+cassini | a | vgg19 | 2 | 0.0 | free |" in md
    assert "| themis | b | vgg16 | 2 | 0.0 | free |" in md


def test_segments_merge_numbering_iterations_on_and_counters_on_one_clock() -> None:
    from emulation.emulate.segments import iterations_done, merge

    first = _run("th+cassini", [300.0, 310.0], [1, 2], {"tor1->agg1": 4}).result
    second = _run("th+cassini", [320.0, 330.0, 340.0], [3, 4, 5], {"tor1->agg1": 6}).result
    merged = merge([first, second], [0.0, 10.0], list(second.jobs))
    assert iterations_done(merged.records) == {"a": 5, "b": 5}
    worker0 = sorted(r.iteration for r in merged.records if r.job == "a" and r.worker == 0)
    assert worker0 == [0, 1, 2, 3, 4]
    assert [r.time_s for r in merged.ports] == [0.1, 0.2, 10.1, 10.2]
    assert merged.switch_ecn_marked == 2 * 4 + 2 * 6
    assert merged.duration_s == 120.0
    assert {s.name: s.iterations for s in merged.summaries} == {"a": 5, "b": 5}
    assert merged.fidelity["segments"] == 2


# A host witness inside every limit: 1 of 100 iterations woke late, 3 of 100 phases slow.
HOSTS_QUIET = {"host_iterations": 100, "host_late_iterations": 1, "host_late_p99_ms": 1.5,
               "up_phases": 100, "slow_up_phases": 3}  # fmt: skip


def test_verdict_names_every_limit_passed_and_every_witness_missing() -> None:
    from emulation.emulate.fidelity import FidelityFigures, verdict

    v = verdict(FidelityFigures(machine_cpu_mean=0.97, machine_steal=0.2, switch_cpu_mean=0.5))
    assert not v.trustworthy
    assert [r.split(" ")[0] for r in v.reasons] == ["machine", "the"]
    assert "stole 20%" in v.reasons[1]
    assert v.unmeasured == (
        "frame lateness", "packet-loop lateness", "host wake-up lateness", "host pacing",
    )  # fmt: skip
    quiet = verdict(
        FidelityFigures(
            frames=100,
            late_frames=1,
            loop_wakeups=10,
            late_wakeups=0,
            machine_cpu_mean=0.5,
            machine_steal=0.01,
            switch_cpu_mean=0.4,
            **HOSTS_QUIET,
        )
    )
    assert quiet.trustworthy and quiet.reasons == () and quiet.unmeasured == ()


def test_a_run_without_its_main_witnesses_is_unknown_not_yes() -> None:
    # bmv2 has no lateness witness; its runs were reported "trustworthy: yes".
    from emulation.emulate.fidelity import FidelityFigures, overall, verdict

    blind = verdict(FidelityFigures(machine_cpu_mean=0.5, machine_steal=0.0, switch_cpu_mean=0.4))
    assert blind.trustworthy is None and blind.reasons == ()
    assert blind.unmeasured[:2] == ("frame lateness", "packet-loop lateness")
    # One main witness is enough to clear a run; a limit passed condemns it either way.
    one = verdict(FidelityFigures(frames=100, late_frames=0, machine_cpu_mean=0.5))
    assert one.trustworthy is True
    hot = verdict(FidelityFigures(machine_cpu_mean=0.99))
    assert hot.trustworthy is False
    assert overall([True, blind.trustworthy]) is None
    assert overall([blind.trustworthy, hot.trustworthy]) is False


def test_the_host_witness_judged_by_hand() -> None:
    from emulation.emulate.fidelity import FidelityFigures, FidelityLimits, verdict

    switch_ok = {"frames": 10_000, "late_frames": 0, "loop_wakeups": 1000, "late_wakeups": 0}
    # 12 of 100 iterations woke > 5 ms late (limit 5%); p99 12.5 ms (limit 10 ms);
    # 30 of 200 unmarked Up phases below 75% of their pacing rate (15%, limit 10%).
    starved = verdict(
        FidelityFigures(
            **switch_ok,
            machine_cpu_mean=0.8,
            switch_cpu_mean=0.5,
            host_iterations=100,
            host_late_iterations=12,
            host_late_p99_ms=12.5,
            up_phases=200,
            slow_up_phases=30,
        )
    )
    assert starved.trustworthy is False  # every switch figure passed
    assert starved.reasons == (
        "replicas woke more than 5 ms late in 12% of iterations (limit 5%)",
        "p99 replica wake-up lateness 12.50 ms (limit 10 ms)",
        "15% of unmarked Up phases ran below 75% of their pacing rate (limit 10%)",
    )
    assert starved.unmeasured == ()
    # At the limits exactly a run passes (a limit is passed only when exceeded).
    edge = FidelityFigures(**switch_ok, host_iterations=100, host_late_iterations=5,
                           host_late_p99_ms=10.0, up_phases=10, slow_up_phases=1)  # fmt: skip
    assert verdict(edge).trustworthy is True
    # Other limits: the texts follow them.
    strict = verdict(edge, FidelityLimits(host_late_fraction=0.01, slow_up_fraction=0.05))
    assert strict.reasons == (
        "replicas woke more than 5 ms late in 5% of iterations (limit 1%)",
        "10% of unmarked Up phases ran below 75% of their pacing rate (limit 5%)",
    )
    # Every Up phase marked: nothing to judge, so the pacing witness is unmeasured.
    marked = verdict(FidelityFigures(**switch_ok, host_iterations=10, host_late_iterations=0,
                                     host_late_p99_ms=0.5, up_phases=0, slow_up_phases=0))  # fmt: skip
    assert marked.trustworthy is True and marked.unmeasured[-1] == "host pacing"
    assert "host wake-up lateness" not in marked.unmeasured


def _starved(records: list[IterationRecord]) -> list[IterationRecord]:
    """The records as a starved machine writes them: every other iteration woke 6 ms
    late and every Up phase ran at 60% of its pacing rate."""
    from dataclasses import replace

    return [
        replace(r, late_ms=6.0 if r.iteration % 2 else 0.3,
                late_max_ms=6.0 if r.iteration % 2 else 0.3, up_pace=(0.6,))
        for r in records
    ]  # fmt: skip


def test_a_starved_run_is_not_trustworthy_though_every_switch_figure_passed() -> None:
    from dataclasses import replace

    from emulation.jobs.run_result import host_lateness

    run = _run("themis", [300.0] * 4, [0] * 4, {"tor1->agg1": 0})
    assert summarise(run)["trustworthy"] is True
    records = tuple(_starved(list(run.result.records)))
    fidelity = {**run.result.fidelity, "hosts": host_lateness(records)}
    starved = replace(run, result=replace(run.result, records=records, fidelity=fidelity))
    s = summarise(starved)
    assert s["trustworthy"] is False
    f = s["fidelity"]
    # 4 iterations x 2 workers x 2 jobs; iterations 1 and 3 woke 6 ms late.
    assert (f["host_iterations"], f["host_late_iterations"]) == (16, 8)
    assert (f["up_phases"], f["slow_up_phases"]) == (16, 16)  # no iteration was marked
    assert f["reasons"] == [
        "replicas woke more than 5 ms late in 50% of iterations (limit 5%)",
        "100% of unmarked Up phases ran below 75% of their pacing rate (limit 10%)",
    ]
    assert f["frame_late_p99_ms"] is None and f["late_frames"] == 0  # the switch kept up
