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
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from controlplane.p4info import P4InfoIndex
from controlplane.p4names import PORT_RX
from emulation.softswitch.p4runtime_service import serve
from emulation.softswitch.port_stats import PortCounters, port_counters
from tests.helpers.client_envs import FINSY, ROOT, run_client
from topologies.chip_mapping import ChipMap
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


def test_finsy_switch_becomes_ready_and_reads_what_was_programmed(
    tmp_path: Path, testbed: tuple[Topology, ChipMap], index: P4InfoIndex
) -> None:
    _, chip = testbed
    names = interface_names(chip)

    def ports() -> list[PortCounters]:
        return port_counters({}, names, chip.ports())

    with serve(device_id=1, port_counters=ports) as running:
        summary = _program(running.address)
        installed = summary["desired"]
        assert installed == 1728 and summary["installed_before"] == 0
        # The pipeline push zeroed the counters: one cell counts now.
        running.state.counter(PORT_RX)[3] += (12, 9000)
        started = time.monotonic()
        result = run_client(FINSY, FINSY_SCRIPT, running.address, cwd=tmp_path)
        took = time.monotonic() - started
        assert result.returncode == 0, result.stderr[-3000:]
        out = json.loads(result.stdout.strip().splitlines()[-1])
        # Ready at once: finsy retries a failed gNMI port list every 10 s.
        assert took < 10, (took, result.stderr[-2000:])
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
        deadline = time.monotonic() + 5
        while running.device.primary_election_id() is not None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert running.device.primary_election_id() is None
