"""The fabric as a Mininet network: its Topo, its CLI, its classes from Python.

`EmulatedFabric` builds a `mininet.net.Mininet` whose hosts are the
topology's servers (named namespaces, static ARP, ECN on) and whose one
switch is the chip; the e2e file checks forwarding, this one the Mininet
side: `fabric.net`, `cassini fabric up --cli` fed on stdin, and bmv2 where
it is installed.
"""

from __future__ import annotations

import subprocess

import pytest

from emulation.fabric import EmulatedFabric
from emulation.mininet_net import CHIP, Bmv2Switch, CassiniTopo, bmv2_available
from tests.helpers import CASSINI
from topologies.addressing import SERVER_PREFIX_LEN
from topologies.chip_mapping import map_to_chip
from topologies.library import load_topology

SMALL = "leaf-spine:2:2:2"


def test_topo_has_every_server_as_a_host_cabled_to_its_chip_port() -> None:
    topo = load_topology("cassini-testbed")
    chip = map_to_chip(topo)
    mn_topo = CassiniTopo(topo, chip, "cas0000")
    assert mn_topo.switches() == [CHIP]
    assert sorted(mn_topo.hosts()) == sorted(s.name for s in topo.servers)
    s01 = mn_topo.nodeInfo("s01")
    assert s01["mac"] == topo.server("s01").mac
    assert s01["ip"] == f"{topo.server('s01').ip}/{SERVER_PREFIX_LEN}"
    ports = {mn_topo.port(s.name, CHIP)[1] for s in topo.servers}
    assert ports == {chip.server_port[s.name] for s in topo.servers}


@pytest.mark.root
def test_fabric_is_a_mininet_network_usable_from_python(prefix: str) -> None:
    with EmulatedFabric(load_topology(SMALL), 0.01, prefix=prefix) as fabric:
        assert fabric.net is not None
        hosts = [h.name for h in fabric.net.hosts]
        assert hosts == [s.name for s in fabric.topo.servers]
        first, last = fabric.net[hosts[0]], fabric.net[hosts[-1]]
        out = first.cmd(f"ping -c1 -W2 {last.IP()}")
        assert " 0% packet loss" in out, out
        assert first.cmd("sysctl -n net.ipv4.tcp_ecn").strip() == "1"
        assert "PERMANENT" in first.cmd(f"ip neigh show {last.IP()}")
        # The same namespace by its name, as the rest of the project reaches it.
        named = fabric.run(hosts[0], ["ip", "-o", "link", "show", fabric.hosts[hosts[0]].ifname])
        assert fabric.hosts[hosts[0]].mac in named.stdout


@pytest.mark.root
def test_cli_fabric_up_cli_pings_through_mininets_cli(prefix: str) -> None:
    result = subprocess.run(
        [CASSINI, "fabric", "up", "-t", SMALL, "--scale", "0.01", "--cli",
         "--grpc-server-addr", "127.0.0.1:0", "--prefix", prefix],
        input="s01 ping -c1 -W2 s04\n", capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    shown = result.stdout + result.stderr  # Mininet prints node output through its logger
    assert "1 packets transmitted, 1 received" in shown, shown
    assert f"fabric {prefix} down" in result.stdout


def test_bmv2_switch_argv_and_queue_commands_are_bmv2s() -> None:
    # Pure: the argv bmv2 documents, cables' veths among the ports; no bmv2 needed.
    switch = Bmv2Switch.__new__(Bmv2Switch)
    switch.device_id, switch.grpc_address, switch.log_file = 1, "127.0.0.1:9559", None
    switch.thrift_port, switch.cable_interfaces, switch.ports = 9090, {5: "casp5"}, {}
    switch.queue = {5: (64, 1000)}
    argv = switch.command()
    assert argv[:4] == ["simple_switch_grpc", "--no-p4", "--device-id", "1"]
    assert "5@casp5" in argv and argv[-5:] == [
        "--", "--grpc-server-addr", "127.0.0.1:9559", "--cpu-port", "255"
    ]  # fmt: skip
    assert switch.cli_commands() == "set_queue_depth 64 5\nset_queue_rate 1000 5\n"
    assert bmv2_available() is None or "not on PATH" in (bmv2_available() or "")
