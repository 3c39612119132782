"""`cassini switch serve` as tools written for bmv2 start it: one switch per interface."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulation.fabric.netns import NetnsLab
from emulation.housekeeping.run_files import InterfaceLocks
from emulation.softswitch.switch import READY_PATTERN
from tests.helpers import CASSINI
from tests.helpers.leftovers import leftovers
from tests.helpers.waiting import WAIT_S


@pytest.fixture
def ports() -> Iterator[tuple[NetnsLab, list[str]]]:
    """Two veths whose root ends a switch can attach."""
    lab = NetnsLab()
    try:
        ends = []
        for i in (1, 2):
            ns = lab.namespace(f"h{i}")
            ends.append(lab.veth(f"h{i}", f"s{i}", ns_a=ns)[1])
        yield lab, ends
    finally:
        lab.close()
        assert leftovers(lab.prefix) == []


def start_switch(
    lab: NetnsLab, argv: list[str], new_session: bool = False
) -> tuple[subprocess.Popen[str], list[str]]:
    """`cassini switch serve ARGV` until its ready line; returns it and its log so far."""
    process = lab.popen(
        None,
        [CASSINI, "switch", "serve", *argv],
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=new_session,
    )
    assert process.stderr is not None
    lines: list[str] = []
    for line in process.stderr:
        lines.append(line)
        if READY_PATTERN.search(line):
            return process, lines
    raise AssertionError("switch did not start:\n" + "".join(lines))


@pytest.mark.root
def test_a_second_switch_on_an_interface_is_refused_until_the_first_dies(
    ports: tuple[NetnsLab, list[str]],
) -> None:
    lab, (a, b) = ports
    first, _ = start_switch(
        lab, ["-i", f"1@{a}", "-i", f"2@{b}", "--grpc-server-addr", "127.0.0.1:0"]
    )
    began = time.monotonic()
    second = subprocess.run(
        [CASSINI, "switch", "serve", "-i", f"5@{b}", "--grpc-server-addr", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    # Refused, not waiting for the lock (which would last until the first dies): its
    # own start-up and the refusal take a few seconds even beside busy processes.
    assert second.returncode == 2 and time.monotonic() - began < 60
    assert (
        second.stderr.strip()
        .splitlines()[-1]
        .startswith(
            f"cassini: error: interface {b} is already attached to a switch: pid {first.pid} ("
        )
    )
    first.kill()  # SIGKILL: the kernel releases the lock with the process
    first.wait()
    third, _ = start_switch(lab, ["-i", f"1@{b}", "--grpc-server-addr", "127.0.0.1:0"])
    third.send_signal(signal.SIGTERM)
    assert third.wait(WAIT_S) == 0


@pytest.mark.root
def test_bmv2_syntax_starts_the_switch_and_names_what_it_ignores(
    ports: tuple[NetnsLab, list[str]], tmp_path: Path
) -> None:
    lab, (a, b) = ports
    json_config = tmp_path / "cassini.json"
    json_config.write_text("{}")
    argv = [
        "--device-id", "2", "-i", f"1@{a}", "-i", f"2@{b}", "--no-p4", "--thrift-port", "9090",
        "--log-console", "-L", "trace", str(json_config),
        "--", "--grpc-server-addr", "127.0.0.1:0", "--cpu-port", "64",
    ]  # fmt: skip
    process, lines = start_switch(lab, argv)
    try:
        ignored = [line for line in lines if "ignored (simple_switch_grpc options" in line]
        assert len(ignored) == 1
        for name in (f"JSON {json_config}", "--no-p4", "--thrift-port 9090", "--log-console",
                     "--cpu-port 64"):  # fmt: skip
            assert name in ignored[0]
        assert READY_PATTERN.search(lines[-1]).group(1).startswith("127.0.0.1:")  # type: ignore[union-attr]
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(WAIT_S) == 0


def test_the_shipped_tm_example_loads_and_the_readme_documents_it() -> None:
    from importlib.resources import files

    from emulation.softswitch.tm_config import PortSettings, load_tm_config

    example = files("emulation.softswitch") / "data" / "tm-example.yaml"
    tm = load_tm_config(str(example))
    assert tm.ports == {2: PortSettings(rate_gbps=0.05, queue_cells=5000)}
    assert tm.pfc.xoff_cells == 4000 and tm.cell_bytes == 80
    readme = (Path(__file__).resolve().parents[2] / "emulation/softswitch/README.md").read_text()
    assert "--tm-config emulation/softswitch/data/tm-example.yaml" in readme
    for line in example.read_text().splitlines():
        if line and not line.startswith("#"):
            assert f"    {line}" in readme, line  # the README shows the file as shipped


@pytest.mark.root
def test_sighup_stops_the_switch_as_sigterm_does_and_leaves_no_lock_files(
    ports: tuple[NetnsLab, list[str]],
) -> None:
    """`switch serve` had no SIGHUP handler: a closed terminal killed it, leaving its
    interface lock files."""
    lab, (a, b) = ports
    locks = [InterfaceLocks._path(name) for name in (a, b)]
    process, _ = start_switch(
        lab, ["-i", f"1@{a}", "-i", f"2@{b}", "--grpc-server-addr", "127.0.0.1:0"], True
    )
    assert all(lock.exists() for lock in locks)
    os.killpg(process.pid, signal.SIGHUP)  # as a closed terminal: the group
    assert process.wait(WAIT_S) == 0
    assert process.stderr is not None
    assert "stopped in" in process.stderr.read()
    assert not any(lock.exists() for lock in locks)
