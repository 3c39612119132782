"""A standard controller (finsy 0.30's `Switch`) connects to the software switch as it
does to a hardware one: it becomes ready, lists the ports over gNMI, reads back the
entries `cassini program` installed and the counters, and shuts down cleanly.

finsy runs as a user runs it, its own program in its own environment
(`.venv-finsy`, made by scripts/setup.sh) over gRPC; `cassini program` runs
as the command a user types. The switch serves the default testbed's ports,
named after its chip map (`topologies.port_names`).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import grpc
import pytest
from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from controlplane.p4info import P4InfoIndex
from controlplane.p4names import PORT_RX
from emulation.fabric.netns import NetnsLab
from emulation.housekeeping.prefixes import new_prefix
from emulation.softswitch.p4runtime_service import serve
from emulation.softswitch.port_stats import PortCounters, port_counters
from emulation.softswitch.service_limits import ServiceLimits
from emulation.softswitch.switch import READY_PATTERN
from tests.helpers import CASSINI
from tests.helpers.client_envs import FINSY, ROOT, run_client
from tests.helpers.leftovers import leftovers
from tests.helpers.waiting import WAIT_S, wait_for
from topologies.chip_mapping import ChipMap, map_to_chip
from topologies.library import load_topology
from topologies.model import Topology
from topologies.port_names import interface_names

FINSY_SCRIPT = textwrap.dedent(
    """
    import asyncio
    import json
    import logging
    import sys

    import finsy as fy

    async def main(address):
        out = {}
        async with fy.Switch("chip", address, fy.SwitchOptions(device_id=1)) as switch:
            out["primary"] = switch.is_primary
            out["ports"] = [[p.id, p.name, p.oper_status.value] for p in switch.ports]
            entries = [e async for e in switch.read(fy.P4TableEntry())]
            out["entries"] = {}
            for entry in entries:
                out["entries"][entry.table_id] = out["entries"].get(entry.table_id, 0) + 1
            cells = [c async for c in switch.read(fy.P4CounterEntry())]
            out["cells"] = len(cells)
            out["counted"] = [
                [c.counter_id, c.index, c.data.packet_count, c.data.byte_count]
                for c in cells
                if c.data is not None and c.data.packet_count
            ]
        out["closed"] = True
        print(json.dumps(out))

    logging.basicConfig(level=logging.WARNING)
    asyncio.run(asyncio.wait_for(main(sys.argv[1]), 60))
    """
)


def _program(address: str) -> dict[str, object]:
    """`cassini program` of the default testbed, as a user runs it; its --json summary."""
    done = subprocess.run(
        [sys.executable, "-m", "emulation", "program", "--grpc", address, "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    summary: dict[str, object] = json.loads(done.stdout)
    return summary


def _subscribes(address: str) -> bool:
    """Whether a ONCE subscription to every interface's oper-status gets its answer."""
    path = gnmi_pb2.Path(
        elem=[
            gnmi_pb2.PathElem(name="interfaces"),
            gnmi_pb2.PathElem(name="interface", key={"name": "*"}),
            gnmi_pb2.PathElem(name="state"),
            gnmi_pb2.PathElem(name="oper-status"),
        ]
    )
    request = gnmi_pb2.SubscribeRequest(
        subscribe=gnmi_pb2.SubscriptionList(
            mode=gnmi_pb2.SubscriptionList.ONCE, subscription=[gnmi_pb2.Subscription(path=path)]
        )
    )
    with grpc.insecure_channel(address) as channel:
        try:
            answers = list(gnmi_pb2_grpc.gNMIStub(channel).Subscribe(iter([request]), timeout=5))
        except grpc.RpcError as err:
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err
            return False
    return bool(answers) and answers[-1].sync_response


def _serve(lab: NetnsLab, argv: list[str]) -> tuple[subprocess.Popen[str], str]:
    """`cassini switch serve ARGV` until its ready line: the process and its address."""
    process = lab.popen(
        None, [CASSINI, "switch", "serve", *argv], stderr=subprocess.PIPE, text=True
    )
    assert process.stderr is not None
    lines = []
    for line in process.stderr:
        lines.append(line)
        ready = READY_PATTERN.search(line)
        if ready:
            return process, ready.group(1)
    raise AssertionError("the switch did not start:\n" + "".join(lines))


