"""The interfaces' names the switch serves over gNMI: a topology's chip map when
`switch serve --topology` names one, the chip port otherwise, and never a Linux
interface; a topology that does not fit the ports is one line."""

from __future__ import annotations

import subprocess

import pytest

from emulation.fabric.mininet_switches import SoftSwitch, SwitchPlan
from emulation.fabric.netns import NetnsLab
from emulation.softswitch.attachments import port_names_of
from emulation.softswitch.gnmi_tree import interfaces_tree
from emulation.softswitch.port_stats import port_counters
from emulation.softswitch.tm_config import TmConfig
from tests.helpers import CASSINI
from topologies.chip_mapping import map_to_chip
from topologies.errors import UserInputError
from topologies.io import load_topology_file
from topologies.library import load_topology
from topologies.port_names import interface_names


def test_names_come_from_the_topology_and_default_to_the_chip_port() -> None:
    names = port_names_of("cassini-testbed", {1, 2, 25, 26})
    tree = interfaces_tree(port_counters({}, names, [1, 26]))
    entries = tree["interfaces"]["interface"].entries
    assert set(entries) == {"tor1-eth1", "agg1-eth1"}
    assert entries["agg1-eth1"]["state"]["ifindex"] == 26
    plain = interfaces_tree(port_counters({}, {}, [1, 26]))["interfaces"]["interface"]
    assert set(plain.entries) == {"port1", "port26"}


def test_a_topology_that_does_not_fit_the_ports_is_refused() -> None:
    with pytest.raises(UserInputError, match="port 99 is not one of its chip map's 72 ports"):
        port_names_of("cassini-testbed", {1, 99})


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["-i", "99@lo", "--topology", "cassini-testbed"],
            "cassini: error: --topology cassini-testbed: port 99 is not one of its chip "
            "map's 72 ports: is it the topology cabled to this switch?",
        ),
        (
            ["-i", "1@lo", "--topology", "cassini-tesbed"],
            "cassini: error: no topology named 'cassini-tesbed'. Did you mean 'cassini-testbed'?",
        ),
    ],
)
def test_switch_serve_says_in_one_line_what_is_wrong_with_its_topology(
    argv: list[str], message: str
) -> None:
    done = subprocess.run(
        [CASSINI, "switch", "serve", *argv, "--grpc-server-addr", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), done.stderr


def test_the_fabric_hands_its_topology_to_the_switch_process() -> None:
    """SoftSwitch writes the fabric's topology beside its TM config, for its process's
    --topology: the process names the ports as the fabric's chip map does."""
    topo = load_topology("cassini-testbed-2gpu")
    lab = NetnsLab()
    try:
        plan = SwitchPlan(
            lab=lab,
            device_id=1,
            grpc_address="127.0.0.1:0",
            tm=TmConfig(),
            seed=0,
            nice=0,
            loop_cpu=None,
            cables=(),
            queue_commands=(),
            thrift_port=0,
            log_dir=None,
            topology=topo,
        )
        params = SoftSwitch.params(plan)
        handed = load_topology_file(params["topology_file"])
        assert interface_names(map_to_chip(handed)) == interface_names(map_to_chip(topo))
        switch = SoftSwitch.__new__(SoftSwitch)  # only what `command` reads: no Mininet node
        switch.device_id, switch.grpc_address, switch.ports = 1, "127.0.0.1:0", {}
        switch.nice, switch.python, switch.seed, switch.loop_cpu = 0, "python3", 0, None
        switch.tm_config, switch.topology_file = None, params["topology_file"]
        argv = switch.command()
        assert argv[argv.index("--topology") + 1] == params["topology_file"]
    finally:
        lab.close()


@pytest.mark.root
def test_a_fabrics_switch_serves_the_chip_maps_names() -> None:
    """Whatever a run calls its veths, gNMI names the fabric's ports after the chip map."""
    from controlplane.gnmi import GnmiReader
    from emulation.fabric.emulated import EmulatedFabric
    from emulation.fabric.options import FabricOptions
    from emulation.housekeeping.prefixes import new_prefix
    from tests.helpers.leftovers import leftovers

    topo = load_topology("leaf-spine:2:2:2")
    prefix = new_prefix("cas")
    try:
        with EmulatedFabric(topo, FabricOptions(scale=0.01, prefix=prefix)) as fabric:
            assert fabric.grpc_address is not None
            with GnmiReader(fabric.grpc_address) as reader:
                served = {i.port: i.name for i in reader.read()}
            veths = set(fabric.interfaces().values())
    finally:
        assert leftovers(prefix) == []
    assert served == interface_names(map_to_chip(topo))
    assert not set(served.values()) & veths
    assert all(not name.startswith(prefix) for name in served.values())
