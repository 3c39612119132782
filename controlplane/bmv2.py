"""What does bmv2 need that P4Runtime cannot set, and in which units?

bmv2 (simple_switch_grpc) sets egress queue depth and rate only through
simple_switch_CLI (Thrift), and counts its queue in packets, not cells. This
adapter converts the cell thresholds of the settings into packets with the
documented packet size (settings.bmv2_packet_bytes) and writes the CLI
commands; `run_cli` feeds them to simple_switch_CLI. A bmv2 started with
`--no-p4` runs nothing until a pipeline arrives with its compiled JSON as the
device config: `bmv2_device_config` finds that JSON (given, or where
`make p4` writes it) or says how to make it.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from topologies.chip_mapping import ChipMap
from topologies.datafile import read_capped_bytes
from topologies.errors import UserInputError
from topologies.model import Topology

from .settings import ControlPlaneSettings, WredSettings

# bmv2's enq_qdepth is bit<19>.
BMV2_MAX_QDEPTH = (1 << 19) - 1
# Where scripts/build_p4.sh (`make p4`) writes p4c's output: $P4_OUT, else build/p4c-out.
P4_OUT_ENV = "P4_OUT"
BUILD_OUT = Path("build") / "p4c-out"
BMV2_JSON = Path("bmv2") / "cassini.json"


def built_bmv2_json(env: Mapping[str, str] | None = None) -> Path:
    """Where `make p4` writes the compiled bmv2 JSON: $P4_OUT/bmv2/cassini.json when
    P4_OUT is set (as the build script reads it), else the source tree's build/p4c-out."""
    env = os.environ if env is None else env
    out = env.get(P4_OUT_ENV)
    if out:
        return Path(out) / BMV2_JSON
    return Path(__file__).resolve().parents[1] / BUILD_OUT / BMV2_JSON


def bmv2_device_config(
    path: str | os.PathLike[str] | None, env: Mapping[str, str] | None = None
) -> bytes:
    """The compiled JSON bmv2 runs, read from `path` or from where `make p4` writes it.

    bmv2 accepts a pipeline with an empty device config and then fails every
    Read ("Error when reading table entries from target"), so a missing JSON
    is refused here, naming the file looked for and how to build it.
    """
    given = path is not None
    file = Path(path) if path is not None else built_bmv2_json(env)
    flag = f"--device-config {file}" if given else f"the compiled bmv2 JSON ({file})"
    try:
        data = read_capped_bytes(file, "bmv2 JSON")
    except OSError as err:
        how = (
            ""
            if given
            else (": run `make p4` (needs p4c) to build it, or pass --device-config FILE")
        )
        raise UserInputError(f"cannot read {flag}: {err.strerror}{how}") from None
    try:
        json.loads(data)
    except ValueError as err:
        raise UserInputError(
            f"{flag} is not bmv2 JSON (p4c --target bmv2 writes it): {err}"
        ) from None
    return data


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
    topo: Topology, chip: ChipMap, settings: ControlPlaneSettings, scale: float
) -> list[str]:
    """simple_switch_CLI lines: queue depth (packets) and rate (packets/s) of every used port.

    The rate is the logical link's capacity times `scale` (the emulation's
    scale factor S), in packets of settings.bmv2_packet_bytes per second.
    """
    if scale <= 0:
        raise UserInputError(f"scale must be > 0, got {scale}")
    depth = min(
        BMV2_MAX_QDEPTH,
        cells_to_packets(settings.queue_cells, settings.cell_bytes, settings.bmv2_packet_bytes),
    )
    capacity = topo.capacity_gbps()
    lines = []
    for port in chip.ports():
        gbps = capacity[(chip.switch_of_port[port], chip.node_behind_port(port))]
        pps = max(1, round(gbps * 1e9 * scale / (8 * settings.bmv2_packet_bytes)))
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
