"""What does each emulation target hold, and does a topology fit it?

The limits of the targets a fabric runs on (`controlplane.fit.TargetLimits`),
named after `FabricOptions.target`: the software switch answers a wildcard
Read with at most `MAX_READ_ENTITIES` entities (`service_limits`), and bmv2
has no internal cables (each is a veth pair). Table sizes are the P4Info's
for both: the software switch enforces them, bmv2 takes them from its JSON,
compiled from the same P4 program.
"""

from __future__ import annotations

from controlplane.fit import Fit, TargetLimits, check_fit, topology_needs
from controlplane.p4info import P4InfoIndex, load_p4info
from topologies.chip_mapping import ChipMap
from topologies.model import Topology

from .softswitch.service_limits import MAX_READ_ENTITIES

TARGET_LIMITS = {
    "softswitch": TargetLimits(
        "the software switch",
        read_entities=MAX_READ_ENTITIES,
        read_knob="MAX_READ_ENTITIES in emulation/softswitch/service_limits.py, or --target bmv2",
    ),
    "bmv2": TargetLimits("bmv2", cables_are_veths=True),
}


def check_fabric_fit(
    topo: Topology, chip: ChipMap, target: str, p4info: P4InfoIndex | None = None
) -> Fit:
    """`topo` on `chip` against `target` (a `FabricOptions.target`) and the P4Info
    (the package's own by default); raises `controlplane.fit.DoesNotFit` (one line)
    before a fabric builds anything."""
    index = p4info if p4info is not None else load_p4info()
    return check_fit(topology_needs(topo, chip, index), index, TARGET_LIMITS[target])
