"""The output rule's refusals that protect the folder a command stands in."""

from __future__ import annotations

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
