"""Network-side policies: per-flow classes and host rates on top of any placement.

A scheduler (`scheduler.baselines.registry`) decides where jobs run; a
policy decides how their flows share the network: `crux` (classes by GPU
intensity, `crux.py`), `echelon` and `echelon-rate` (EchelonFlow's staggered
target finish times as classes or host rates, `echelon.py`), `mltcp`
(the hosts' DCQCN made iteration-aware, run on the emulated fabric only,
`mltcp.py`), `none` (every flow in one class, max-min sharing: what runs today). They compose:
`--schedulers themis --policy crux`. The interface: `base.py`; fitting
ranks into a port's classes: `compression.py`.

    >>> parse_policy("crux")
    'crux'
    >>> parse_policy("crus")
    Traceback (most recent call last):
    ...
    topologies.errors.UserInputError: --policy: no policy named 'crus'. Did you mean 'crux'? (known: crux, echelon, echelon-rate, mltcp, none)
"""

from __future__ import annotations

from collections.abc import Callable

from topologies.errors import UserInputError, did_you_mean

from .base import NetworkPlan, NetworkPolicy, PolicyInput
from .crux import CruxPolicy
from .echelon import EchelonPolicy, EchelonRatePolicy
from .mltcp import MltcpPolicy


class NoPolicy:
    """`none`: no classes, no rates (the fabric's max-min sharing)."""

    name = "none"

    def plan(self, inp: PolicyInput) -> NetworkPlan:
        return NetworkPlan(policy=self.name)


POLICIES: dict[str, Callable[[], NetworkPolicy]] = {
    "none": NoPolicy,
    "crux": CruxPolicy,
    "echelon": EchelonPolicy,
    "echelon-rate": EchelonRatePolicy,
    "mltcp": MltcpPolicy,
}


def parse_policy(text: str) -> str:
    """A `--policy` value, checked: one known name, else a one-line did-you-mean."""
    name = text.strip().lower()
    if name not in POLICIES:
        raise UserInputError("--policy: " + did_you_mean(name, POLICIES, "policy"))
    return name


def make_policy(name: str) -> NetworkPolicy:
    """The policy called `name` (checked as `parse_policy` checks it)."""
    return POLICIES[parse_policy(name)]()


__all__ = ["POLICIES", "NetworkPlan", "NetworkPolicy", "PolicyInput", "make_policy", "parse_policy"]
