"""The calibration cache: never read through a link or from another user, refused (naming
the field) when a value is not a cost, and never a calibration taken under load.

The machine's load is injected everywhere (`background=`, `CASSINI_BACKGROUND_CORES`):
nothing here depends on how busy the machine running the tests is.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from emulation.capacity import calibration as cal
from emulation.capacity.model import CostConstants, Load, largest_scale
from topologies import datafile
from topologies.errors import UserInputError


def _constants(**over: Any) -> CostConstants:
    values: dict[str, Any] = dict(switch_base_cores=0.1, switch_cores_per_kpps=0.02,
                                  replica_base_cores=0.01, replica_cores_per_gbps=2.0,
                                  harness_cores=0.1, cores=2) | over  # fmt: skip
    return CostConstants(**values)


def _write(path: Path, doc: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        ({"switch_cores_per_kpps": float("nan")}, "'switch_cores_per_kpps' must be a number"),
        ({"harness_cores": -0.5}, "'harness_cores' must be a number in [0, 100000], got -0.5"),
        ({"cores": 0}, "'cores' must be a number in [1, 100000], got 0"),
        ({"replica_base_cores": "0.1"}, "'replica_base_cores' must be a number"),
        ({"points": [{"passes_per_s": float("nan")}]}, "'points[0].passes_per_s' must be"),
        ({"points": [{"passes_per_s": 1e4, "late_frame_fraction": -1}]},
         "'points[0].late_frame_fraction' must be a number in [0, 1]"),
    ],
    ids=["nan", "negative", "no-cores", "string", "nan-point", "negative-lateness"],
)  # fmt: skip
def test_a_cache_entry_that_is_no_cost_is_refused_naming_it(
    tmp_path: Path, edit: dict[str, Any], field: str
) -> None:
    """A NaN constant was read as it was and chose "S = 1: predicted switch nan"."""
    path = _write(tmp_path / "calibration-x.json", _constants().as_dict() | edit)
    with pytest.raises(UserInputError) as err:
        cal.load_cached(path)
    message = str(err.value)
    assert message.startswith(f"calibration cache {path}: field {field}"), message
    assert message.endswith("`sudo cassini capacity --recalibrate` measures again")
    assert "\n" not in message


def test_a_deeply_nested_cache_is_one_line(tmp_path: Path) -> None:
    """It was a RecursionError traceback."""
    path = tmp_path / "calibration-x.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(UserInputError, match=r"^calibration cache .*: nested too deeply"):
        cal.load_cached(path)


def test_a_planted_link_is_neither_read_nor_written_through(tmp_path: Path) -> None:
    folder = tmp_path / "cassini"
    target = _write(tmp_path / "elsewhere.json", _constants(harness_cores=0.9).as_dict())
    folder.mkdir()
    path = folder / "calibration-x.json"
    path.symlink_to(target)  # a link where the cache goes: refused, not followed
    with pytest.raises(UserInputError, match=r"calibration-x.json: a symbolic link"):
        cal.load_cached(path)
    path.unlink()
    planted = folder / "calibration-x.tmp"  # the old, predictable temporary's name
    planted.symlink_to(target)
    before = target.read_text()
    cal.save(_constants(), path)
    assert target.read_text() == before  # nothing written through the link
    assert not path.is_symlink() and cal.load_cached(path) == _constants()
    assert [p.name for p in folder.iterdir() if p.name.startswith(".")] == []  # no stage left


def test_a_cache_another_user_owns_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "calibration-x.json"
    cal.save(_constants(), path)
    owner = os.stat(path).st_uid
    monkeypatch.setattr(datafile.os, "geteuid", lambda: owner + 4242)  # we are someone else
    with pytest.raises(UserInputError, match=rf"owned by user {owner}, not by you"):
        cal.load_cached(path)


@pytest.mark.timeout(10)  # the old reader blocked on it for ever
def test_a_fifo_where_the_cache_goes_is_refused_without_blocking(tmp_path: Path) -> None:
    path = tmp_path / "calibration-x.json"
    os.mkfifo(path)
    with pytest.raises(UserInputError, match=r"not a regular file"):
        cal.load_cached(path)


def _point(scale: float, background: float) -> dict[str, Any]:
    k, g = 9000.0 * scale / 0.001, 0.05 * scale / 0.001
    return {"scale": scale, "passes_per_s": k, "gbps": g, "replicas": 4, "cores": 2,
            "switch_cores": 0.1 + 0.04 * k / 1e3, "replica_cores": 2.0 * g,
            "machine_cores": background + 0.2 + 0.04 * k / 1e3 + 2.0 * g,
            "background_cores": background}  # fmt: skip


def test_a_calibration_under_load_is_refused_before_or_while_it_runs() -> None:
    """A compile on both cores had `capacity` calibrate there and cache it as the machine's."""
    measured: list[float] = []

    def measure(scale: float, iterations: int) -> dict[str, Any]:
        measured.append(scale)
        return _point(scale, 1.93 if scale == 0.002 else 0.02)

    with pytest.raises(UserInputError) as err:
        cal.calibrate(measure=measure, background=lambda: 1.5, cores=2)
    assert str(err.value).startswith("taken under load: other work kept 1.50 of 2 cores busy "
                                     "before calibrating, more than the 0.20")  # fmt: skip
    assert measured == []  # nothing built
    with pytest.raises(UserInputError, match=r"kept 1.93 of 2 cores busy at S = 0.002"):
        cal.calibrate(measure=measure, background=lambda: 0.02, cores=2)
    quiet = cal.calibrate(measure=lambda s, i: _point(s, 0.02), background=lambda: 0.0, cores=2,
                          clock=lambda: 1.7e9)  # fmt: skip
    assert quiet.taken_at == "2023-11-14T22:13:20Z" and len(quiet.points) == 3


def test_a_refused_calibration_caches_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(cal.os, "geteuid", lambda: 0)  # as root: it would calibrate
    with pytest.raises(UserInputError, match=r"^calibration refused, nothing cached: taken under"):
        cal.cached_or_calibrate(recalibrate=True, background=lambda: 1.8)
    assert not (tmp_path / "cassini").exists() or list((tmp_path / "cassini").iterdir()) == []


def test_a_cache_taken_under_load_is_refused_naming_the_load(tmp_path: Path) -> None:
    busy = _constants(points=({"scale": 0.001, "passes_per_s": 9e3, "background_cores": 1.9},))
    path = _write(tmp_path / "calibration-x.json", busy.as_dict())
    with pytest.raises(UserInputError) as err:
        cal.load_cached(path)
    assert str(err.value).startswith(
        f"calibration cache {path}: taken under load: other work kept 1.90 of 2 cores busy "
        "at S = 0.001"
    )


def test_the_machine_load_is_an_input(monkeypatch: pytest.MonkeyPatch) -> None:
    assert cal.background_cores(environ={cal.BACKGROUND_ENV: "0.75"}) == 0.75
    for bad in ("nan", "-1", "lots"):
        with pytest.raises(UserInputError, match=rf"^{cal.BACKGROUND_ENV}: expected .*{bad!r}"):
            cal.background_cores(environ={cal.BACKGROUND_ENV: bad})
    monkeypatch.setenv(cal.BACKGROUND_ENV, "0.5")
    assert cal.background_cores() == 0.5
    choice = largest_scale(_constants(replica_cores_per_gbps=20.0), Load(4e6, 20.0, 4),
                           background_cores=cal.background_cores())  # fmt: skip
    assert choice.scale == pytest.approx(0.0016)  # (1.52 - 0.5 - 0.24) / 480, rounded down
