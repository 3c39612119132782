"""`--profiles` of simulate, schedule and emulate: the plan and the prediction use the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emulation.cli import build_parser, main
from emulation.cli.emulate_cmds import settings_from
from emulation.emulate.runner import make_plan
from scheduler.workloads.profiles import build_profile
from topologies.library import load_topology

ENTRY = {
    "name": "vgg19",
    "model": "vgg19",
    "workers": 2,
    "phases": [[118.6, 0.0], [94.0, 44.7]],
    "period_ms": 218.0,
}


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    profiles = tmp_path / "profiles.json"
    profiles.write_text(json.dumps([ENTRY]))
    trace = tmp_path / "trace.csv"
    trace.write_text("name,model,workers,iterations,arrival_s\nvgg19-0,vgg19,2,50,0\n")
    return profiles, trace


def _simulated_mean(tmp_path: Path, trace: Path, extra: list[str], out: str) -> float:
    argv = ["simulate", "--trace", str(trace), "--schedulers", "ideal", "--out",
            str(tmp_path / out), "--json", *extra]  # fmt: skip
    assert main(argv) == 0
    summary = json.loads((tmp_path / out / "summary.json").read_text())
    schedulers = summary["schedulers"]
    ideal = schedulers["ideal"] if isinstance(schedulers, dict) else schedulers[0]
    return float(ideal["mean_ms"])


def test_simulate_runs_the_measured_profile(
    tmp_path: Path, files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    profiles, trace = files
    derived = _simulated_mean(tmp_path, trace, [], "a")
    measured = _simulated_mean(tmp_path, trace, ["--profiles", str(profiles)], "b")
    assert derived == pytest.approx(build_profile("vgg19", 2).iteration_ms, abs=0.5)  # 305.7
    assert measured == pytest.approx(218.0, abs=0.5)  # alone, at its grid period


def test_emulate_plans_with_the_profiles_file(files: tuple[Path, Path]) -> None:
    profiles, trace = files
    args = build_parser().parse_args(
        ["emulate", "--trace", str(trace), "--schedulers", "ideal", "--out", "x",
         "--profiles", str(profiles)]
    )  # fmt: skip
    settings = settings_from(args)
    assert settings.profiles == str(profiles)
    plan = make_plan(settings, load_topology(settings.topology))
    assert plan.of("ideal").sim_job_mean_ms["vgg19-0"] == pytest.approx(218.0, abs=0.5)


def test_profiles_and_profile_first_exclude_each_other(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(
            ["emulate", "--out", "x", "--profiles", str(files[0]), "--profile-first"]
        )
    assert "not allowed with" in capsys.readouterr().err


def test_schedule_reads_the_profiles_file(
    tmp_path: Path, files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([ENTRY | {"period_ms": 100.0}]))
    assert main(["schedule", "--profiles", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "period_ms" in err and len(err.strip().splitlines()) == 1


def test_profile_first_measures_the_traces_data_parallel_jobs(tmp_path: Path) -> None:
    from emulation.emulate.runner import EmulateSettings
    from emulation.profile.session import trace_groups
    from scheduler.workloads.profiles import load_models

    trace = tmp_path / "t.csv"
    trace.write_text(
        "model,workers,iterations,arrival_s\nvgg19,2,5,0\nresnet50,4,5,0\nvgg19,2,5,1\n"
        "vgg16,1,5,0\ngpt3,4,5,0\n"
    )
    groups, skipped = trace_groups(EmulateSettings(trace=str(trace)), load_models())
    assert groups == {2: ["vgg19"], 4: ["resnet50"]}
    assert skipped == ["gpt3:4", "vgg16:1"]
