"""The output rule writes through no link and loses nothing to a full disk.

Links another user could plant are never followed (`create_file`, staged
folders made by us and kept 0700 until published), a link given as the
output is replaced whole without a stray sibling, and a write that fails for
want of room is one line naming the file, with the results kept elsewhere
when a run made them (`write_or_rescue`).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from topologies.errors import UserInputError
from topologies.outputs import (
    RESCUE_PREFIX,
    create_file,
    staged_folder,
    write_or_rescue,
)


def test_force_over_a_link_replaces_the_link_and_leaves_no_stray_sibling(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep.txt").write_text("not ours")
    link = tmp_path / "LINK"
    link.symlink_to(target)
    with staged_folder(link, force=True) as stage:
        (stage / "summary.json").write_text("{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["LINK", "elsewhere"]
    assert link.is_dir() and not link.is_symlink()
    assert [p.name for p in link.iterdir()] == ["summary.json"]
    assert (target / "keep.txt").read_text() == "not ours"  # the link's target untouched


def test_a_stage_stays_private_until_published_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        with staged_folder(tmp_path / "out") as stage:
            mode = stat.S_IMODE(stage.stat().st_mode)
    finally:
        os.umask(old)
    assert mode == 0o700  # nobody else can plant a link in it while it is written
    assert stat.S_IMODE((tmp_path / "out").stat().st_mode) == 0o777  # as mkdir would


def test_create_file_refuses_a_planted_link_and_an_existing_file(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("root's")
    planted = tmp_path / "chip.log"
    planted.symlink_to(victim)
    with pytest.raises(OSError) as found:
        create_file(planted)
    assert found.value.errno in (errno.EEXIST, errno.ELOOP)
    assert victim.read_text() == "root's"
    with pytest.raises(FileExistsError):
        create_file(victim)
    with create_file(tmp_path / "new.log") as handle:
        handle.write("fresh")
    assert (tmp_path / "new.log").read_text() == "fresh"


def test_a_full_disk_in_a_staged_folder_is_one_line_naming_the_file(tmp_path: Path) -> None:
    out = tmp_path / "results"
    with pytest.raises(UserInputError) as found, staged_folder(out) as stage:
        (stage / "sub").mkdir()
        with (stage / "sub" / "iterations.csv").open("w") as handle:
            handle.write("job,model\n")
            handle.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as a write says it
    assert str(found.value) == (
        f"--out {out}: not written (No space left on device writing "
        f"{out}/sub/iterations.csv); the old folder, if any, is kept"
    )
    assert list(tmp_path.iterdir()) == []


def test_an_error_that_is_not_the_disks_keeps_its_own_type(tmp_path: Path) -> None:
    with pytest.raises(ConnectionRefusedError), staged_folder(tmp_path / "o"):
        raise ConnectionRefusedError(errno.ECONNREFUSED, "refused")
    assert list(tmp_path.iterdir()) == []


def test_results_a_full_disk_refuses_are_kept_in_the_temporary_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spare_root = tmp_path / "tmp"
    spare_root.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(spare_root))
    out = tmp_path / "run"
    full = {"disk": True}

    def write(folder: Path) -> str:
        (folder / "summary.json").write_text('{"iterations": 12}')
        if full["disk"] and folder.name.startswith(".run"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return "written"

    with pytest.raises(UserInputError) as found, staged_folder(out) as stage:
        (stage / "replicas").mkdir()
        (stage / "replicas" / "job-w0.jsonl").write_text("record\n")  # written during the run
        write_or_rescue(write, stage, out)
    spares = list(spare_root.iterdir())
    assert len(spares) == 1 and spares[0].name.startswith(f"{RESCUE_PREFIX}run-")
    assert str(found.value) == (
        f"--out {out}: not written (No space left on device writing {out}/summary.json); "
        f"the results are in {spares[0]} instead"
    )
    assert (spares[0] / "replicas" / "job-w0.jsonl").read_text() == "record\n"
    assert (spares[0] / "summary.json").read_text() == '{"iterations": 12}'
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["tmp"]
    full["disk"] = False
    with staged_folder(out) as stage:
        assert write_or_rescue(write, stage, out) == "written"
    assert (out / "summary.json").exists()
