"""`--scale auto`: S chosen from this machine's cached calibration, recorded with its reason.

The cache is a test folder holding constants chosen so the switch's bursts
bind at S = 0.001 for this plan (the machine's own calibration is not needed and
not touched); the run itself is two 2-worker ResNet50 jobs for a few
iterations on `leaf-spine:2:1:2`. The machine's other work is injected
(`CASSINI_BACKGROUND_CORES`), never measured: on a busy machine a measured
figure took from the limit and chose S = 0.00045.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from emulation.capacity import calibration as cal
from emulation.capacity.model import BURST_CORES, HEADROOM, CostConstants, largest_scale, plan_load
from emulation.emulate.fidelity import FidelityLimits
from emulation.emulate.runner import EmulateSettings, emulate, make_plan
from scheduler.workloads.traces import TraceJob, write_trace
from tests.helpers.leftovers import leftovers
from topologies.errors import UserInputError
from topologies.library import load_topology

TOPOLOGY = "leaf-spine:2:1:2"
WANTED = 0.001  # the S the cached constants make the switch bind at


def _settings(tmp_path: Path, prefix: str) -> EmulateSettings:
    trace = write_trace(
        [TraceJob("a", "resnet50", 2, 1000), TraceJob("b", "resnet50", 2, 1000)],
        tmp_path / "trace.csv",
    )
    return EmulateSettings(topology=TOPOLOGY, trace=str(trace), schedulers=("themis",),
                           iterations=5, prefix=prefix, scale_auto=True)  # fmt: skip


@pytest.fixture(autouse=True)
def quiet_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test here sees a machine with no other work, whatever the real one runs."""
    monkeypatch.setenv(cal.BACKGROUND_ENV, "0")


def _cache(tmp_path: Path, settings: EmulateSettings, switch_base: float = 0.1) -> CostConstants:
    """Constants whose switch-burst limit binds at exactly `WANTED` for the plan's load."""
    topo = load_topology(TOPOLOGY)
    plan = make_plan(settings, topo)
    load = plan_load([d for p in plan.plans for d in p.decisions], topo)
    room = HEADROOM * BURST_CORES - switch_base
    constants = CostConstants(
        switch_base_cores=switch_base,
        switch_cores_per_kpps=room / (WANTED * load.peak_passes_per_s / 1e3),
        replica_base_cores=0.0,
        replica_cores_per_gbps=0.0,
        harness_cores=0.0,
        cores=2,
    )
    cal.save(constants, cal.cache_path(cal.machine_identity()))
    return constants


@pytest.mark.root
def test_scale_auto_chooses_from_the_cache_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    settings = _settings(tmp_path, "tca")
    constants = _cache(tmp_path, settings)
    said: list[str] = []
    report, stopped = emulate(settings, tmp_path / "out", say=said.append)
    assert stopped is None and leftovers("tca") == []
    summary: dict[str, Any] = json.loads((tmp_path / "out" / "summary.json").read_text())
    record = summary["settings"]["scale_choice"]
    assert summary["settings"]["scale"] == pytest.approx(WANTED)  # the fabric ran at it
    assert record["scale"] == pytest.approx(WANTED)
    assert record["bound_by"] == "switch bursts"
    assert record["calibrated_now"] is False
    assert record["constants"]["switch_cores_per_kpps"] == pytest.approx(
        constants.switch_cores_per_kpps
    )
    predicted = record["predicted_cpu"]["switch_cores"]  # the mean, under its own limit
    assert predicted < HEADROOM * FidelityLimits().switch_cpu
    assert record["limits"]["switch_burst_cores"] == pytest.approx(HEADROOM * BURST_CORES)
    assert any(line.startswith("--scale auto: S = 0.001") for line in said), said
    assert "bound by switch bursts" in record["reason"]
    assert summary["schedulers"]["themis"]["jobs"]  # the jobs ran at the chosen S


