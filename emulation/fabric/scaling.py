"""How are a topology's rates and thresholds scaled for one emulated run?

Emulation profile (testbed.md: "real time, scaled"): every rate is the
link's Gbps x S; every threshold in cells (WRED min/max, PFC XOFF, queue
limit, shared buffer) is multiplied by one factor F = max(S, floor), where
the floor makes WRED min hold THRESHOLD_FLOOR_PACKETS MTU frames. (our
choice) Flooring the factor rather than each threshold keeps the paper's
ratios (WRED min : max : XOFF = 1 : 2 : 4), so marking still starts before
pausing. Delays are not scaled: time runs at wall-clock speed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from controlplane.settings import ControlPlaneSettings, WredSettings
from emulation.softswitch.tm_config import (
    TOFINO1_BUFFER_CELLS,
    LoopbackCable,
    PfcConfig,
    PortSettings,
    TmConfig,
)
from topologies.chip_mapping import ChipMap
from topologies.errors import UserInputError
from topologies.model import Link, Topology

# (our choice) Thresholds never fall below 8 MTU frames at WRED min: below that
# a single late wake-up of a Python sender would already look like congestion.
THRESHOLD_FLOOR_PACKETS = 8
# (our choice) A host's NIC is shaped to 99% of its switch port's rate. At
# exactly the port's rate the switch queue is a random walk: the host's timer
# jitter releases frames in small bursts and nothing drains the backlog they
# leave, so one TCP flow alone was marked (804 marks in 3 s measured at 100%,
# none at 99% or 98%); 1% keeps the flow NIC-bound as on the testbed.
NIC_HEADROOM = 0.99
MTU_FRAME_BYTES = 1500
# (our choice) 0.001 turns the testbed's 50 Gbps links into 50 Mbit/s, which a
# Python forwarder carries on one core with room for a 2:1 incast.
DEFAULT_SCALE = 0.001


@dataclass(frozen=True)
class EmulationProfile:
    """Everything scaled for one run: what a report must state next to its numbers."""

    scale: float
    threshold_factor: float
    tm: TmConfig
    wred: WredSettings

    def nic_mbit(self, chip: ChipMap) -> dict[str, float]:
        """Each server's NIC rate as emulated (Mbit/s): the rate of its switch port.

        A server's link runs at one rate both ways, so the TM's port rate is
        the one source; the fabric shapes the host's side of the cable to it,
        less `NIC_HEADROOM`.
        """
        return {s: self.tm.rate_gbps(p) * 1e3 * NIC_HEADROOM for s, p in chip.server_port.items()}

    def describe(self, chip: ChipMap | None = None) -> str:
        """Human-readable summary, one fact per line."""
        rates = sorted({self.tm.rate_gbps(p) for p in self.tm.ports})
        lines = [
            f"scale S = {self.scale:g} (rates), threshold factor F = {self.threshold_factor:g} "
            f"(floor {THRESHOLD_FLOOR_PACKETS} x {MTU_FRAME_BYTES} B frames at WRED min)",
            "port rates: " + ", ".join(f"{r * 1e3:g} Mbit/s" for r in rates),
            f"WRED min {self.wred.min_cells} / max {self.wred.max_cells} cells of "
            f"{self.tm.cell_bytes} B, max probability {self.wred.max_prob_percent} %",
            (
                f"PFC XOFF {self.tm.pfc.xoff_cells} / XON {self.tm.pfc.xon_cells} cells"
                if self.tm.pfc.enabled
                else "PFC off"
            ),
            f"queue limit {self.tm.default_queue_cells} cells, "
            f"shared buffer {self.tm.buffer_cells} cells",
            f"{len(self.tm.loopback_cables)} loopback cables inside the switch",
        ]
        if chip is not None:
            lines.append(f"{len(chip.server_port)} server ports, {len(chip.ports())} chip ports")
        return "\n".join(lines)


def threshold_factor(scale: float, min_cells: int, cell_bytes: int) -> float:
    """F = max(S, the factor that leaves THRESHOLD_FLOOR_PACKETS frames at WRED min)."""
    check_scale(scale)
    if min_cells <= 0:
        return scale
    floor_cells = THRESHOLD_FLOOR_PACKETS * math.ceil(MTU_FRAME_BYTES / cell_bytes)
    return max(scale, floor_cells / min_cells)


def _cells(cells: int, factor: float) -> int:
    return max(1, round(cells * factor))


def scaled_wred(wred: WredSettings, factor: float) -> WredSettings:
    """WRED thresholds times the threshold factor; the probability is not a size."""
    return WredSettings(
        min_cells=_cells(wred.min_cells, factor),
        max_cells=_cells(wred.max_cells, factor),
        max_prob_percent=wred.max_prob_percent,
    )


def port_links(topo: Topology, chip: ChipMap) -> dict[int, Link]:
    """The topology link behind every chip port (both ports of a loopback cable share one)."""
    by_ends: dict[tuple[str, str], Link] = {}
    for link in topo.links:
        by_ends[(link.a, link.b)] = link
        by_ends[(link.b, link.a)] = link
    found: dict[int, Link] = {}
    for port in chip.ports():
        ends = (chip.switch_of_port[port], chip.neighbor_of_port[port])
        behind = by_ends.get(ends)
        if behind is None:
            raise UserInputError(f"chip port {port}: no link {ends[0]} - {ends[1]} in the topology")
        found[port] = behind
    return found


def tm_config_for(
    topo: Topology,
    chip: ChipMap,
    scale: float,
    cell_bytes: int = 80,
    pfc: bool = True,
    settings: ControlPlaneSettings | None = None,
) -> TmConfig:
    """The software switch's traffic manager for `topo` at scale S (see the module doc)."""
    return emulation_profile(topo, chip, scale, cell_bytes, pfc, settings).tm


