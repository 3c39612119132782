"""`cassini program --bmv2`: the compiled JSON is required, found where `make p4` writes
it, and a changed one is pushed again (bmv2 `--no-p4` runs nothing until it arrives).

The software target stands in for bmv2: it keeps the pipeline's cookie as bmv2
does and accepts any device config.
"""

from __future__ import annotations

import pytest

from controlplane.bmv2 import BMV2_JSON, P4_OUT_ENV, bmv2_device_config, built_bmv2_json
from controlplane.p4info import load_p4info
from controlplane.session import P4RuntimeSession, pipeline_cookie
from emulation.cli import main
from topologies.errors import UserInputError


def _cookie(address: str) -> int | None:
    with P4RuntimeSession.connect(address, 1, election_id=None) as session:
        return session.pipeline_cookie()


def test_without_the_json_bmv2_is_refused_naming_the_file_and_make_p4(
    device, capsys, monkeypatch, tmp_path
):
    monkeypatch.setenv(P4_OUT_ENV, str(tmp_path / "out"))
    argv = ["program", "--grpc", device.address, "--bmv2"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    expected = tmp_path / "out" / BMV2_JSON
    assert err == [
        f"cassini: error: cannot read the compiled bmv2 JSON ({expected}): No such file or "
        "directory: run `make p4` (needs p4c) to build it, or pass --device-config FILE"
    ]
    assert _cookie(device.address) is None  # nothing was pushed
    missing = tmp_path / "nope.json"
    assert main([*argv, "--device-config", str(missing)]) == 2
    assert f"cannot read --device-config {missing}" in capsys.readouterr().err
    p4info = tmp_path / "cassini.p4info.txt"
    p4info.write_text("tables { }\n")
    assert main([*argv, "--device-config", str(p4info)]) == 2
    assert f"--device-config {p4info} is not bmv2 JSON" in capsys.readouterr().err


def test_the_json_make_p4_wrote_is_found_and_pushed(device, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv(P4_OUT_ENV, str(tmp_path))
    built = tmp_path / BMV2_JSON
    built.parent.mkdir()
    built.write_text('{"program": "cassini.p4", "build": 1}')
    assert built_bmv2_json() == built
    assert main(["program", "--grpc", device.address, "--bmv2"]) == 0
    assert "pushed the Cassini pipeline" in capsys.readouterr().out
    assert _cookie(device.address) == pipeline_cookie(load_p4info(), built.read_bytes())


def test_a_changed_json_is_pushed_again_and_an_unchanged_one_is_not(device, capsys, tmp_path):
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text('{"program": "cassini.p4", "build": 1}')
    second.write_text('{"program": "cassini.p4", "build": 2}')
    argv = ["program", "--grpc", device.address, "--bmv2", "--device-config"]
    assert main([*argv, str(first)]) == 0
    assert "pushed the Cassini pipeline" in capsys.readouterr().out
    assert main([*argv, str(first)]) == 0
    out = capsys.readouterr().out
    assert "pushed" not in out and "nothing to change" in out
    assert main([*argv, str(second)]) == 0
    out = capsys.readouterr().out
    assert "pushed the Cassini pipeline" in out
    assert _cookie(device.address) == pipeline_cookie(load_p4info(), second.read_bytes())
    # The new pipeline starts empty: every entry is installed again, in packets.
    assert "WRED min=54 max=107 packets" in out and "0 installed before" in out


def test_the_default_location_is_the_build_scripts(monkeypatch) -> None:
    monkeypatch.delenv(P4_OUT_ENV, raising=False)
    path = built_bmv2_json()
    assert path.parts[-4:] == ("build", "p4c-out", "bmv2", "cassini.json")
    assert built_bmv2_json({P4_OUT_ENV: "/x"}).as_posix() == "/x/bmv2/cassini.json"
    with pytest.raises(UserInputError, match="make p4"):
        bmv2_device_config(None, {P4_OUT_ENV: "/nonexistent-p4-out"})
