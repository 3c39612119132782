"""The profiles file's optional `period_ms` and `measured`, and measured profiles in a book."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler.baselines.base import ProfileBook
from scheduler.workloads.profile_files import (
    load_profiles_file,
    load_profiles_with_periods,
    with_measured_profiles,
)
from scheduler.workloads.profiles import build_profile, load_models
from topologies.errors import UserInputError

ENTRY = {
    "name": "vgg19",
    "model": "vgg19",
    "parallelism": "data",
    "workers": 2,
    "iteration_ms": 212.6,
    "batch_size": 64,
    "phases": [[118.6, 0.0], [94.0, 44.7]],
}


def write(tmp_path: Path, entries: list[dict]) -> Path:
    path = tmp_path / "profiles.json"
    path.write_text(json.dumps(entries))
    return path


def test_old_files_still_read_and_new_fields_are_optional(tmp_path: Path) -> None:
    old = load_profiles_file(write(tmp_path, [ENTRY]))
    assert old["vgg19"].iteration_ms == pytest.approx(212.6)
    new = write(tmp_path, [ENTRY | {"period_ms": 218.0, "measured": {"up_ms": {"p99": 107}}}])
    assert load_profiles_file(new)["vgg19"] == old["vgg19"]
    assert load_profiles_with_periods(new)["vgg19"][1] == 218.0


@pytest.mark.parametrize(
    ("period", "message"),
    [(200.0, "shorter than its iteration time"), ("218", "must be a number"), (True, "number")],
)
def test_bad_period_is_one_line_naming_it(tmp_path: Path, period: object, message: str) -> None:
    with pytest.raises(UserInputError, match=message) as err:
        load_profiles_with_periods(write(tmp_path, [ENTRY | {"period_ms": period}]))
    assert "period_ms" in str(err.value) and "\n" not in str(err.value)


def test_measured_profile_replaces_the_derived_one_for_its_worker_count(tmp_path: Path) -> None:
    path = write(tmp_path, [ENTRY | {"period_ms": 218.0}])
    models = with_measured_profiles(load_models(), path)
    two = build_profile("vgg19", 2, models=models)
    # as the agents pace it: the measured phases, then Down up to the grid period
    assert two.iteration_ms == pytest.approx(218.0)
    assert [(p.duration_ms, p.gbps) for p in two.phases] == [
        (118.6, 0.0),
        (94.0, 44.7),
        (pytest.approx(5.4), 0.0),
    ]
    # another worker count, or another batch size, is still derived
    assert build_profile("vgg19", 4, models=models) == build_profile("vgg19", 4)
    assert build_profile("vgg19", 2, batch_size=32, models=models) == build_profile(
        "vgg19", 2, batch_size=32
    )
    # and the simulator's and schedulers' book sees it
    assert ProfileBook(models).get("vgg19", 2).iteration_ms == pytest.approx(218.0)


def test_without_period_the_measured_mean_is_used(tmp_path: Path) -> None:
    models = with_measured_profiles(load_models(), write(tmp_path, [ENTRY]))
    assert build_profile("vgg19", 2, models=models).iteration_ms == pytest.approx(212.6)


def test_unknown_model_is_named_with_the_closest(tmp_path: Path) -> None:
    path = write(tmp_path, [ENTRY | {"name": "x", "model": "vgg91"}])
    with pytest.raises(UserInputError, match="vgg91.*vgg19"):
        with_measured_profiles(load_models(), path)


def test_up_slack_is_the_up_phases_p95_plus_one_sample_past_its_phase(tmp_path: Path) -> None:
    # Up phase 94.0 ms in the phases; p95 101.5 read on 10 ms samples: up to 111.5
    measured = {"up_ms": {"mean": 94.0, "p95": 101.5}, "interval_ms": 10.0}
    path = write(tmp_path, [ENTRY | {"period_ms": 218.0, "measured": measured}])
    prof, _ = load_profiles_with_periods(path)["vgg19"]
    assert prof.up_slack_ms == pytest.approx(17.5)
    # what the scheduler's book holds keeps it; the phases stay the measured ones
    two = build_profile("vgg19", 2, models=with_measured_profiles(load_models(), path))
    assert two.up_slack_ms == pytest.approx(17.5)
    assert two.phases[1].duration_ms == pytest.approx(94.0)
    # a p95 shorter than the phase plus a sample: no slack, never a negative one
    short = {"up_ms": {"p95": 80.0}, "interval_ms": 10.0}
    assert (
        load_profiles_file(write(tmp_path, [ENTRY | {"measured": short}]))["vgg19"].up_slack_ms
        == 0.0
    )


@pytest.mark.parametrize(
    ("measured", "field"),
    [
        ({"up_ms": {"p95": "101"}, "interval_ms": 10.0}, "measured.up_ms.p95"),
        ({"up_ms": {"p95": 101.0}, "interval_ms": -1}, "measured.interval_ms"),
        ({"up_ms": {"p95": float("nan")}, "interval_ms": 10.0}, "measured.up_ms.p95"),
    ],
)
def test_bad_measured_spread_is_one_line_naming_the_field(
    tmp_path: Path, measured: dict, field: str
) -> None:
    with pytest.raises(UserInputError, match="must be a number") as err:
        load_profiles_file(write(tmp_path, [ENTRY | {"measured": measured}]))
    assert field in str(err.value) and "entry 0" in str(err.value)
    assert "\n" not in str(err.value)
