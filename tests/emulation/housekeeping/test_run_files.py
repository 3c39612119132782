"""Run files and `cassini clean` under a second local user: nothing of another user's is
read, trusted or deleted (issue: a pre-created world-writable run folder let another
user's planted run file make `clean` delete any folder the victim owns)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from emulation.housekeeping import run_files
from emulation.housekeeping.clean import remove_items
from topologies.errors import UserInputError

OTHER_UID = 65534  # nobody


@pytest.fixture
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "run"
    monkeypatch.setenv(run_files.RUN_DIR_ENV, str(folder))
    return folder


def test_the_run_folder_is_made_owner_only(run_dir: Path) -> None:
    assert run_files.run_dir() == run_dir
    assert (run_dir.stat().st_mode & 0o777) == 0o700


def test_a_run_folder_others_may_write_is_refused(run_dir: Path) -> None:
    run_dir.mkdir(mode=0o777)
    run_dir.chmod(0o777)  # what another user pre-creating it in /tmp would leave
    with pytest.raises(UserInputError, match=r"run folder .* is writable by other users"):
        run_files.run_dir()


def test_a_run_folder_that_is_a_link_is_refused(run_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    run_dir.symlink_to(target)
    with pytest.raises(UserInputError, match=r"is not a folder \(a link or a file\?\)"):
        run_files.run_dir()


@pytest.mark.root
def test_a_run_folder_of_another_user_is_refused(run_dir: Path) -> None:
    run_dir.mkdir(mode=0o700)
    os.chown(run_dir, OTHER_UID, OTHER_UID)
    with pytest.raises(UserInputError, match=rf"belongs to user {OTHER_UID}, not you"):
        run_files.run_dir()


def _planted_run(run_dir: Path, prefix: str, victim: Path) -> Path:
    """A run file naming `victim` as the folder of a dead run."""
    path = run_dir / f"{prefix}.json"
    record = {
        "prefix": prefix,
        "owner": {"pid": 2**22 + 1, "start": 1},
        "command": "planted",
        "created": 0.0,
        "namespaces": [],
        "links": [],
        "folders": [str(victim)],
        "processes": [],
    }
    path.write_text(json.dumps(record))
    return path


@pytest.mark.root
def test_a_run_file_of_another_user_is_ignored(run_dir: Path, tmp_path: Path) -> None:
    run_files.run_dir()
    planted = _planted_run(run_dir, "casx1", tmp_path / "victim")
    assert run_files.read_run(planted) is not None  # ours: read
    os.chown(planted, OTHER_UID, OTHER_UID)
    assert run_files.read_run(planted) is None  # another user's: never trusted
    assert run_files.runs(["casx"]) == []


def test_clean_deletes_no_recorded_folder_without_the_labs_marker(tmp_path: Path) -> None:
    victim = tmp_path / "casx1-thesis"  # named like a run's folder, but not made by the lab
    victim.mkdir()
    (victim / "chapter1.tex").write_text("precious")
    assert remove_items("casx1", [], [], [str(victim)]) == []
    assert (victim / "chapter1.tex").read_text() == "precious"
    # Made by the lab (marker naming this run): removed.
    made = tmp_path / "casx1-logs-abc"
    made.mkdir()
    run_files.mark_folder(made, "casx1")
    assert remove_items("casx1", [], [], [str(made)]) == [f"folder {made}"]
    assert not made.exists()
    # The marker of another run does not count either.
    other = tmp_path / "casx1-logs-def"
    other.mkdir()
    run_files.mark_folder(other, "casx2")
    assert remove_items("casx1", [], [], [str(other)]) == []
    assert other.exists()


def test_the_hint_for_a_stray_item_touches_only_that_item() -> None:
    # `cassini clean --all --prefix casrl` would also end a live run `casrl7`.
    assert run_files.removal_hint("netns casrlh1") == "`ip netns delete casrlh1` removes it (as root)"
    assert run_files.removal_hint("link casrl1") == "`ip link delete casrl1` removes it (as root)"
    assert "--all" not in run_files.removal_hint("process 42")
