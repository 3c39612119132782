"""The one reader of users' data files: what it refuses, in one line naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from topologies.datafile import read_data_file
from topologies.errors import UserInputError


@pytest.mark.parametrize("name", ["n.json", "n.yaml"])
def test_a_number_of_thousands_of_digits_is_one_line(tmp_path: Path, name: str) -> None:
    """Python refuses to convert more than 4300 digits; that was a ValueError traceback."""
    path = tmp_path / name
    path.write_text("{\"workers\": " + "7" * 5000 + "}\n")
    with pytest.raises(UserInputError) as err:
        read_data_file(path, "trace")
    message = str(err.value)
    assert message.startswith(f"{path}: ") and "4300 digits" in message
    assert "\n" not in message and len(message) < len(str(path)) + 200


def test_utf16_is_named_as_such(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_bytes("name: x\n".encode("utf-16"))
    with pytest.raises(UserInputError, match=r"t.yaml: UTF-16 text, not UTF-8; save the topology"):
        read_data_file(path, "topology")


def test_a_yaml_date_that_is_no_date_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "d.yaml"
    path.write_text("name: x\nwhen: 2024-13-45\n")
    with pytest.raises(UserInputError, match=r"d.yaml: a value that is not one: month must be"):
        read_data_file(path, "topology")


def test_binary_inputs_past_the_limit_are_refused_unread(tmp_path: Path) -> None:
    """`--p4info`, `--device-config` and the bmv2 JSON were read whole: `/dev/zero` ran
    until memory did."""
    from controlplane.bmv2 import bmv2_device_config
    from controlplane.p4info import load_p4info
    from emulation.fabric.mininet_switches import ChipSwitch
    from topologies.datafile import MAX_FILE_BYTES

    huge = tmp_path / "huge.bin"
    with huge.open("wb") as fh:  # sparse: no disk used
        fh.truncate(MAX_FILE_BYTES + 1)
    for read, what in [
        (load_p4info, "P4Info"),
        (bmv2_device_config, "bmv2 JSON"),
        (ChipSwitch.device_config, "device config"),
    ]:
        with pytest.raises(UserInputError, match=rf"huge.bin: larger than 64 MiB; not a {what} file"):
            read(huge)
