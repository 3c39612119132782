"""bmv2 as users build it: a simple_switch_grpc without Thrift is named in one line.

No bmv2 here: the tests feed `Bmv2Switch` the log lines a real
simple_switch_grpc built without `--with-thrift` prints (recorded from
behavioral-model's switch_runner.cpp warning) and simple_switch_CLI's refusal.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import emulation.fabric.bmv2_switch
from emulation.fabric.bmv2_switch import NO_THRIFT_ERROR, Bmv2Switch, no_thrift
from emulation.fabric.switch_log import SwitchLog
from topologies.errors import UserInputError

# What simple_switch_grpc (built without Thrift) logs at start-up, --log-level info.
NO_THRIFT_LOG = [
    "Calling target program-options parser",
    "[01:02:03.456] [bmv2] [I] [thread 4242] Starting gRPC server on 127.0.0.1:40123",
    "Server listening on 127.0.0.1:40123",
    "[01:02:03.457] [bmv2] [W] [thread 4242] You used the '--thrift-port' command-line "
    "option, but this target was compiled without Thrift support. You can enable Thrift "
    "support (not recommended) by providing '--with-thrift' to configure.",
]
REFUSED = (
    "simple_switch_CLI on thrift port 9090 failed: Could not connect to thrift client on port 9090"
)


def _switch(log_file: str | None = None) -> Bmv2Switch:
    """A Bmv2Switch without Mininet's node: only what `configure_queues` reads."""
    switch = Bmv2Switch.__new__(Bmv2Switch)
    switch.thrift_port, switch.log_file = 9090, log_file
    switch.queue_commands = ("set_queue_depth 163 1", "set_queue_rate 4167 1")
    return switch


@pytest.fixture
def refusing_cli(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    sent: list[tuple[str, ...]] = []

    def refuse(commands: tuple[str, ...], port: int, cli: str) -> str:
        sent.append(tuple(commands))
        raise UserInputError(REFUSED)

    monkeypatch.setattr(emulation.fabric.bmv2_switch, "run_cli", refuse)
    return sent


def _log(lines: list[str]) -> SwitchLog:
    log = SwitchLog()
    log.tail.extend(lines)
    return log


def test_a_build_without_thrift_is_one_line_saying_so_from_its_console(
    refusing_cli: list[tuple[str, ...]],
) -> None:
    with pytest.raises(UserInputError) as caught:
        _switch().configure_queues(_log(NO_THRIFT_LOG))
    assert str(caught.value) == NO_THRIFT_ERROR
    assert "built without Thrift" in NO_THRIFT_ERROR and "--with-thrift" in NO_THRIFT_ERROR
    assert "\n" not in NO_THRIFT_ERROR
    assert refusing_cli == [_switch().queue_commands]


def test_a_build_without_thrift_is_found_in_its_log_file(
    refusing_cli: list[tuple[str, ...]], tmp_path: Path
) -> None:
    log_file = tmp_path / "chip.log"
    log_file.write_text("\n".join(NO_THRIFT_LOG) + "\n")
    with pytest.raises(UserInputError, match="built without Thrift"):
        _switch(str(log_file)).configure_queues(_log([]))


def test_any_other_cli_failure_is_the_cli_s_own_error(
    refusing_cli: list[tuple[str, ...]],
) -> None:
    # A bmv2 with Thrift whose CLI failed: no claim about the build.
    with pytest.raises(UserInputError) as caught:
        _switch().configure_queues(_log(NO_THRIFT_LOG[:3]))
    assert str(caught.value) == REFUSED


def test_no_thrift_reads_only_bmv2_s_warning() -> None:
    assert no_thrift(NO_THRIFT_LOG)
    assert not no_thrift(NO_THRIFT_LOG[:3])
    assert not no_thrift([])


def test_bmv2_without_a_log_file_logs_to_the_console_the_fabric_reads() -> None:
    switch = _switch()
    switch.device_id, switch.grpc_address, switch.log_level = 1, "127.0.0.1:9559", "info"
    switch.cable_interfaces, switch.ports = {}, {}
    argv = switch.command()
    assert "--log-console" in argv and argv.index("--log-console") < argv.index("--")
    switch.log_file = "/results/chip.log"
    assert "--log-console" not in switch.command()  # bmv2: the two are exclusive


@pytest.mark.root
def test_a_failed_cable_on_bmv2_is_its_veth_pair_down_until_up() -> None:
    # No bmv2 needed: the cable is two veths bmv2 would be attached to.
    import subprocess

    from emulation.housekeeping.prefixes import new_prefix

    prefix = new_prefix("cst")
    a, b = f"{prefix}p5", f"{prefix}p6"
    subprocess.run(["ip", "link", "add", a, "type", "veth", "peer", "name", b], check=True)
    try:
        for name in (a, b):
            subprocess.run(["ip", "link", "set", name, "up"], check=True)
        switch = _switch()
        switch.cable_interfaces = {5: a, 6: b}

        def flags(name: str) -> str:
            return (
                subprocess.run(
                    ["ip", "-o", "link", "show", name], capture_output=True, text=True, check=True
                )
                .stdout.split("<", 1)[1]
                .split(">", 1)[0]
            )

        switch.set_ports_enabled({5: "tor1-eth6", 6: "agg2-eth1"}, False)
        assert "UP" not in flags(a).split(",") and "UP" not in flags(b).split(",")
        switch.set_ports_enabled({5: "tor1-eth6", 6: "agg2-eth1"}, True)
        assert "UP" in flags(a).split(",") and "UP" in flags(b).split(",")
        with pytest.raises(UserInputError, match="chip port 7 is not a cable end"):
            switch.set_ports_enabled({7: "tor1-eth1"}, False)
    finally:
        subprocess.run(["ip", "link", "delete", a], capture_output=True)
