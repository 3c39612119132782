"""One output rule for every command that writes files, and runs that stop cleanly.

The rule is `topologies.outputs`: an existing output is refused unless --force,
the wrong kind is refused, missing parents are created, a parent that is a file
is one line, and a results folder appears whole or not at all.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from emulation.cli import main
from topologies.outputs import check_output, staged_folder

TRACE = ["trace", "generate", "--jobs", "4", "--seed", "1"]
SIMULATE = ["simulate", "--trace", "snapshot", "--jobs", "4", "--schedulers", "random"]
TOFINO = ["tofino", "artifacts"]
EXPORT = ["topo", "export"]


def _err(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


# ---------------------------------------------------------------- existing outputs


@pytest.mark.parametrize(
    ("command", "name"),
    [(TRACE, "t.csv"), (SIMULATE, "results"), (TOFINO, "tofino"), (EXPORT, "topo.json")],
)
def test_every_writer_refuses_to_overwrite_an_earlier_output(
    command: list[str], name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / name
    assert main([*command, "--out", str(out)]) == 0
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()} if out.is_dir() else None
    capsys.readouterr()
    assert main([*command, "--out", str(out)]) == 2
    err = _err(capsys)
    assert f"--out {out}: already exists" in err and err.count("\n") == 1
    if before is not None:  # the folder was not touched
        assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before


@pytest.mark.parametrize("command", [TRACE, SIMULATE, TOFINO, EXPORT])
def test_force_replaces_an_earlier_output(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / ("o.json" if command is EXPORT else "o.csv" if command is TRACE else "o")
    assert main([*command, "--out", str(out)]) == 0
    if out.is_dir():
        (out / "stale.txt").write_text("from an older run")
    assert main([*command, "--out", str(out), "--force"]) == 0
    assert out.exists() and not (out / "stale.txt").exists()
    assert [p.name for p in tmp_path.iterdir()] == [out.name]  # no staging folder left


@pytest.mark.parametrize("command", [TRACE, SIMULATE, TOFINO, EXPORT])
def test_every_writer_refuses_a_parent_that_is_a_file(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "f").write_text("")
    assert main([*command, "--out", str(tmp_path / "f" / "x.json")]) == 2
    assert f"{tmp_path / 'f'} is a file, not a folder" in _err(capsys)


@pytest.mark.parametrize("command", [TRACE, SIMULATE, TOFINO, EXPORT])
def test_every_writer_creates_missing_parents(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "a" / "b" / ("x.json" if command in (TRACE, EXPORT) else "x")
    assert main([*command, "--out", str(out)]) == 0
    assert out.exists()


@pytest.mark.parametrize(
    ("command", "kind"), [(TRACE, "file"), (SIMULATE, "folder"), (TOFINO, "folder")]
)
def test_the_wrong_kind_is_refused_even_with_force(
    command: list[str], kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other"
    if kind == "file":
        other.mkdir()
        (other / "keep").write_text("")
    else:
        other.write_text("keep")
    force = ["--force"] if command is not TOFINO else []
    assert main([*command, "--out", str(other), *force]) == 2
    wrong = "a folder, not a file" if kind == "file" else "a file, not a folder"
    assert wrong in _err(capsys)
    assert other.exists()


def test_an_empty_folder_is_filled(tmp_path: Path) -> None:
    assert check_output(tmp_path, "folder") == tmp_path
    (tmp_path / "x").write_text("")
    assert check_output(tmp_path, "folder", force=True) == tmp_path


def test_a_staged_folder_appears_only_when_complete(tmp_path: Path) -> None:
    out = tmp_path / "r"
    with pytest.raises(RuntimeError), staged_folder(out) as stage:
        (stage / "half.csv").write_text("a,b\n")
        assert not out.exists()
        raise RuntimeError("the run failed")
    assert list(tmp_path.iterdir()) == []
    with staged_folder(out) as stage:
        (stage / "whole.csv").write_text("a,b\n")
    assert [p.name for p in out.iterdir()] == ["whole.csv"]
    assert oct(out.stat().st_mode & 0o777) == oct(0o777 & ~_umask())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# ---------------------------------------------------------------- interrupted runs


def _simulate_in_background(out: Path) -> subprocess.Popen[str]:
    code = "import sys; from emulation.cli import main; sys.exit(main(sys.argv[1:]))"
    args = ["simulate", "--trace", "poisson", "--jobs", "60", "--seed", "1", "--out", str(out)]
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )


def _wait_for(
    ready: Callable[[], bool], proc: subprocess.Popen[str], timeout: float = 120.0
) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the run never got there"
        time.sleep(0.005)


@pytest.mark.parametrize(
    ("signum", "code", "moment"),
    [
        (signal.SIGINT, 130, "writing"),
        (signal.SIGTERM, 143, "writing"),
        (signal.SIGINT, 130, "simulating"),
    ],
)
def test_an_interrupted_simulate_says_so_and_leaves_no_partial_folder(
    signum: int, code: int, moment: str, tmp_path: Path
) -> None:
    """Stop `cassini simulate` while it simulates, or once it has begun writing results."""
    out = tmp_path / "results"
    proc = _simulate_in_background(out)

    def started_writing() -> bool:
        return any(tmp_path.glob("*/summary.json")) or any(tmp_path.glob(".*/summary.json"))

    def simulating() -> bool:
        return any(tmp_path.iterdir())

    _wait_for(started_writing if moment == "writing" else simulating, proc)
    if moment == "simulating":
        time.sleep(0.5)
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr
    assert f"cassini: interrupted: {out} not written" in stderr
    assert list(tmp_path.iterdir()) == []


def test_sweep_resumes_its_own_folder_and_refuses_any_other(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sweep's folder (with cells/) is reused to resume; another folder or a file is not.

    The old code wrote runs.parquet and table.md into any folder it was given.
    """
    bad = tmp_path / "bad.yaml"
    bad.write_text("seeds: [1\n")  # stops the sweep at its config, after the --out check
    other = tmp_path / "paper"
    other.mkdir()
    (other / "table.md").write_text("someone's table")
    assert main(["sweep", "--config", str(bad), "--out", str(other)]) == 2
    err = _err(capsys)
    assert f"--out {other}: already exists and is not empty; remove it" in err
    assert main(["sweep", "--config", str(bad), "--out", str(bad)]) == 2
    assert "is a file, not a folder" in _err(capsys)
    (other / "cells").mkdir()
    assert main(["sweep", "--config", str(bad), "--out", str(other)]) == 2
    assert "invalid YAML" in _err(capsys)


def test_ecn_watch_refuses_an_earlier_recording_before_it_watches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It wrote over ecn.csv (and ecn-links.csv) at the end of a watch; now it refuses
    at once, before connecting (nothing listens on port 1)."""
    for name in ("ecn.csv", "ecn-links.csv"):
        out = tmp_path / name
        out.write_text("from an earlier watch\n")
        argv = ["ecn", "watch", "--grpc", "127.0.0.1:1", "--out", str(tmp_path / "ecn.csv")]
        assert main(argv) == 2
        assert f"--out {out}: already exists" in _err(capsys)
        assert out.read_text() == "from an earlier watch\n"
        out.unlink()
