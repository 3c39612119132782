"""The flags of commands that run jobs on the fabric (`fabric run`, `emulate`, `profile`):
--transport, --policy and --recalibrate, each checked before anything is built."""

from __future__ import annotations

import argparse

from .common import AUTO_SCALE


def add_transport_argument(parser: argparse.ArgumentParser) -> None:
    """--transport, as `fabric run` and `emulate` take it."""
    parser.add_argument(
        "--transport",
        type=transport_name,
        default="tcp",
        help="tcp: kernel TCP with ECN (default); roce: RoCEv2 with DCQCN, hosts honour PFC",
    )


def transport_name(text: str) -> str:
    """A --transport value, or argparse's one-line error naming it."""
    from emulation.jobs.run_settings import TRANSPORTS

    if text not in TRANSPORTS:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(TRANSPORTS)}")
    return text


def add_policy_argument(parser: argparse.ArgumentParser) -> None:
    """--policy, as `fabric run` and `emulate` take it (checked with --transport by
    `fabric_policy`)."""
    from scheduler.policies import POLICIES

    parser.add_argument(
        "--policy",
        default="none",
        help=f"network policy: {', '.join(POLICIES)} (default none); the fabric runs none, "
        "mltcp (with --transport roce: the hosts' DCQCN grows more aggressive with the "
        "iteration's bytes sent, no shifts), crux and echelon (TCP: each flow's class in the "
        "switch's strict-priority queues, from the policy's plan at each decision)",
    )


def fabric_policy(policy: str, transport: str) -> str:
    """A --policy the fabric can run with `transport`, else a one-line UserInputError."""
    from emulation.jobs.run_settings import CLASS_POLICIES, FABRIC_POLICIES
    from scheduler.policies import parse_policy
    from topologies.errors import UserInputError

    name = parse_policy(policy)
    if name == "mltcp" and transport != "roce":
        raise UserInputError(
            f"--policy mltcp runs in RoCE's DCQCN: add --transport roce, not {transport}"
        )
    if name in CLASS_POLICIES and transport != "tcp":
        raise UserInputError(
            f"--policy {name} sets a queue class per flow, which would move RoCE data out of "
            f"its PFC class: use --transport tcp, not {transport}"
        )
    if name in HOST_RATE_POLICIES:
        raise UserInputError(
            f"--policy {name} sets host rates, which neither the fabric nor `cassini simulate` "
            f"(classes only) enforces; it is a plan only (scheduler/policies). The fabric runs "
            f"{', '.join(FABRIC_POLICIES)}"
        )
    if name not in FABRIC_POLICIES:
        raise UserInputError(
            f"--policy {name}: the fabric does not install its classes or rates; "
            f"`cassini simulate --policy {name}` runs it (fabric: {', '.join(FABRIC_POLICIES)})"
        )
    return name


# (our choice) Policies whose plan paces hosts: no command enforces them (the fabric
# installs classes and DCQCN, the simulator honours classes only).
HOST_RATE_POLICIES = ("echelon-rate",)


def check_recalibrate(scale: float | str, recalibrate: bool) -> None:
    """--recalibrate only measures for --scale auto; alone it would be silently ignored."""
    from topologies.errors import UserInputError

    if recalibrate and scale != AUTO_SCALE:
        raise UserInputError(
            f"--recalibrate measures this machine for --scale auto; add --scale auto "
            f"(--scale is {scale:g})"
            if isinstance(scale, float)
            else "--recalibrate needs --scale auto"
        )
