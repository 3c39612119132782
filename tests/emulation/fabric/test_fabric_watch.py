"""A fabric whose switch process dies must say so, not keep claiming it is up.

The description of a dead process is pure and tested on its own; the root
tests kill the real switch of a small fabric with SIGKILL, through the
library and through `cassini fabric up`, and check that the failure names
the process and the signal and that nothing with the fabric's prefix is left.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from emulation.fabric.emulated import EmulatedFabric
from emulation.fabric.options import FabricOptions
from emulation.fabric.switch_log import describe_exit
from tests.helpers import CASSINI
from tests.helpers.leftovers import leftovers
from topologies.library import load_topology

TOPOLOGY = "leaf-spine:2:1:2"  # 4 servers: quick to bring up and tear down


# --- the description (pure) -----------------------------------------------------


def test_a_signal_is_named_and_numbered() -> None:
    text = describe_exit("the software switch process", 4242, -signal.SIGKILL, ["a", "", "b"])
    assert text.splitlines() == [
        "the software switch process (pid 4242) was killed by SIGKILL (signal 9); last log lines:",
        "  a",
        "  b",
        "so: the software switch process (pid 4242) was killed by SIGKILL (signal 9)",
    ]  # the cause is the last line on screen too, not the switch's tenth log line


def test_an_exit_code_is_quoted_with_the_last_log_lines_only() -> None:
    log = [f"line {i}" for i in range(30)]
    text = describe_exit("the switch", 7, 3, log, lines=2)
    assert text == (
        "the switch (pid 7) exited with code 3; last log lines:\n  line 28\n  line 29\n"
        "so: the switch (pid 7) exited with code 3"
    )
    assert (
        describe_exit("the switch", 7, 0) == "the switch (pid 7) exited with code 0 (no log output)"
    )
    assert "unknown signal (signal 200)" in describe_exit("the switch", 7, -200)


def test_a_fabric_that_never_started_reports_no_failure() -> None:
    fabric = EmulatedFabric(load_topology(TOPOLOGY), FabricOptions(scale=0.01))
    assert fabric.switch_pid is None
    assert fabric.switch_failure() is None


# --- a real switch, killed ------------------------------------------------------


def _argv_of(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")


def _kill_switch(pid: int, prefix: str) -> None:
    """SIGKILL the switch, after checking that the pid is this fabric's switch."""
    argv = _argv_of(pid)
    assert "serve" in argv and any(a.split("@")[-1].startswith(prefix) for a in argv), argv
    os.kill(pid, signal.SIGKILL)


@pytest.mark.root
def test_the_library_reports_a_killed_switch(prefix: str) -> None:
    options = FabricOptions(scale=0.01, prefix=prefix)
    with EmulatedFabric(load_topology(TOPOLOGY), options) as fabric:
        pid = fabric.switch_pid
        assert pid is not None and fabric.switch_failure() is None
        _kill_switch(pid, prefix)
        deadline = time.monotonic() + 5.0
        while fabric.switch_failure() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        failure = fabric.switch_failure()
        assert failure is not None
        assert failure.startswith(f"the software switch process (pid {pid}) was killed by SIGKILL")
        assert "last log lines:\n" in failure  # the switch's last words are quoted
        assert fabric.ping([("s01", "s04")], wait_s=0.5)[("s01", "s04")] is None
    assert leftovers(prefix) == []


@pytest.mark.root
def test_cli_fabric_up_exits_when_its_switch_is_killed(prefix: str) -> None:
    process = subprocess.Popen(
        [
            CASSINI, "fabric", "up", "-t", TOPOLOGY, "--scale", "0.01",
            "--grpc-server-addr", "127.0.0.1:0", "--prefix", prefix,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        lines = []
        for line in process.stdout:
            lines.append(line)
            if line.startswith("up;"):
                break
        head = "".join(lines)
        match = re.search(r"switch process: pid (\d+)", head)
        assert match, head
        pid = int(match.group(1))
        _kill_switch(pid, prefix)
        killed = time.monotonic()
        out, err = process.communicate(timeout=120)
        took = time.monotonic() - killed
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 1, (out, err)
    # It looks at its switch every 0.2 s; cleaning up the fabric is most of the time, a
    # few seconds idle and several beside busy processes. It never exited before.
    assert took < 60, f"fabric up needed {took:.1f} s to notice and clean up"
    assert f"the software switch process (pid {pid}) was killed by SIGKILL (signal 9)" in err
    assert f"fabric {prefix}:" in err and "Traceback" not in err
    assert f"fabric {prefix} down" in out
    assert leftovers(prefix) == []
