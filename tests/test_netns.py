"""NetnsLab builds working hosts and always removes them; `cassini clean` finds leftovers."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulation.netns import NetnsLab, cleanup_all, leftovers, new_prefix

pytestmark = pytest.mark.root
CASSINI = str(Path(sys.executable).parent / "cassini")


@pytest.fixture
def prefix() -> Iterator[str]:
    name = new_prefix()
    try:
        yield name
    finally:
        leftover = leftovers(name)
        cleanup_all(name)
        assert leftover == []


def test_lab_builds_reachable_hosts_and_removes_them(prefix: str) -> None:
    with NetnsLab(prefix) as lab:
        a = lab.namespace("a")
        b = lab.namespace("b")
        if_a, if_b = lab.veth(
            "a",
            "b",
            ns_a=a,
            ns_b=b,
            mac_a="02:00:00:00:aa:01",
            ip_a="10.9.0.1/24",
            ip_b="10.9.0.2/24",
        )
        assert lab.run(a, ["ping", "-c", "1", "-W", "2", "10.9.0.2"], check=False).returncode == 0
        link = lab.run(a, ["ip", "link", "show", if_a]).stdout
        assert "02:00:00:00:aa:01" in link
        features = lab.run(b, ["ethtool", "-k", if_b]).stdout
        assert "tx-checksumming: off" in features
        assert "generic-receive-offload: off" in features
        assert sorted(leftovers(prefix)) == [f"netns {a}", f"netns {b}"]
    assert leftovers(prefix) == []


def test_lab_cleans_up_after_an_exception(prefix: str) -> None:
    with pytest.raises(RuntimeError, match="boom"), NetnsLab(prefix) as lab:
        ns = lab.namespace("x")
        lab.veth("x", "y", ns_a=ns)
        lab.popen(ns, ["sleep", "30"])
        assert len(leftovers(prefix)) == 2  # the namespace and the root-side veth end
        raise RuntimeError("boom")
    assert leftovers(prefix) == []


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_lab_cleans_up_on_ctrl_c_and_sigterm(prefix: str, signum: int) -> None:
    script = (
        "import sys, time\n"
        "from emulation.netns import NetnsLab\n"
        "with NetnsLab(sys.argv[1]) as lab:\n"
        "    ns = lab.namespace('n')\n"
        "    lab.veth('n', 'r', ns_a=ns)\n"
        "    lab.popen(ns, ['sleep', '30'])\n"
        "    print('ready', flush=True)\n"
        "    time.sleep(30)\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script, prefix],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        assert len(leftovers(prefix)) == 2
        process.send_signal(signum)
        process.wait(10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert leftovers(prefix) == []


def test_cleanup_all_removes_what_a_crashed_run_left(prefix: str) -> None:
    ns = prefix + "old"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    subprocess.run(
        ["ip", "link", "add", prefix + "v0", "type", "veth", "peer", "name", prefix + "v1"],
        check=True,
    )
    sleeper = subprocess.Popen(["ip", "netns", "exec", ns, "sleep", "30"])
    time.sleep(0.1)
    found = leftovers(prefix)
    assert f"netns {ns}" in found and f"link {prefix}v0" in found and f"link {prefix}v1" in found

    dry = subprocess.run(
        [CASSINI, "clean", "--prefix", prefix, "--dry-run"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert f"would remove netns {ns}" in dry.stdout
    assert leftovers(prefix) == found

    result = subprocess.run(
        [CASSINI, "clean", "--prefix", prefix], capture_output=True, text=True, check=True
    )
    assert f"removed netns {ns}" in result.stdout
    assert f"removed process {sleeper.pid} (in {ns})" in result.stdout
    assert sleeper.wait(5) is not None
    deadline = time.monotonic() + 3
    while leftovers(prefix) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert leftovers(prefix) == []
