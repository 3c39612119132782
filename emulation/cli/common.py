"""Arguments several subcommands share, defined once so their help cannot drift."""

from __future__ import annotations

import argparse

from topologies.library import builtin_names

DEFAULT_TOPOLOGY = "cassini-testbed"


def topology_help() -> str:
    return (
        f"built-in name ({', '.join(builtin_names())}), generator "
        "(leaf-spine:LEAVES:SPINES:SERVERS_PER_LEAF, fat-tree:K) or a .json/.yaml file"
    )


def add_topology_argument(
    parser: argparse.ArgumentParser, default: str | None = DEFAULT_TOPOLOGY, purpose: str = ""
) -> None:
    """`--topology/-t`, as every command that reads a cluster takes it."""
    text = topology_help() if not purpose else f"{purpose}: {topology_help()}"
    if default is not None:
        text += f" (default {default})"
    parser.add_argument("--topology", "-t", default=default, help=text)
