"""NetnsLab builds working hosts and always removes them; `cassini clean` finds leftovers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulation.fabric import netns
from emulation.fabric.netns import NetnsLab
from emulation.housekeeping import clean
from emulation.housekeeping.prefixes import new_prefix
from emulation.housekeeping.run_files import ProcessId, runs
from emulation.softswitch.processes import BMV2_PROCESS
from tests.helpers import CASSINI
from tests.helpers.leftovers import cleanup_all, leftovers
from topologies.errors import UserInputError

pytestmark = pytest.mark.root


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


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_lab_cleans_up_on_ctrl_c_and_sigterm(prefix: str, signum: int) -> None:
    script = (
        "import sys, time\n"
        "from emulation.fabric.netns import NetnsLab\n"
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

    # No run file claims these (a run of an older version): only --all removes them.
    kept = subprocess.run(
        [CASSINI, "clean", "--prefix", prefix], capture_output=True, text=True, check=True
    )
    assert "0 item(s) removed" in kept.stdout and leftovers(prefix) == found
    dry = subprocess.run(
        [CASSINI, "clean", "--all", "--prefix", prefix, "--dry-run"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert f"would remove netns {ns}" in dry.stdout
    assert leftovers(prefix) == found

    result = subprocess.run(
        [CASSINI, "clean", "--all", "--prefix", prefix], capture_output=True, text=True, check=True
    )
    assert f"removed netns {ns}" in result.stdout
    assert f"removed process {sleeper.pid} (in {ns})" in result.stdout
    assert sleeper.wait(5) is not None
    deadline = time.monotonic() + 3
    while leftovers(prefix) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert leftovers(prefix) == []


# --- run files: `cassini clean` removes only runs whose owner is gone ---------------

OWNER_SCRIPT = (
    "import sys, time\n"
    "from emulation.fabric.netns import NetnsLab\n"
    "with NetnsLab(sys.argv[1]) as lab:\n"
    "    ns = lab.namespace('n')\n"
    "    lab.veth('n', 'r', ns_a=ns)\n"
    "    lab.popen(ns, ['sleep', '60'])\n"
    "    print(lab.tempdir('logs'), flush=True)\n"
    "    time.sleep(60)\n"
)


@pytest.fixture
def owner(prefix: str) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """A run in another process: a namespace, a veth, a process and a folder."""
    process = subprocess.Popen(
        [sys.executable, "-c", OWNER_SCRIPT, prefix], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        folder = Path(process.stdout.readline().strip())
        assert folder.is_dir()
        yield process, folder
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        cleanup_all(prefix)


def _clean(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CASSINI, "clean", *args], capture_output=True, text=True, timeout=60)


def test_clean_leaves_a_live_run_alone(
    prefix: str, owner: tuple[subprocess.Popen[str], Path]
) -> None:
    process, folder = owner
    before = leftovers(prefix)
    assert f"netns {prefix}n" in before and f"link {prefix}r" in before
    dry = _clean("--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"run {prefix}: owner pid {process.pid} (" in dry.stdout
    line = next(ln for ln in dry.stdout.splitlines() if ln.startswith(f"run {prefix}:"))
    assert ", alive; left alone:" in line and f"netns {prefix}n" in line
    result = _clean()  # the default prefixes cover this run: it must survive
    assert result.returncode == 0, result.stderr
    assert prefix not in result.stdout
    assert leftovers(prefix) == before and folder.is_dir() and process.poll() is None


def test_clean_removes_a_run_whose_owner_was_sigkilled(
    prefix: str, owner: tuple[subprocess.Popen[str], Path]
) -> None:
    process, folder = owner
    process.kill()
    process.wait()
    assert f"netns {prefix}n" in leftovers(prefix)  # SIGKILL leaves everything behind
    dry = _clean("--prefix", prefix, "--dry-run")
    assert f"owner pid {process.pid} (" in dry.stdout and ", gone; would remove:" in dry.stdout
    assert f"folder {folder}" in dry.stdout
    result = _clean("--prefix", prefix)
    assert result.returncode == 0, result.stderr
    assert f"removed netns {prefix}n" in result.stdout
    assert f"removed folder {folder}" in result.stdout
    assert leftovers(prefix) == [] and not folder.exists()
    assert runs((prefix,)) == []


def test_clean_all_removes_a_live_run(
    prefix: str, owner: tuple[subprocess.Popen[str], Path]
) -> None:
    _, folder = owner
    result = _clean("--all", "--prefix", prefix)
    assert result.returncode == 0, result.stderr
    assert f"removed netns {prefix}n" in result.stdout
    assert leftovers(prefix) == [] and not folder.exists()


@pytest.mark.parametrize("bad", ["", "c", "ca", "eth", "veth", "cas-1", "lo"])
def test_clean_refuses_empty_short_or_foreign_prefixes(bad: str) -> None:
    result = _clean("--prefix", bad, "--dry-run")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"cassini: error: --prefix {bad!r}: must start with cas or cst and hold only "
        "letters and digits (this project creates nothing else)"
    ]


def test_a_reused_pid_does_not_keep_a_dead_run_alive() -> None:
    me = ProcessId.of(os.getpid())
    assert me is not None and me.alive()
    assert not ProcessId(me.pid, me.start + 1).alive()  # same pid, another process


def test_a_second_lab_on_a_prefix_in_use_is_refused_at_once(prefix: str) -> None:
    with NetnsLab(prefix) as lab:
        lab.namespace("a")
        began = time.monotonic()
        with pytest.raises(UserInputError, match=f"prefix {prefix} is in use by a running process"):
            NetnsLab(prefix).namespace("b")
        # Refused by its check, not after waiting for anything: well under a second
        # idle, and a tenth of a minute still allows for a busy machine.
        assert time.monotonic() - began < 10
        assert leftovers(prefix) == [f"netns {prefix}a"]
    assert leftovers(prefix) == []


# --- recorded before created ------------------------------------------------------


def test_a_veth_interrupted_right_after_creation_is_removed(
    prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_ip = netns.ip_command

    def ip_then_interrupt(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = real_ip(*args, check=check)
        if args[:2] == ("link", "add"):
            raise KeyboardInterrupt  # as a SIGINT/SIGTERM landing right after creation
        return result

    monkeypatch.setattr(netns, "ip_command", ip_then_interrupt)
    with pytest.raises(KeyboardInterrupt), NetnsLab(prefix) as lab:
        lab.veth("a", "b")
    monkeypatch.undo()
    assert leftovers(prefix) == []


def test_cleanup_tolerates_recorded_names_that_were_never_created(
    prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_ip = netns.ip_command

    def interrupt_before(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        if args[:2] in (("link", "add"), ("netns", "add")):
            raise KeyboardInterrupt
        return real_ip(*args, check=check)

    monkeypatch.setattr(netns, "ip_command", interrupt_before)
    for build in (lambda lab: lab.veth("a", "b"), lambda lab: lab.namespace("n")):
        with pytest.raises(KeyboardInterrupt), NetnsLab(prefix) as lab:
            build(lab)
        assert runs((prefix,)) == []
    monkeypatch.undo()
    assert leftovers(prefix) == []


def test_a_mac_with_a_trailing_newline_is_refused(prefix: str) -> None:
    with NetnsLab(prefix) as lab, pytest.raises(ValueError, match="is not six hex pairs"):
        lab.veth("a", "b", mac_a="02:00:00:00:00:01\n")
    assert leftovers(prefix) == []


def test_a_bmv2_on_our_interfaces_is_a_leftover_and_cleaned(prefix: str) -> None:
    """bmv2 as the fabric's switch runs as `simple_switch_grpc -i PORT@IFACE ...`."""
    code = "import time; time.sleep(60)"
    real_python = os.path.realpath(sys.executable)  # not a shim that re-executes itself
    fake = subprocess.Popen(
        ["bash", "-c", f'exec -a {BMV2_PROCESS} {real_python} -c "{code}" -i 1@{prefix}p1']
    )
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and f"process {fake.pid}" not in leftovers(prefix):
            time.sleep(0.05)
        assert f"process {fake.pid}" in leftovers(prefix)
        # Which programs count is the caller's to say: without a match, none do.
        assert f"process {fake.pid}" not in clean.leftovers(prefix)
        assert f"process {fake.pid}" in cleanup_all(prefix)
        assert fake.wait(5) is not None
        assert leftovers(prefix) == []
    finally:
        if fake.poll() is None:
            fake.kill()


@pytest.mark.root
def test_a_lab_folder_is_owner_only_unguessable_and_recorded() -> None:
    import stat

    with netns.NetnsLab() as lab:
        folder = lab.tempdir("logs")
        mode = stat.S_IMODE(folder.stat().st_mode)
        assert mode == 0o700 and folder.stat().st_uid == os.getuid()
        assert folder.name.startswith(f"{lab.prefix}-logs-")
        # mkdtemp's suffix: 8 characters from 37, against the 6 hex digits (24 bits) before.
        assert len(folder.name) - len(f"{lab.prefix}-logs-") >= 8
        assert str(folder) in lab.claim().record.folders  # in the run file: clean finds it
    assert not folder.exists()
