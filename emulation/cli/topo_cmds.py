"""`cassini topo ...`: look at, list and export cluster topologies."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Sequence
from typing import Any

from .common import add_force_argument, add_topology_argument


def register(sub: argparse._SubParsersAction) -> None:
    """Add `topo show`, `topo list` and `topo export`."""
    topo = sub.add_parser("topo", help="inspect and export cluster topologies")
    topo_sub = topo.add_subparsers(dest="topo_command", required=True, metavar="ACTION")

    show = topo_sub.add_parser("show", help="switches, links, oversubscription, chip ports")
    add_topology_argument(show)
    show.add_argument("--json", action="store_true", help="machine-readable output")
    show.add_argument("--links", action="store_true", help="list every link")
    show.set_defaults(handler=_show)

    listing = topo_sub.add_parser("list", help="built-in topologies and generators")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    listing.set_defaults(handler=_list)

    export = topo_sub.add_parser("export", help="write a topology as an editable JSON/YAML file")
    add_topology_argument(export)
    export.add_argument("--out", "-o", required=True, help="output file (.json, .yaml or .yml)")
    add_force_argument(export)
    export.set_defaults(handler=_export)


def _show(args: argparse.Namespace) -> int:
    from topologies.library import load_topology
    from topologies.summary import describe_topology

    info = describe_topology(load_topology(args.topology))
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print("\n".join(_render(info, all_links=args.links)))
    return 0


def _render(info: dict[str, Any], all_links: bool) -> list[str]:
    c = info["counts"]
    out = [
        f"topology {info['name']}: {c['servers']} servers ({c['gpus']} GPUs), "
        f"{c['switches']} switches, {c['links']} links",
    ]
    if info["description"]:
        out.append(f"  {info['description']}")
    ratios = ", ".join(f"{t} {r:g}:1" for t, r in info["oversubscription"].items())
    out.append(f"oversubscription (down:up capacity): {ratios or 'none'}")
    out.append("")
    rows: list[tuple[str, ...]] = [("switch", "tier", "ports", "down", "up", "chip ports")]
    rows += [
        (
            s["name"],
            s["tier"],
            str(s["port_count"]),
            str(s["downlinks"]),
            str(s["uplinks"]),
            _ranges(s["chip_ports"]),
        )
        for s in info["switches"]
    ]
    out += _table(rows)
    out.append("")
    groups: dict[tuple[str, float, float], int] = {}
    for ln in info["links"]:
        key = (ln["kind"], ln["gbps"], ln["delay_us"])
        groups[key] = groups.get(key, 0) + 1
    out.append("links:")
    out += [
        f"  {n:4d} x {kind:<10s} {gbps:g} Gbps, {delay:g} us"
        for (kind, gbps, delay), n in groups.items()
    ]
    if all_links:
        link_rows: list[tuple[str, ...]] = [("a", "b", "gbps", "delay_us", "chip ports")]
        link_rows += [
            (
                str(ln["a"]),
                ln["b"],
                f"{ln['gbps']:g}",
                f"{ln['delay_us']:g}",
                "<->".join(map(str, ln["chip_ports"])),
            )
            for ln in info["links"]
        ]
        out += ["  " + line for line in _table(link_rows)]
    out.append("")
    chip = info["chip"]
    if "error" in chip:
        out.append(f"chip: does not fit one chip: {chip['error']}")
    else:
        out.append(
            f"chip: {c['chip_ports']} ports ({_ranges(chip['ports'])}), "
            f"{c['loopback_pairs']} loopback pairs:"
        )
        pairs = [f"{a}<->{b}" for a, b in chip["loopback_pairs"]]
        for i in range(0, len(pairs), 8):
            out.append("  " + "  ".join(f"{p:<9s}" for p in pairs[i : i + 8]).rstrip())
    return out


def _list(args: argparse.Namespace) -> int:
    from topologies.summary import GENERATORS, builtin_summaries

    rows = builtin_summaries()
    generators = list(GENERATORS)
    if args.json:
        print(json.dumps({"builtin": rows, "generators": generators}, indent=2))
        return 0
    table: list[tuple[str, ...]] = [("name", "servers", "gpus", "switches", "links")]
    table += [
        (str(r["name"]), str(r["servers"]), str(r["gpus"]), str(r["switches"]), str(r["links"]))
        for r in rows
    ]
    print("\n".join(_table(table)))
    print("generators: " + ", ".join(generators) + "; or a .json/.yaml file")
    return 0


def _export(args: argparse.Namespace) -> int:
    from topologies.io import save_topology_file
    from topologies.library import load_topology
    from topologies.outputs import check_output

    topo = load_topology(args.topology)
    out = check_output(args.out, "file", args.force)
    save_topology_file(topo, out)
    print(
        f"wrote {out}: {topo.name}, {len(topo.servers)} servers, "
        f"{len(topo.switches)} switches, {len(topo.links)} links"
    )
    return 0


def _ranges(ports: Iterable[int]) -> str:
    """1,2,3,5 -> '1-3,5': chip port lists stay one short line."""
    spans: list[list[int]] = []
    for p in sorted(ports):
        if spans and p == spans[-1][1] + 1:
            spans[-1][1] = p
        else:
            spans.append([p, p])
    return ",".join(f"{a}-{b}" if b > a else f"{a}" for a, b in spans) or "-"


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]
