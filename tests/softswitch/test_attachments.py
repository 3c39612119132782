"""`-i PORT@IFACE` flags read into the switch's ports, each bad flag named."""

from __future__ import annotations

import pytest

from emulation.softswitch.attachments import parse_interfaces
from topologies.errors import UserInputError


def test_ports_are_read_in_order() -> None:
    assert parse_interfaces(["1@veth1", "511@cas-x", "0@lo2"]) == {1: "veth1", 511: "cas-x", 0: "lo2"}


@pytest.mark.parametrize(
    ("specs", "message"),
    [
        (["veth1"], "-i veth1: expected PORT@IFACE"),
        (["1@"], "-i 1@: expected PORT@IFACE"),
        (["one@veth1"], "-i one@veth1: port 'one' is not an integer"),
        (["512@veth1"], "-i 512@veth1: port 512 must be 0..511"),
        (["-1@veth1"], "-i -1@veth1: port -1 must be 0..511"),
        (["1@veth1", "1@veth2"], "-i 1@veth2: port 1 is already attached to veth1"),
        (["1@veth1", "2@veth1"], "-i 2@veth1: interface veth1 is attached twice"),
    ],
)
def test_a_bad_flag_is_named(specs: list[str], message: str) -> None:
    with pytest.raises(UserInputError) as err:
        parse_interfaces(specs)
    assert str(err.value).startswith(message)
