"""`cassini profile` end to end: one small model alone on the fabric, its profile written."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from emulation.cli import main
from scheduler.workloads.profile_files import load_profiles_with_periods
from scheduler.workloads.profiles import build_profile, load_models


@pytest.mark.root
def test_profile_one_small_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "profiles.json"
    began = time.monotonic()
    # One Up phase per iteration (the sequential job model): what 10 ms samples resolve.
    # DDP's bursts of 1-9 ms are not resolved yet: on ResNet50's the measured Up phase
    # held 425 of its 820 Gbit-ms (an open gap of the measurement, not of this test).
    rc = main(
        ["profile", "--models", "resnet50", "--workers", "2", "--iterations", "8",
         "--topology", "leaf-spine:2:1:2", "--runs", str(tmp_path / "runs"), "--out", str(out),
         "--jobs-model", "sequential-fp32"]
    )  # fmt: skip
    took = time.monotonic() - began
    assert rc == 0
    assert took < 60, f"took {took:.0f} s"
    ((prof, period),) = load_profiles_with_periods(out).values()
    derived = build_profile(
        "resnet50", 2, nic_gbps=50.0, models=load_models(jobs_model="sequential-fp32")
    )
    # alone, a job runs near its derived profile: within 25% (host overheads lengthen it)
    assert derived.iteration_ms * 0.95 < prof.iteration_ms < derived.iteration_ms * 1.25
    assert period is not None and period >= prof.iteration_ms
    up = [p for p in prof.phases if p.gbps > 0]
    assert len(up) == 1
    # its Up phase: near the derived transfer time, at a rate near but under the NIC's
    derived_up = next(p for p in derived.phases if p.gbps > 0)
    assert 0.7 * derived_up.duration_ms < up[0].duration_ms < 1.5 * derived_up.duration_ms
    assert 25.0 < up[0].gbps <= 55.0
    measured = json.loads(out.read_text())[0]["measured"]
    assert measured["iterations"] == 6  # 8 iterations, the first left out: 7 starts
    assert measured["up_ms"]["p50"] <= measured["up_ms"]["p99"]
    assert (tmp_path / "runs" / "2-workers" / "resnet50" / "telemetry.csv").exists()
    assert "resnet50" in capsys.readouterr().out


def test_unknown_model_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc = main(["profile", "--models", "resnet5O", "--out", str(tmp_path / "p.json")])
    err = capsys.readouterr().err
    assert rc == 2 and "resnet50" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--models", "gpt3"], "data-parallel"),
        (["--models", "vgg19", "--workers", "1"], "one worker"),
        (["--models", "vgg19", "--sharing", "2,5", "--sharing-out", "s.json"], "between 2 and 4"),
        (["--models", "vgg19", "--sharing-out", "s.json"], "give --sharing"),
        (["--models", "vgg19,resnet50", "--sharing", "2", "--sharing-out", "s.json"], "one model"),
    ],
)
def test_unmeasurable_jobs_are_refused_before_any_fabric(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["profile", *argv, "--out", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err
    assert named in err and len(err.strip().splitlines()) == 1