def _scaled_tm(
    topo: Topology,
    chip: ChipMap,
    scale: float,
    factor: float,
    cell_bytes: int,
    pfc: bool,
    settings: ControlPlaneSettings,
) -> TmConfig:
    """Rates times S, thresholds in cells times F."""
    links = port_links(topo, chip)
    ports = {port: PortSettings(rate_gbps=link.gbps * scale) for port, link in links.items()}
    cables = tuple(LoopbackCable(a, b, delay_us=links[a].delay_us) for a, b in chip.loopback_pairs)
    xoff = _cells(settings.pfc.skid_cells, factor)
    return TmConfig(
        cell_bytes=cell_bytes,
        buffer_cells=_cells(TOFINO1_BUFFER_CELLS, factor),
        default_rate_gbps=max(ports[p].rate_gbps or 0.0 for p in ports) if ports else scale,
        default_queue_cells=_cells(settings.queue_cells, factor),
        ports=ports,
        pfc=PfcConfig(
            enabled=pfc and settings.pfc.enabled,
            xoff_cells=max(xoff, 2),
            xon_cells=max(xoff, 2) * 3 // 4,
            priority=settings.pfc.priority,
        ),
        loopback_cables=cables,
    )


def emulation_profile(
    topo: Topology,
    chip: ChipMap,
    scale: float,
    cell_bytes: int = 80,
    pfc: bool = True,
    settings: ControlPlaneSettings | None = None,
) -> EmulationProfile:
    """The TM config and the WRED entries' thresholds for one run, scaled together."""
    settings = settings or ControlPlaneSettings()
    factor = threshold_factor(scale, settings.wred.min_cells, cell_bytes)
    return EmulationProfile(
        scale=scale,
        threshold_factor=factor,
        tm=_scaled_tm(topo, chip, scale, factor, cell_bytes, pfc, settings),
        wred=scaled_wred(settings.wred, factor),
    )


def check_scale(scale: float) -> None:
    """Refuse a scale factor outside (0, 1], naming the flag that sets it."""
    if isinstance(scale, bool) or not isinstance(scale, int | float) or not 0 < scale <= 1:
        raise UserInputError(f"--scale: expected a factor in (0, 1], got {scale!r}")
