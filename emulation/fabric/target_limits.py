"""What does each emulation target hold, and does a topology fit it?

The limits of the targets a fabric runs on (`controlplane.fit.TargetLimits`),
named after `FabricOptions.target`: the software switch answers a Read with
at most its pipeline's `read_capacity` entities (`service_limits`: every
table at its P4Info size and every counter cell, so a fabric whose tables fit
is always read back in one Read), and bmv2 has no internal cables (each is a
veth pair). Table sizes are the P4Info's for both: the software switch
enforces them, bmv2 takes them from its JSON, compiled from the same P4
program.
"""

from __future__ import annotations

from dataclasses import replace

from controlplane.fit import Fit, TargetLimits, check_fit, topology_needs
from controlplane.p4info import P4InfoIndex, load_p4info
from emulation.softswitch.service_limits import read_capacity
from topologies.chip_mapping import ChipMap
from topologies.model import Topology

TARGET_LIMITS = {
    # read_entities: filled from the P4Info by `target_limits`.
    "softswitch": TargetLimits(
        "the software switch",
        read_knob="a larger `size` in the P4Info makes one Read return more, or --target bmv2",
    ),
    "bmv2": TargetLimits("bmv2", cables_are_veths=True),
}


def target_limits(target: str, p4info: P4InfoIndex) -> TargetLimits:
    """`target`'s limits with the software switch's Read cap read from `p4info`
    (the one source: `service_limits.read_capacity`)."""
    limits = TARGET_LIMITS[target]
    if target == "softswitch":
        return replace(limits, read_entities=read_capacity(p4info))
    return limits


def check_fabric_fit(
    topo: Topology, chip: ChipMap, target: str, p4info: P4InfoIndex | None = None
) -> Fit:
    """`topo` on `chip` against `target` (a `FabricOptions.target`) and the P4Info
    (the package's own by default); raises `controlplane.fit.DoesNotFit` (one line)
    before a fabric builds anything."""
    index = p4info if p4info is not None else load_p4info()
    return check_fit(topology_needs(topo, chip, index), index, target_limits(target, index))
