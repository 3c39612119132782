"""Every flag that takes a gRPC address parses it once: HOST:PORT, [IPv6]:PORT, 0-65535."""

from __future__ import annotations

import argparse

import pytest

from emulation.cli import main
from emulation.cli.common import connect_address, listen_address, parse_address


@pytest.mark.parametrize(
    ("text", "listening", "canonical"),
    [
        ("127.0.0.1:9559", False, "127.0.0.1:9559"),
        ("localhost:1", False, "localhost:1"),
        ("switch-1.lab.example:65535", False, "switch-1.lab.example:65535"),
        ("[::1]:9559", False, "[::1]:9559"),
        ("[::]:0", True, "[::]:0"),
        ("0.0.0.0:0", True, "0.0.0.0:0"),
        ("127.0.0.1:09559", False, "127.0.0.1:9559"),
    ],
)
def test_good_addresses_come_back_canonical(text: str, listening: bool, canonical: str) -> None:
    assert parse_address(text, listening) == canonical


@pytest.mark.parametrize(
    ("text", "listening", "message"),
    [
        ("127.0.0.1", True, "'127.0.0.1': no port; expected HOST:PORT"),  # gRPC: port 443
        ("127.0.0.1:99999", True, "port 99999 is outside 0 (any free port) to 65535"),  # wrapped
        ("127.0.0.1:65536", False, "port 65536 is outside 1 to 65535"),
        ("127.0.0.1:0", False, "port 0 is outside 1 to 65535"),  # 0 only to listen
        ("127.0.0.1:-1", True, "port '-1' is not a number 0-65535"),
        ("127.0.0.1:", True, "port '' is not a number 0-65535"),
        ("127.0.0.1:http", False, "port 'http' is not a number 0-65535"),
        (":9559", True, "no host before ':'"),
        ("::1:9559", False, "an IPv6 address goes in brackets"),
        ("[::1]9559", False, "no port after ']'"),
        ("[::1:9559", False, "no ']' after the IPv6 address"),
        ("[10.0.0.1]:9559", False, "'10.0.0.1' is not an IPv6 address"),
        ("127.0.0.300:9559", False, "'127.0.0.300' is not an IPv4 address"),
        ("bad_host:9559", False, "'bad_host' is not a host name"),
        ("127.0.0.1:9559\n", False, "port '9559\n' is not a number"),
    ],
)
def test_bad_addresses_are_refused_with_the_reason(
    text: str, listening: bool, message: str
) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        parse_address(text, listening)
    assert message in str(caught.value)
    assert (listen_address if listening else connect_address).__name__.endswith("_address")


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (
            ["switch", "serve", "-i", "1@lo", "--grpc-server-addr", "127.0.0.1"],
            "--grpc-server-addr",
        ),
        (["fabric", "up", "--grpc-server-addr", "127.0.0.1:99999"], "--grpc-server-addr"),
        (["program", "--dry-run", "--grpc", "127.0.0.1:0"], "--grpc"),
        (["ecn", "watch", "--grpc", "::1:9559"], "--grpc"),
        (["ecn", "watch", "--gnmi", "[::1"], "--gnmi"),
    ],
)
def test_every_command_refuses_a_bad_address_naming_the_flag(
    argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"error: argument {flag}: '" in last and "Traceback" not in last
