"""The output rule's refusals that protect the folder a command stands in."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulation.cli import main
from topologies.errors import UserInputError
from topologies.outputs import check_output


@pytest.mark.parametrize("out", [".", "..", "/", "./", "sub/.."])
def test_a_results_folder_is_never_the_current_folder_or_above(
    out: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserInputError, match="is the current folder or one above it"):
        check_output(out, "folder", force=True)


def test_emulate_refuses_out_dot_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["emulate", "--out", ".", "--force"]) == 2
    err = capsys.readouterr().err
    assert "--out .: is the current folder" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 KiB tmpfs: a real full disk (ENOSPC), unmounted afterwards."""
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.root
def test_a_full_disk_keeps_the_old_file_whole_and_says_so(tiny_disk: Path) -> None:
    from scheduler.workloads.traces import load_trace, snapshot_trace, write_trace

    out = tiny_disk / "trace.csv"
    write_trace(snapshot_trace(10, 24, seed=1), out)
    before = out.read_bytes()
    with pytest.raises(UserInputError, match=r"trace.csv: not written \(No space left on device\)"):
        write_trace(snapshot_trace(2000, 24, seed=2), out)  # far past 16 KiB
    assert out.read_bytes() == before  # not cut mid-line
    assert len(load_trace(out)) == 10
    assert [p.name for p in tiny_disk.iterdir()] == ["trace.csv"]  # no partial sibling left


@pytest.mark.root
def test_topo_export_onto_a_full_disk_is_one_line_and_keeps_the_old_file(
    tiny_disk: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tiny_disk / "t.json"
    assert main(["topo", "export", "-t", "leaf-spine:2:1:2", "--out", str(out)]) == 0
    before = out.read_bytes()
    (tiny_disk / "filler").write_bytes(b"x" * (16384 - len(before) - 4096))
    assert main(["topo", "export", "--out", str(out), "--force"]) == 2
    assert "not written (No space left on device)" in capsys.readouterr().err
    assert out.read_bytes() == before


@pytest.mark.parametrize(
    "argv",
    [
        ["trace", "generate", "--out", "LONG.csv"],
        ["simulate", "--out", "LONG"],
        ["emulate", "--out", "LONG"],
        ["sweep", "-c", "/dev/null", "--out", "LONG"],
        ["topo", "export", "--out", "LONG.json"],
    ],
)
def test_an_output_name_too_long_is_one_line(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    long = str(tmp_path / ("x" * 300))
    assert main([a.replace("LONG", long) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.endswith("File name too long"), err
    assert "(3" in err  # the path is shortened, its length named
