"""What does a Tofino need besides P4Runtime entries?

Two text artifacts generated from the chip map and the settings:

- a Stratum chassis config (text proto, stratum/hal/lib/common/common.proto's
  ChassisConfig) listing every chip port the topology uses, so stratum_bfrt
  brings the ports up at the speed of their logical link;
- a BfRt Python script for the traffic manager: PFC on every port (ingress
  priority groups with pfc_enable and the skid threshold, port flow control in
  PFC mode) and the egress queue limit. Run it on the switch with
  `bfshell -b cassini_tm.py` after the pipeline is loaded.

Tofino's traffic manager has no RED/ECN engine: ECN marking is done by the P4
program from enq_qdepth (in cells), with thresholds written by P4Runtime into
wred_profile. The script checks that the queue limit leaves room above
max_cells, so marking starts before tail drop.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from topologies.chip_mapping import ChipMap
from topologies.errors import UserInputError
from topologies.model import Topology
from topologies.outputs import staged_folder

from .settings import ControlPlaneSettings

# Speeds a Tofino MAC runs (Gb/s); a logical link must use one of them.
TOFINO_SPEEDS_GBPS = (1, 10, 25, 40, 50, 100, 200, 400)
# Tofino1 dev_port = pipe << 7 | port-in-pipe.
TOFINO_PIPE_SHIFT = 7


@dataclass(frozen=True)
class PanelPort:
    """Where a chip port sits on the front panel: QSFP cage and breakout channel."""

    sdn_port: int  # the number P4Runtime entries use (the chip map's port)
    panel_port: int
    channel: int
    speed_gbps: int


def port_speeds(topo: Topology, chip: ChipMap) -> dict[int, int]:
    """Chip port -> speed (Gb/s) of the logical link behind it, from the topology."""
    capacity = topo.capacity_gbps()
    speeds: dict[int, int] = {}
    for port in chip.ports():
        switch = chip.switch_of_port[port]
        neighbor = chip.node_behind_port(port)
        gbps = capacity.get((switch, neighbor))
        if gbps is None:
            raise UserInputError(f"chip port {port}: no link {switch}->{neighbor} in the topology")
        if gbps not in TOFINO_SPEEDS_GBPS:
            raise UserInputError(
                f"chip port {port} ({switch}->{neighbor}): {gbps:g} Gb/s is not a Tofino port speed "
                f"({', '.join(str(s) for s in TOFINO_SPEEDS_GBPS)})"
            )
        speeds[port] = int(gbps)
    return speeds


def panel_layout(speeds: dict[int, int], cage_gbps: int = 100) -> list[PanelPort]:
    """Assign ports to QSFP cages in chip-port order, breaking a cage into cage_gbps/speed channels.

    (our choice) a 100G cage carries 2x50G, 4x25G, 1x100G...; ports of different
    speeds never share a cage. Check the result against the platform's port map
    before cabling the loopbacks.
    """
    layout: list[PanelPort] = []
    cage, used, cage_speed = 0, 0, 0
    channels_per_cage = 1
    for port in sorted(speeds):
        speed = speeds[port]
        if cage == 0 or used >= channels_per_cage or speed != cage_speed:
            cage += 1
            used = 0
            cage_speed = speed
            channels_per_cage = max(1, cage_gbps // speed) if speed <= cage_gbps else 1
        used += 1
        layout.append(PanelPort(port, cage, used, speed))
    return layout


def chassis_config(
    topo: Topology, chip: ChipMap, node_id: int = 1, platform: str = "PLT_GENERIC_BAREFOOT_TOFINO"
) -> str:
    """Stratum ChassisConfig text proto: one singleton_port per chip port of the topology."""
    layout = panel_layout(port_speeds(topo, chip))
    lines = [
        f'description: "Cassini: {len(layout)} ports of topology {topo.name} '
        f'({len(topo.switches)} logical switches, {len(chip.loopback_pairs)} loopback cables)"',
        "chassis {",
        f"  platform: {platform}",
        f'  name: "{topo.name}"',
        "}",
        "nodes {",
        f"  id: {node_id}",
        "  slot: 1",
        "  index: 1",
        "}",
    ]
    for p in layout:
        behind = chip.node_behind_port(p.sdn_port)
        lines += [
            f"singleton_ports {{  # {chip.switch_of_port[p.sdn_port]} -> {behind}",
            f"  id: {p.sdn_port}",
            f'  name: "{p.panel_port}/{p.channel - 1}"',
            "  slot: 1",
            f"  port: {p.panel_port}",
            f"  channel: {p.channel}",
            f"  speed_bps: {p.speed_gbps * 1_000_000_000}",
            "  config_params {",
            "    admin_state: ADMIN_STATE_ENABLED",
            "  }",
            f"  node: {node_id}",
            "}",
        ]
    return "\n".join(lines) + "\n"


def bfrt_tm_script(chip: ChipMap, settings: ControlPlaneSettings) -> str:
    """BfRt Python for tf1.tm: PFC PPGs with the skid threshold, PFC flow control, queue limits."""
    wred, pfc = settings.wred, settings.pfc
    if settings.queue_cells <= wred.max_cells:
        raise UserInputError(
            f"queue_cells ({settings.queue_cells}) must exceed wred.max_cells ({wred.max_cells}): "
            "ECN marking has to start before the queue tail-drops"
        )
    ports = list(chip.ports())
    # (our choice) the data plane keeps one traffic class (iCoS 0, queue 0), like the
    # software target; PFC class `priority` is mapped onto it by swapping CoS 0 and
    # `priority` in cos_to_icos, so pause frames carry the RoCE priority.
    cos_to_icos = list(range(8))
    cos_to_icos[0], cos_to_icos[pfc.priority] = pfc.priority, 0
    return f"""\
