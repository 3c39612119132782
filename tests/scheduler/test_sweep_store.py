"""A sweep's folder: never written through a planted link, a full disk in one line, and stored
cells checked when they are read back."""

from __future__ import annotations

import errno
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from emulation.cli import main as cli_main
from scheduler.sweep import InlineEngine, parse_sweep_config, run_sweep
from scheduler.sweep.store import CellStore, digest
from topologies.errors import UserInputError

TINY = {"trace": "poisson", "loads": 0.9, "jobs": 8, "schedulers": ["themis", "th+cassini"]}
CONFIG = "trace: poisson\nloads: 0.9\njobs: 8\nschedulers: [themis, th+cassini]\nseeds: [1, 2]\n"


def test_a_link_planted_in_the_folder_is_replaced_never_written_through(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("root's own\n")
    secret.chmod(0o600)
    out = tmp_path / "out"
    (out / "cells").mkdir(parents=True)
    for name in ("table.md", "runs.parquet", "ratio_cdf.png", "failures.json"):
        (out / name).symlink_to(secret)
    cfg = parse_sweep_config({**TINY, "seeds": [1]}, "s")
    res = run_sweep(cfg, out, InlineEngine())
    assert res.ran == 1 and secret.read_text() == "root's own\n"
    assert oct(secret.stat().st_mode & 0o777) == "0o600"
    for name in ("table.md", "runs.parquet", "ratio_cdf.png"):
        assert not (out / name).is_symlink() and (out / name).stat().st_size > 0
    assert "| scheduler" in (out / "table.md").read_text() or (out / "table.md").read_text()
    assert pq.read_table(out / "runs.parquet").num_rows == 2
    # a cell file that is a link is not read (it could be anyone's file): the cell runs again
    (cell,) = (out / "cells").glob("*.json")
    real = tmp_path / "elsewhere.json"
    real.write_bytes(cell.read_bytes())
    cell.unlink()
    cell.symlink_to(real)
    again = run_sweep(cfg, out, InlineEngine())
    assert (again.ran, again.skipped) == (1, 0) and not cell.is_symlink()
    assert again.rejected and str(cell) in again.rejected[0]


@pytest.mark.parametrize("problem", ["another user's", "writable by others", "a link"])
def test_a_folder_another_user_could_change_is_refused(
    problem: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    (out / "cells").mkdir(parents=True)
    if problem == "another user's":
        me = os.geteuid()
        monkeypatch.setattr(os, "geteuid", lambda: me + 1)  # the folder is someone else's
        message = f"belongs to user {me}, not you"
    elif problem == "writable by others":
        (out / "cells").chmod(0o777)
        message = r"other users may write in it \(mode 777\)"
    else:
        (tmp_path / "theirs").mkdir()
        (out / "cells").rmdir()
        (out / "cells").symlink_to(tmp_path / "theirs")
        monkeypatch.setattr(os, "lstat", _lstat_as_if_owned_by(out / "cells", 65534))
        message = "a link of user 65534's"
    with pytest.raises(UserInputError, match=message):
        CellStore(out)


def _lstat_as_if_owned_by(path: Path, uid: int) -> Any:
    real = os.lstat

    def fake(name: Any, *args: Any, **kwargs: Any) -> Any:
        info = real(name, *args, **kwargs)
        if Path(name) == path:
            fields = list(info)
            fields[4] = uid  # st_uid
            return os.stat_result(fields)
        return info

    return fake


def test_a_full_disk_is_one_line_naming_the_cell_and_keeps_the_finished_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_fsync = os.fsync
    calls: list[int] = []

    def fsync(fd: int) -> None:
        calls.append(fd)
        if len(calls) >= 2:  # the second cell's file: the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    cfg = parse_sweep_config({**TINY, "seeds": [1, 2]}, "s")
    with pytest.raises(UserInputError) as err:
        run_sweep(cfg, tmp_path / "out", InlineEngine())
    message = str(err.value)
    assert "\n" not in message and "No space left on device" in message
    assert f"{tmp_path / 'out' / 'cells'}/" in message and ".json: not written" in message
    left = sorted(p.name for p in (tmp_path / "out" / "cells").iterdir())
    assert len(left) == 1 and left[0].endswith(".json")  # the finished cell, no temporaries
    monkeypatch.setattr(os, "fsync", real_fsync)
    again = run_sweep(cfg, tmp_path / "out", InlineEngine())
    assert (again.skipped, again.ran, again.failures) == (1, 1, ())


def test_a_full_disk_on_the_command_line_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fsync(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", fsync)
    (tmp_path / "s.yaml").write_text(CONFIG)
    argv = ["sweep", "-c", str(tmp_path / "s.yaml"), "-o", str(tmp_path / "o"), "--engine",
            "inline"]  # fmt: skip
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = [x for x in err.splitlines() if x.startswith("cassini:")]
    assert line.startswith("cassini: error: --out ") and "No space left on device" in line
    assert list((tmp_path / "o" / "cells").iterdir()) == []


def test_a_read_only_cells_folder_is_refused_before_the_first_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    (out / "cells").mkdir(parents=True)
    (out / "cells").chmod(0o555)
    if os.geteuid() == 0:  # root writes through modes: a read-only file system stops it
        real = tempfile.mkstemp

        def mkstemp(*args: Any, **kwargs: Any) -> Any:
            if Path(kwargs.get("dir", "")) == out / "cells":
                raise OSError(errno.EROFS, os.strerror(errno.EROFS))
            return real(*args, **kwargs)

        monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    ran: list[Any] = []

    class Counting(InlineEngine):
        def run(self, fn: Any, tasks: Any) -> Any:
            ran.extend(tasks)
            yield from super().run(fn, tasks)

    cfg = parse_sweep_config({**TINY, "seeds": [1]}, "s")
    with pytest.raises(UserInputError, match=r"--out .*out: cannot write there \((Read-only|Perm)"):
        run_sweep(cfg, out, Counting())
    assert ran == []


def _stored(out: Path) -> list[Path]:
    return sorted((out / "cells").glob("*.json"))


def _reseal(path: Path, doc: Any) -> None:
    """Write `doc` as a cell file with a matching digest: the shape check alone must catch it."""
    if isinstance(doc, dict):
        body = {k: v for k, v in doc.items() if k != "digest"}
        doc = {**body, "digest": digest(body)}
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (lambda r, k: [], "a JSON list, not a cell record"),
        (lambda r, k: "x", "a JSON str, not a cell record"),
        (lambda r, k: {"key": k}, "its 'cell' is not the cell of its key"),
        (lambda r, k: {**r, "summaries": [{"x": 1}, r["summaries"][1]]}, "summaries are not one"),
        (
            lambda r, k: {
                **r,
                "summaries": [{**r["summaries"][0], "mean_ms": "fast"}, r["summaries"][1]],
            },  # fmt: skip
            "'mean_ms' is not a number",
        ),
        (lambda r, k: {**r, "iteration_ms_q": {}}, "'iteration_ms_q' of"),
        (lambda r, k: {**r, "key": "other"}, "its 'key' is not"),
    ],
)
def test_a_stored_cell_of_the_wrong_shape_runs_again(
    edit: Any, why: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "s.yaml").write_text(CONFIG)
    out = tmp_path / "o"
    argv = ["sweep", "-c", str(tmp_path / "s.yaml"), "-o", str(out), "--engine", "inline"]
    assert cli_main(argv) == 0
    before = pq.read_table(out / "runs.parquet")
    first = _stored(out)[0]
    _reseal(first, edit(json.loads(first.read_text()), first.stem))
    capsys.readouterr()
    assert cli_main(argv) == 0
    captured = capsys.readouterr()
    assert "2 cells: 1 already done, 1 ran, 0 failed" in captured.out
    (line,) = [x for x in captured.err.splitlines() if x.startswith("cassini:")]
    assert line.startswith(f"cassini: {first}: ") and why in line and "runs again" in line
    after = pq.read_table(out / "runs.parquet")
    assert after.drop(["wall_s"]).equals(before.drop(["wall_s"]))  # the same figures again


def test_a_stored_cell_edited_by_hand_runs_again(tmp_path: Path) -> None:
    cfg = parse_sweep_config({**TINY, "seeds": [1]}, "s")
    run_sweep(cfg, tmp_path, InlineEngine())
    (cell,) = _stored(tmp_path)
    record = json.loads(cell.read_text())
    record["summaries"][0]["mean_ms"] = 1.0  # the right shape, a forged figure
    cell.write_text(json.dumps(record))
    again = run_sweep(cfg, tmp_path, InlineEngine())
    assert (again.ran, again.skipped) == (1, 0)
    assert "digest does not match" in again.rejected[0]
    assert json.loads(cell.read_text())["summaries"][0]["mean_ms"] != 1.0
