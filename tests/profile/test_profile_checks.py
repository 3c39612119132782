"""`cassini profile` refuses what it cannot measure before a fabric is built, writes its
run folders by the output rule (no planted link followed) and keeps its profiles when
--out's disk is full."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from emulation.cli import main
from tests.helpers.full_disk import fill, tiny_tmpfs

TOPOLOGY = "leaf-spine:2:1:2"


@pytest.fixture
def no_fabric(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """profile_on_fabric replaced by one that writes a run's file, as write_run does, and
    measures nothing: the runs folders it was given are recorded."""
    given: list[Path] = []

    def fake(topology: str, groups: Any, settings: Any, runs_dir: Path, *a: Any, **k: Any) -> list:
        given.append(Path(runs_dir))
        folder = Path(runs_dir) / "2-workers" / "vgg19"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "summary.json").write_text('{"measured": true}\n')
        return []

    monkeypatch.setattr("emulation.profile.session.profile_on_fabric", fake)
    return given


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--iterations", "1"], "--iterations 1: a profile needs at least 4"),
        (["--workers", "999"], "--workers 999: 999 workers do not fit the 4 servers"),
        (["--sharing", "2", "--sharing-out", "s.json"], "--sharing: its 2 jobs run on "
         "cassini-testbed's servers through tor1->agg1, and topology 'leaf-spine-2x1x2' has "
         "no server s05, s13"),
        (["--runs", "/etc/passwd"], "--runs /etc/passwd: is a file, not a folder"),
        (["--out", "p.txt"], "--out p.txt: the file is JSON; name it .json"),
        (["--sharing", "2", "--sharing-out", "s.yaml", "-t", "cassini-testbed"],
         "--sharing-out s.yaml: the file is JSON"),
    ],
)  # fmt: skip
def test_what_cannot_be_measured_is_refused_before_any_fabric(
    argv: list[str],
    line: str,
    no_fabric: list[Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    base = ["profile", "--models", "vgg19", "-t", TOPOLOGY, "--out", "p.json"]
    assert main([*base, *argv]) == 2
    err = capsys.readouterr().err
    assert line in err and err.count("\n") == 1, err
    assert no_fabric == []  # refused before the run, not after it
    assert list(tmp_path.iterdir()) == []


def test_runs_folder_is_staged_so_a_planted_link_is_not_followed(
    no_fabric: list[Path], tmp_path: Path
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("root's, 0600")
    runs = tmp_path / "D"
    (runs / "2-workers" / "vgg19").mkdir(parents=True)
    (runs / "2-workers" / "vgg19" / "summary.json").symlink_to(victim)
    out = tmp_path / "p.json"
    argv = ["profile", "--models", "vgg19", "-t", TOPOLOGY, "--runs", str(runs), "--out", str(out)]
    assert main(argv) == 2  # D holds files: refused without --force, before any run
    assert no_fabric == []
    assert main([*argv, "--force"]) == 0
    assert victim.read_text() == "root's, 0600"
    written = runs / "2-workers" / "vgg19" / "summary.json"
    assert not written.is_symlink() and json.loads(written.read_text()) == {"measured": True}
    assert no_fabric[0] != runs  # the run wrote into a stage, renamed to D after
    assert json.loads(out.read_text()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["D", "p.json", "victim"]


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    with tiny_tmpfs(tmp_path / "disk") as disk:
        yield disk


@pytest.mark.root
def test_a_full_disk_for_out_is_one_line_and_the_profiles_are_kept(
    no_fabric: list[Path],
    full_disk: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    spare = tmp_path / "tmp"
    spare.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(spare))
    fill(full_disk)
    out = full_disk / "p.json"
    assert main(["profile", "--models", "vgg19", "-t", TOPOLOGY, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    (kept,) = [p for p in spare.iterdir() if p.name.startswith("cassini-rescued-p-")]
    assert err == (
        f"cassini: error: --out {out}: not written (No space left on device); it is in "
        f"{kept} instead\n"
    )
    assert json.loads(kept.read_text()) == []
    assert not out.exists()