# Cassini traffic-manager settings for Tofino1 (tf1.tm), generated by
# `cassini tofino artifacts`. Run on the switch after the pipeline is loaded:
#     bfshell -b cassini_tm.py
# ECN/WRED is not a traffic-manager feature on Tofino: the P4 program marks from
# enq_qdepth (cells) with the thresholds P4Runtime writes into wred_profile.
#   WRED_MIN_CELLS = {wred.min_cells}, WRED_MAX_CELLS = {wred.max_cells}, MAX_PROB = {wred.max_prob_percent} %
# Cell size assumed: {settings.cell_bytes} B.

DEV_PORTS = {ports!r}
PFC_ENABLE = {pfc.enabled!r}
PFC_PRIORITY = {pfc.priority}
PFC_SKID_MAX_CELLS = {pfc.skid_cells}
QUEUE_MAX_CELLS = {settings.queue_cells}
WRED_MIN_CELLS = {wred.min_cells}
WRED_MAX_CELLS = {wred.max_cells}
COS_TO_ICOS = {cos_to_icos!r}
PIPE_SHIFT = {TOFINO_PIPE_SHIFT}

assert QUEUE_MAX_CELLS > WRED_MAX_CELLS, "queue limit must leave room above the WRED ramp"

tm = bfrt.tf1.tm


def pipe_of(dev_port):
    return dev_port >> PIPE_SHIFT


def configure(dev_port, ppg_id):
    pipe = pipe_of(dev_port)
    # Ingress: one lossless priority group per port for iCoS 0 (all data traffic).
    tm.ppg.cfg.add_with_dev_port(
        pipe=pipe, ppg_id=ppg_id, dev_port=dev_port, icos_0=True,
        pool_id="IG_APP_POOL_0", pool_max_cells=QUEUE_MAX_CELLS,
        pfc_enable=PFC_ENABLE, pfc_skid_max_cells=PFC_SKID_MAX_CELLS)
    # Egress: queue 0 of the port may hold QUEUE_MAX_CELLS before it tail-drops.
    port_cfg = tm.port.cfg.get(pipe=pipe, dev_port=dev_port, print_ents=False).data
    pg_id = port_cfg[b"pg_id"]
    pg_queue = port_cfg[b"egress_qid_queues"][0]
    tm.queue.buffer.mod_with_shared_pool(
        pipe=pipe, pg_id=pg_id, pg_queue=pg_queue, pool_id="EG_APP_POOL_0",
        pool_max_cells=QUEUE_MAX_CELLS, dynamic_baf="DISABLE")
    # PFC: send and honour pause frames on this port.
    mode = "PFC" if PFC_ENABLE else "NONE"
    tm.port.flowcontrol.mod(dev_port=dev_port, mode_tx=mode, mode_rx=mode, cos_to_icos=COS_TO_ICOS)


next_ppg = {{}}
for dev_port in DEV_PORTS:
    pipe = pipe_of(dev_port)
    next_ppg[pipe] = next_ppg.get(pipe, 0) + 1
    try:
        configure(dev_port, next_ppg[pipe])
    except Exception as err:  # name the port, then stop: a half-configured TM is worse
        raise SystemExit("cassini TM setup failed on dev_port %d: %s" % (dev_port, err))
print("cassini: configured PFC and queue limits on %d ports" % len(DEV_PORTS))
"""


def write_artifacts(
    topo: Topology,
    chip: ChipMap,
    settings: ControlPlaneSettings,
    out_dir: str | Path,
    force: bool | None = None,
) -> list[Path]:
    """Write chassis_config.pb.txt and cassini_tm.py into out_dir.

    The folder follows the output rule of `topologies.outputs`: refused if it
    holds anything unless `force` (None: the caller offers no --force),
    created whole. Both texts are built first, so a bad setting writes nothing.
    """
    texts = {
        "chassis_config.pb.txt": chassis_config(topo, chip),
        "cassini_tm.py": bfrt_tm_script(chip, settings),
    }
    out = Path(out_dir)
    with staged_folder(out, force) as stage:
        for name, text in texts.items():
            (stage / name).write_text(text)
    return [out / name for name in texts]
