"""What does bmv2 need that P4Runtime cannot set, and in which units?

bmv2 (simple_switch_grpc) sets egress queue depth and rate only through
simple_switch_CLI (Thrift), and counts its queue in packets, not cells. This
adapter converts the cell thresholds of the settings into packets with the
documented packet size (settings.bmv2_packet_bytes) and writes the CLI
commands; `run_cli` feeds them to simple_switch_CLI.
"""

from __future__ import annotations

import math
import shutil
import subprocess
from collections.abc import Sequence

from topologies.chip_mapping import ChipMap
from topologies.errors import UserInputError
from topologies.model import Topology

from .settings import ControlPlaneSettings, WredSettings

# bmv2's enq_qdepth is bit<19>.
BMV2_MAX_QDEPTH = (1 << 19) - 1


def cells_to_packets(cells: int, cell_bytes: int, packet_bytes: int) -> int:
    """Packets of `packet_bytes` that occupy `cells` cells, rounded up, at least 1.

    (our choice) floor of 1 packet: a threshold of 0 would mark every packet.

    >>> cells_to_packets(1000, 80, 1500), cells_to_packets(2000, 80, 1500)
    (54, 107)
    """
    if cells <= 0:
        return 0
    return max(1, math.ceil(cells * cell_bytes / packet_bytes))


def bmv2_wred(settings: ControlPlaneSettings) -> WredSettings:
    """The WRED thresholds in packets, as bmv2's enq_qdepth counts them."""
    w = settings.wred
    return WredSettings(
        min_cells=cells_to_packets(w.min_cells, settings.cell_bytes, settings.bmv2_packet_bytes),
        max_cells=cells_to_packets(w.max_cells, settings.cell_bytes, settings.bmv2_packet_bytes),
        max_prob_percent=w.max_prob_percent,
    )


def queue_commands(
    topo: Topology, chip: ChipMap, settings: ControlPlaneSettings, rate_scale: float = 1.0
) -> list[str]:
    """simple_switch_CLI lines: queue depth (packets) and rate (packets/s) of every used port.

    The rate is the logical link's capacity times `rate_scale` (the emulation's
    scale factor S), in packets of settings.bmv2_packet_bytes per second.
    """
    if rate_scale <= 0:
        raise UserInputError(f"rate scale must be > 0, got {rate_scale}")
    depth = min(
        BMV2_MAX_QDEPTH,
        cells_to_packets(settings.queue_cells, settings.cell_bytes, settings.bmv2_packet_bytes),
    )
    capacity = topo.capacity_gbps()
    lines = []
    for port in chip.ports():
        gbps = capacity[(chip.switch_of_port[port], chip.node_behind_port(port))]
        pps = max(1, round(gbps * 1e9 * rate_scale / (8 * settings.bmv2_packet_bytes)))
        lines.append(f"set_queue_depth {depth} {port}")
        lines.append(f"set_queue_rate {pps} {port}")
    return lines


def run_cli(
    commands: Sequence[str], thrift_port: int = 9090, cli: str = "simple_switch_CLI"
) -> str:
    """Send commands to a running bmv2 over Thrift; returns the CLI's output."""
    exe = shutil.which(cli)
    if exe is None:
        raise UserInputError(f"{cli} is not on PATH: install bmv2 to configure its queues")
    result = subprocess.run(
        [exe, "--thrift-port", str(thrift_port)],
        input="\n".join(commands) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode != 0 or "Error" in result.stdout:
        raise UserInputError(
            f"{cli} on thrift port {thrift_port} failed: {(result.stderr or result.stdout).strip()[:400]}"
        )
    return result.stdout
