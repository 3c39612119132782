"""Small things a new user met on the command line (issue: a Mininet user's habits).

`program --dry-run` says how many entries it did not show; a busy P4Runtime
port is one line naming the address; `switch serve` on port 0 prints the
port it bound; `make p4`'s hint names what exists; `cassini clean` removes
lock files; the custom file refuses the wrong `mn` before Mininet's cleanup.
"""

from __future__ import annotations

import os
import re
import select
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from emulation.cli import main


def test_program_dry_run_counts_the_entries_it_does_not_show(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Nothing listens on port 1: the dry run plans against an empty device.
    code = main(
        ["program", "-t", "cassini-testbed", "--dry-run", "--grpc", "127.0.0.1:1", "--timeout", "1"]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    shown = [line for line in out.splitlines() if line.startswith("  + logical_forward")]
    assert len(shown) == 3
    # 1,656 forwarding and 72 WRED entries are inserted; 3 are shown.
    assert "  + ... and 1,725 more" in out, out


DEBIAN_MN = Path("/usr/bin/mn")
DEBIAN_PYTHON = Path("/usr/bin/python3")
ROOT = Path(__file__).resolve().parents[2]  # the checkout these tests belong to
CASSINI = [sys.executable, "-m", "emulation"]  # run from ROOT: this checkout's code
MN_CUSTOM = ROOT / "emulation" / "fabric" / "mn_custom.py"
# Debian's mn, run as `mn --custom` runs it, with Mininet's global cleanup replaced by a
# marker: the real one kills every Mininet process on the machine.
_DEBIAN_MN_DRIVER = """
import runpy, sys
import mininet.clean
mininet.clean.cleanup = lambda: print("MININET-GLOBAL-CLEANUP", flush=True)
sys.argv = ["mn", "--custom", sys.argv[1], "--topo", "cassini", "--switch", "cassini",
            "--controller", "none", "--test", "none"]
runpy.run_path("/usr/bin/mn", run_name="__main__")
"""


@pytest.mark.root
def test_debian_mn_with_the_custom_file_stops_before_mininets_cleanup(tmp_path: Path) -> None:
    driver = tmp_path / "debian_mn.py"
    driver.write_text(_DEBIAN_MN_DRIVER)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [str(DEBIAN_PYTHON), str(driver), str(MN_CUSTOM)],
        capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env,
    )  # fmt: skip
    shown = result.stdout + result.stderr
    assert "MININET-GLOBAL-CLEANUP" not in shown, shown
    assert result.returncode == 1, shown
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, shown
    assert "cannot import the project" in lines[0]
    assert f"{ROOT / '.venv' / 'bin' / 'mn'} --custom" in lines[0]


@pytest.mark.root
def test_a_busy_p4runtime_port_is_one_line_naming_the_address(prefix: str) -> None:
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    address = f"127.0.0.1:{busy.getsockname()[1]}"
    try:
        for _ in range(3):  # the traceback came in 3 of 4 tries: a race with the exit
            result = subprocess.run(
                [*CASSINI, "fabric", "up", "-t", "leaf-spine:1:1:2", "--scale", "0.01", "--check",
                 "--grpc-server-addr", address, "--prefix", prefix],
                capture_output=True, text=True, timeout=120, cwd=ROOT,
            )  # fmt: skip
            errors = [line for line in result.stderr.splitlines() if " INFO " not in line]
            assert result.returncode == 2, result.stderr
            assert "Traceback" not in result.stderr, result.stderr
            assert len(errors) == 1, errors
            assert errors[0].startswith(f"cassini: error: cannot listen for P4Runtime on {address}")
    finally:
        busy.close()


@pytest.mark.root
def test_switch_serve_on_port_0_prints_the_port_it_bound(prefix: str) -> None:
    a, b = f"{prefix}a", f"{prefix}b"
    subprocess.run(["ip", "link", "add", a, "type", "veth", "peer", "name", b], check=True)
    serving = subprocess.Popen(
        [*CASSINI, "switch", "serve", "-i", f"1@{a}", "--grpc-server-addr", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
    )  # fmt: skip
    try:
        assert serving.stdout is not None
        ready, _, _ = select.select([serving.stdout], [], [], 30)
        line = serving.stdout.readline() if ready else "(nothing printed in 30 s)"
        found = re.fullmatch(r"P4Runtime on 127\.0\.0\.1:(\d+) \(device 1\)\n", line)
        assert found, line
        port = int(found.group(1))
        assert port != 0
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # the printed port is the one that answers
    finally:
        serving.terminate()
        serving.wait(30)
        subprocess.run(["ip", "link", "delete", a], capture_output=True)


def test_make_p4_without_p4c_names_where_p4c_comes_from(tmp_path: Path) -> None:
    # A PATH with only what the script needs besides a compiler.
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("dirname", "mkdir"):
        (tools / tool).symlink_to(shutil.which(tool) or f"/usr/bin/{tool}")
    result = subprocess.run(
        ["/bin/bash", str(ROOT / "scripts" / "build_p4.sh"), "bmv2"],
        capture_output=True, text=True, timeout=30, env={"PATH": str(tools)},
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    hint = next(line for line in result.stderr.splitlines() if "not found: p4c" in line)
    # Debian has no p4lang-p4c package: the hint says where that name exists and what
    # to do on Debian.
    assert "packaged as p4lang-p4c" not in hint
    assert "neither Debian nor PyPI has it" in hint
    assert "on Ubuntu, p4lang's own apt repository" in hint and "p4lang-p4c" in hint
    assert "on Debian build p4c from its sources" in hint


def test_cassini_clean_removes_interface_locks_no_process_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from emulation.housekeeping.clean import clean
    from emulation.housekeeping.run_files import InterfaceLocks
    from emulation.softswitch.processes import is_switch_process

    monkeypatch.setenv("CASSINI_RUN_DIR", str(tmp_path))
    netns = os.stat("/proc/self/ns/net").st_ino
    stale = tmp_path / f"iface-{netns}-cas9f9fp1.lock"  # a switch killed outright left it
    stale.write_text("pid 1 (python -m emulation switch serve -i 1@cas9f9fp1)\n")
    # A switch on the user's own veths, killed during a run, left this: gone too.
    other = tmp_path / f"iface-{netns}-veth7.lock"
    other.write_text("pid 2 (cassini switch serve -i 1@veth7 -i 2@veth8)\n")
    foreign = tmp_path / f"iface-{netns}-veth9.lock"  # no switch of ours wrote it
    foreign.write_text("someone else's\n")
    with InterfaceLocks(["cas9f9fp2"]):  # a live switch's lock
        held = tmp_path / f"iface-{netns}-cas9f9fp2.lock"
        assert held.exists()
        assert main(["clean", "--prefix", "cas9f9f", "--dry-run"]) == 0
        shown = capsys.readouterr().out
        assert f"would remove lock {stale} (no process holds it)" in shown, shown
        assert f"would remove lock {other} (no process holds it)" in shown, shown
        assert str(held) not in shown and str(foreign) not in shown
        assert stale.exists()  # a dry run removes nothing
        removed = clean(("cas9f9f",), processes=is_switch_process)
        assert sorted(removed) == sorted([f"lock {stale}", f"lock {other}"])
        assert not stale.exists() and not other.exists()
        assert held.exists() and foreign.exists()
