"""`mltcp`: MLTCP (HotNets 2024), turns made by the hosts' congestion control.

Each flow's DCQCN increase grows with the share of the current iteration's
bytes it has sent (`emulation.roce.mltcp`), so jobs that collide slide apart
by themselves; no classes, no rates, no shifts. It runs on the emulated
fabric (`cassini emulate|fabric run --transport roce --policy mltcp`); the
fluid simulator has no congestion control to scale and refuses it in one line.
"""

from __future__ import annotations

from topologies.errors import UserInputError

from .base import NetworkPlan, PolicyInput


class MltcpPolicy:
    """Host-side: its network plan is the hosts' congestion control, not the switch's."""

    name = "mltcp"

    def plan(self, inp: PolicyInput) -> NetworkPlan:
        raise UserInputError(
            "policy mltcp lives in the hosts' RoCE congestion control, which the simulator "
            "does not model: run it with `cassini emulate --transport roce --policy mltcp`"
        )
