"""Mininet's CLI on the fabric, typed at a terminal (`cassini fabric up --cli` on a pty).

One small fabric serves the module's tests in order, as one user's session
would: a link cut and restored, `dpctl`, `switch`, `iperf`/`iperfudp`, Ctrl-C
during a host command, and Ctrl-C twice at the prompt, which ends the
session and must leave nothing behind.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulation.housekeeping.prefixes import new_prefix
from tests.emulation.pty_session import PtySession
from tests.helpers.leftovers import cleanup_all, leftovers
from topologies.chip_mapping import forwarding_entries, map_to_chip
from topologies.library import load_topology
from topologies.routing import Router

SMALL = "leaf-spine:2:2:2"  # 4 servers, s01..s04; s01 and s02 under leaf1
PROMPT = r"mininet> "

pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
def cli() -> Iterator[tuple[PtySession, str]]:
    """The session and its prefix; whatever the prefix names afterwards fails the module."""
    prefix = new_prefix("cas")
    session = PtySession(
        [sys.executable, "-m", "emulation", "fabric", "up", "-t", SMALL, "--scale", "0.01",
         "--cli", "--grpc-server-addr", "127.0.0.1:0", "--prefix", prefix],
        cwd=str(Path(__file__).resolve().parents[3]),
    )  # fmt: skip
    try:
        session.expect(PROMPT, 120)
        yield session, prefix
    finally:
        session.close()
        left = leftovers(prefix)
        cleanup_all(prefix)
        assert left == []


def _command(session: PtySession, line: str, timeout: float = 20.0) -> str:
    """Type `line`; what it printed up to the next prompt."""
    session.send(line + "\n")
    start = session.seen
    session.expect(PROMPT, timeout)
    return session.output[start : session.seen]


def test_link_down_then_up_gives_the_host_its_reachability_back(
    cli: tuple[PtySession, str],
) -> None:
    session, _ = cli
    _command(session, "link s01 chip down")
    _command(session, "link s01 chip up")
    shown = _command(session, "s01 ping -c1 -W2 s04")
    assert "1 packets transmitted, 1 received" in shown, shown
    assert "PERMANENT" in _command(session, "s01 ip neigh show 10.0.0.4")


def test_a_failed_logical_link_stops_the_pairs_routed_over_it_until_it_is_up(
    cli: tuple[PtySession, str],
) -> None:
    session, _ = cli
    router = Router(load_topology(SMALL))
    spine = router.path("s01", "s03")[2]  # the link leaf1 <-> spine the chip routes s01->s03 on
    nodes = _command(session, "nodes")
    assert all(n in nodes.split() for n in ("chip", "leaf1", "leaf2", "spine1", "spine2", "s01"))
    shown = _command(session, 'py net["leaf1"]')
    assert "<LogicalSwitch leaf1: chip ports leaf1-eth1:" in shown, shown
    down = _command(session, f"link leaf1 {spine} down")
    assert re.search(rf"leaf1-eth\d \(chip port \d+\) <-> {spine}-eth\d .*: down", down), down
    # The entries are static (no control plane reacts to a link's state): a pair whose
    # path crosses the link stops, a pair whose paths do not goes on.
    assert " 0 received" in _command(session, "s01 ping -c2 -W1 s03", timeout=30)
    crossing = {("leaf1", spine), (spine, "leaf1")}
    spared = [
        (a, b)
        for a, b in (("s01", "s02"), ("s01", "s04"), ("s02", "s04"), ("s02", "s03"))
        if not crossing & set(router.path_links(router.path(a, b)) + router.path_links(
            router.path(b, a)))
    ]  # fmt: skip
    assert ("s01", "s02") in spared
    for a, b in spared:
        assert "1 received" in _command(session, f"{a} ping -c1 -W2 {b}"), (a, b)
    refused = _command(session, "link leaf1 leaf2 down")
    assert "no link between leaf1 and leaf2" in refused and "Traceback" not in refused
    assert ": up" in _command(session, f"link leaf1 {spine} up")
    assert "1 received" in _command(session, "s01 ping -c1 -W2 s03")


def test_dpctl_dump_flows_lists_the_p4_tables_and_other_commands_say_they_do_not_apply(
    cli: tuple[PtySession, str],
) -> None:
    session, _ = cli
    topo = load_topology(SMALL)
    chip = map_to_chip(topo)
    shown = _command(session, "dpctl dump-flows")
    forwarding = len(forwarding_entries(topo, chip))
    wred = len(chip.switch_of_port)  # one WRED profile per chip port
    assert f"{forwarding + wred} entries (all tables, device 1)" in shown, shown
    assert len(re.findall(r"^logical_forward ingress_port=\d+ dst_mac=", shown, re.M)) == forwarding
    assert "Traceback" not in shown
    one_table = _command(session, "dpctl dump-flows wred_profile")
    assert f"{wred} entries (table wred_profile, device 1)" in one_table, one_table
    assert "does not apply to a P4 switch" in _command(session, "dpctl show")
    stopped = _command(session, "switch chip stop")
    assert "switch: does not apply to the P4 chip" in stopped, stopped
    # The chip still forwards: `switch chip stop` did not stop it.
    assert "1 received" in _command(session, "s01 ping -c1 -W2 s03")


def test_iperf_and_iperfudp_report_rates_in_bounded_time_and_spare_other_iperfs(
    cli: tuple[PtySession, str],
) -> None:
    session, _ = cli
    # Someone else's iperf on this machine: Mininet's `killall -9 iperf` killed it.
    bystander = subprocess.Popen(
        ["iperf", "-s", "-p", "5997"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        began = time.monotonic()
        tcp = _command(session, "iperf s01 s04", timeout=80)
        rates = r"'[\d.]+ \w+/sec'"
        assert re.search(rf"\*\*\* Results: \[{rates}, {rates}\]", tcp), tcp
        udp = _command(session, "iperfudp 10M s01 s03", timeout=80)
        assert re.search(rf"\*\*\* Results: \['10M', {rates}, {rates}\]", udp), udp
        assert time.monotonic() - began < 80  # 5 s each, plus starting and stopping
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_ctrl_c_during_a_host_command_interrupts_only_the_command(
    cli: tuple[PtySession, str],
) -> None:
    session, _ = cli
    session.send("s01 sleep 30\n")
    time.sleep(1.5)
    began = time.monotonic()
    session.send("\x03")
    session.expect(PROMPT, 25)
    assert time.monotonic() - began < 28.5 / 2  # not when `sleep 30` ends by itself
    assert "interrupted" not in session.output
    assert "alive-2" in _command(session, "s01 echo alive-$((1+1))")


def test_ctrl_c_twice_at_the_prompt_ends_the_session_and_tears_down(
    cli: tuple[PtySession, str],
) -> None:
    session, prefix = cli
    session.send("\x03")
    session.expect("Ctrl-C again at the prompt, or exit, ends the session", 10)
    session.send("\x03")
    assert session.wait(60) == 130
    assert f"SIGINT after bring-up; fabric {prefix} down" in session.output
    assert leftovers(prefix) == []


def test_the_projects_mn_builds_our_network_and_cli_so_iperf_is_ours_too() -> None:
    root = Path(__file__).resolve().parents[3]
    mn = Path(sys.executable).parent / "mn"  # the venv's (PyPI's mininet, a dependency)
    # Only once the network is ours does the session go on to iperf: Mininet's own
    # runs `killall -9 iperf` on the whole machine.
    stdin = "py type(net).__name__\npy type(net).iperf.__module__\n"
    first = subprocess.run(
        [str(mn), "--custom", str(root / "emulation" / "fabric" / "mn_custom.py"),
         "--topo", f"cassini,{SMALL},0.01", "--switch", "cassini", "--controller", "none"],
        input=stdin + "exit\n", capture_output=True, text=True, timeout=120, cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )  # fmt: skip
    shown = first.stdout + first.stderr
    assert first.returncode == 0, shown
    assert "CassiniNet" in shown and "emulation.fabric.mininet_net" in shown, shown
    second = subprocess.run(
        first.args, input="iperf s01 s04\ndpctl dump-flows\nexit\n", capture_output=True,
        text=True, timeout=120, cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
    )  # fmt: skip
    shown = second.stdout + second.stderr
    assert second.returncode == 0, shown
    assert re.search(r"\*\*\* Results: \['[\d.]+ \w+/sec', '[\d.]+ \w+/sec'\]", shown), shown
    assert re.search(r"\d+ entries \(all tables, device 1\)", shown), shown