def test_finsy_switch_becomes_ready_and_reads_what_was_programmed(
    tmp_path: Path, testbed: tuple[Topology, ChipMap], index: P4InfoIndex
) -> None:
    _, chip = testbed
    names = interface_names(chip)

    def ports() -> list[PortCounters]:
        return port_counters({}, names, chip.ports())

    # One Subscribe at a time: finsy's must be gone for the check at the end to subscribe.
    limits = ServiceLimits(max_subscriptions=1)
    with serve(device_id=1, port_counters=ports, limits=limits) as running:
        summary = _program(running.address)
        installed = summary["desired"]
        assert installed == 1728 and summary["installed_before"] == 0
        # The pipeline push zeroed the counters: one cell counts now.
        assert running.state is not None  # the tables live in this process
        running.state.counter(PORT_RX)[3] += (12, 9000)
        result = run_client(FINSY, FINSY_SCRIPT, running.address, cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-3000:]
        out = json.loads(result.stdout.strip().splitlines()[-1])
        # Ready at once: finsy restarts a switch whose start failed (a gNMI port list it
        # could not read), 10 s later when it failed fast ('waiting 10 seconds to try
        # again'), and logs the failed task as CRITICAL. Its log says it did neither;
        # its run time, which a busy machine stretches, is not the measure.
        assert "try again" not in result.stderr, result.stderr[-2000:]
        assert "CRITICAL" not in result.stderr, result.stderr[-2000:]
        assert out["primary"] is True and out["closed"] is True
        # Every chip port, by its stable name, with the chip port as finsy's port id.
        assert sorted((p[0], p[1]) for p in out["ports"]) == sorted(names.items())
        assert {p[2] for p in out["ports"]} == {"UP"}
        assert ("tor1-eth1", 1) in {(p[1], p[0]) for p in out["ports"]}
        assert sum(out["entries"].values()) == installed
        assert out["entries"] == {"logical_forward": 1656, "wred_profile": 72}
        # Every cell of every counter, and the one that counted, by name and index.
        assert out["cells"] == sum(c.size for c in index.counters)
        assert out["counted"] == [["port_rx", 3, 12, 9000]]
        assert "Traceback" not in result.stderr and "ERROR" not in result.stderr, result.stderr
        # finsy closed its stream: no client is primary any more.
        assert wait_for(lambda: running.device.primary_election_id() is None)
        # ... and its gNMI subscription: the one slot is free again.
        assert wait_for(lambda: _subscribes(running.address))


@pytest.mark.root
def test_finsy_switch_reads_a_switch_process_that_forwarded(tmp_path: Path) -> None:
    """`cassini switch serve --topology cassini-testbed` on servers s01 and s02's ports
    (tor1-eth1 and tor1-eth2) and the testbed's loopback cables, programmed by `cassini
    program`; frames s01 -> s02 cross it; finsy sees the ports by their names and
    reads the entries and the counts of what crossed."""
    topo = load_topology("cassini-testbed")
    chip = map_to_chip(topo)
    s01, s02 = topo.servers[0], topo.servers[1]
    assert (chip.server_port[s01.name], chip.server_port[s02.name]) == (1, 2)
    tm_file = tmp_path / "tm.json"
    cables = [{"port_a": a, "port_b": b} for a, b in chip.loopback_pairs]
    tm_file.write_text(json.dumps({"loopback_cables": cables}))
    lab = NetnsLab(new_prefix())
    process = None
    try:
        hosts = []
        for i, server in ((1, s01), (2, s02)):
            ns = lab.namespace(f"h{i}")
            host_if, switch_if = lab.veth(f"h{i}", f"s{i}", ns_a=ns, mac_a=server.mac)
            hosts.append((lab.packet_socket(ns, host_if), switch_if))
        process, address = _serve(
            lab,
            [
                *("-i", f"1@{hosts[0][1]}", "-i", f"2@{hosts[1][1]}"),
                *("--tm-config", str(tm_file), "--topology", "cassini-testbed"),
                *("--grpc-server-addr", "127.0.0.1:0"),
            ],
        )
        assert _program(address)["desired"] == 1728
        frame = bytes(
            Ether(dst=s02.mac, src=s01.mac) / IP(src=s01.ip, dst=s02.ip) / UDP() / bytes(100)
        )
        for _ in range(20):
            hosts[0][0].send(frame)
        result = run_client(FINSY, FINSY_SCRIPT, address, cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-3000:]
        out = json.loads(result.stdout.strip().splitlines()[-1])
        names = interface_names(chip)
        attached = {1, 2} | {p for pair in chip.loopback_pairs for p in pair}
        assert sorted((p[0], p[1]) for p in out["ports"]) == sorted((p, names[p]) for p in attached)
        assert {p[1] for p in out["ports"] if p[0] in (1, 2)} == {"tor1-eth1", "tor1-eth2"}
        assert {p[2] for p in out["ports"]} == {"UP"}
        assert sum(out["entries"].values()) == 1728
        counted = {(c[0], c[1]): (c[2], c[3]) for c in out["counted"]}
        # Every frame s01 sent left by s02's port, and nothing else did.
        assert counted[("port_tx", 2)][0] == 20, counted
        assert counted[("port_rx", 1)][0] >= 20, counted
    finally:
        if process is not None:
            process.send_signal(signal.SIGTERM)
            assert process.wait(WAIT_S) == 0
        lab.close()
        assert leftovers(lab.prefix) == []