def test_scale_auto_refuses_in_one_line_when_nothing_fits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An idle switch already past its limit: refused before anything is built (no root)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    settings = _settings(tmp_path, "tcb")
    _cache(tmp_path, settings, switch_base=0.0)
    constants = CostConstants(0.95, 0.01, 0.0, 0.0, 0.0, cores=2)
    cal.save(constants, cal.cache_path(cal.machine_identity()))
    with pytest.raises(UserInputError, match=r"^--scale auto: no S fits: .*switch CPU limit"):
        emulate(settings, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert largest_scale(constants, plan_load([], load_topology(TOPOLOGY))).scale is None


def _cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **over: float) -> CostConstants:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    values: dict[str, Any] = dict(switch_base_cores=0.1, switch_cores_per_kpps=0.02,
                                  replica_base_cores=0.0, replica_cores_per_gbps=0.0,
                                  harness_cores=0.0, cores=2) | over  # fmt: skip
    constants = CostConstants(**values, taken_at="2025-01-02T03:04:05Z",
                              points=({"scale": 0.001, "passes_per_s": 9e3,
                                       "background_cores": 0.03},))  # fmt: skip
    cal.save(constants, cal.cache_path(cal.machine_identity()))
    return constants


def test_capacity_command_answers_from_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from emulation.capacity.model import fill_jobs, load_of
    from emulation.cli import main

    constants = _cached(tmp_path, monkeypatch)
    assert main(["capacity", "-t", TOPOLOGY, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    topo = load_topology(TOPOLOGY)
    expected = largest_scale(constants, load_of(topo, fill_jobs(topo)))
    assert doc["scale"] == expected.scale and doc["bound_by"] == expected.bound_by
    assert doc["calibrated_now"] is False
    assert main(["capacity", "-t", TOPOLOGY, "--headroom", "2"]) == 2  # one line, no traceback
    assert "--headroom" in capsys.readouterr().err


def test_capacity_says_which_calibration_it_used_and_when(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _cached(tmp_path, monkeypatch)
    assert main_capacity() == 0
    out, err = capsys.readouterr()
    path = cal.cache_path(cal.machine_identity())
    assert f"calibration: {path}, taken 2025-01-02T03:04:05Z with other work at most 0.03 " \
           "of 2 cores" in err.splitlines()  # fmt: skip
    assert main_capacity("--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["taken_at"] == "2025-01-02T03:04:05Z" and doc["cache"] == str(path)


def test_the_machines_other_work_is_the_injected_figure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from emulation.capacity.model import fill_jobs, load_of

    constants = _cached(tmp_path, monkeypatch, replica_cores_per_gbps=40.0)
    monkeypatch.setenv(cal.BACKGROUND_ENV, "0.5")
    assert main_capacity("--json") == 0
    doc = json.loads(capsys.readouterr().out)
    topo = load_topology(TOPOLOGY)
    expected = largest_scale(constants, load_of(topo, fill_jobs(topo)), background_cores=0.5)
    assert doc["others_busy_cores"] == 0.5 and doc["limits"]["background_cores"] == 0.5
    assert doc["scale"] == expected.scale
    assert doc["scale"] < largest_scale(constants, load_of(topo, fill_jobs(topo))).scale  # type: ignore[operator]


def main_capacity(*flags: str) -> int:
    from emulation.cli import main

    return main(["capacity", "-t", TOPOLOGY, *flags])


def test_fabric_run_auto_scale_from_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from emulation.capacity.model import load_of
    from emulation.cli.fabric_run_cmds import _auto_scale
    from emulation.jobs.launch import parse_schedule, plan_jobs

    constants = _cached(tmp_path, monkeypatch)
    topo = load_topology(TOPOLOGY)
    doc = {"placement": {"a": ["s01", "s03"]}, "models": {"a": "resnet50"}}
    jobs = plan_jobs(parse_schedule(doc), topo)
    scale, record = _auto_scale(topo, jobs, recalibrate=False)
    expected = largest_scale(constants, load_of(topo, [(j.servers, j.profile) for j in jobs]))
    assert scale == expected.scale and record["scale"] == scale
    assert record["predicted_cpu"]["switch_cores"] <= HEADROOM * FidelityLimits().switch_cpu


def test_without_a_cache_and_without_root_the_answer_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty"))
    monkeypatch.setattr(cal.os, "geteuid", lambda: 1000)
    with pytest.raises(UserInputError, match="sudo cassini capacity --recalibrate"):
        cal.cached_or_calibrate()
