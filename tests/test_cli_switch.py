"""`cassini switch serve` as tools written for bmv2 start it: one switch per interface."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulation.netns import NetnsLab, leftovers

CASSINI = str(Path(sys.executable).parent / "cassini")
READY = re.compile(r"ready: device \d+, P4Runtime on (\S+)")


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


def start_switch(lab: NetnsLab, argv: list[str]) -> tuple[subprocess.Popen[str], list[str]]:
    """`cassini switch serve ARGV` until its ready line; returns it and its log so far."""
    process = lab.popen(
        None, [CASSINI, "switch", "serve", *argv], stderr=subprocess.PIPE, text=True
    )
    assert process.stderr is not None
    lines: list[str] = []
    for line in process.stderr:
        lines.append(line)
        if READY.search(line):
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
        timeout=30,
    )
    assert second.returncode == 2 and time.monotonic() - began < 10
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
    assert third.wait(10) == 0
