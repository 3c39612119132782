"""Reading and writing topology files (JSON or YAML, chosen by extension).

The format, the same in both syntaxes::

    name: my-cluster                 # required
    description: two racks           # optional
    servers:                         # required, at least one
      - name: s01                    # required, unique across servers and switches
        gpus: 1                      # optional, default 1
        nic_gbps: 50                 # optional, default 50
        mac: "02:00:00:00:00:01"     # optional, default derived from the position (1-based)
        ip: 10.0.0.1                 # optional, default derived from the position
    switches:
      - {name: tor1, tier: tor}      # tier: tor|leaf|edge, agg|spine, core
    links:                           # one entry per cable; both directions get `gbps`
      - {a: s01, b: tor1, gbps: 50, delay_us: 1.0}   # delay_us optional, default 1.0
    chip_ports: [1, 2, 3]            # optional: dev_ports for the chip mapping, in the
                                     # order servers then switch links take them

Every server links to exactly one switch. Errors name the file and the field,
e.g. ``topo.json: links[3].gbps: must be > 0, got -5``. `cassini topo export`
writes the built-in testbed in this format as a starting point.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from .addressing import server_ip, server_mac
from .datafile import data_format, read_data_file
from .errors import UserInputError, did_you_mean
from .model import Link, Server, Switch, Topology
from .names import shown
from .outputs import write_file
from .validate import validate

_TOP_FIELDS = ("name", "description", "servers", "switches", "links", "chip_ports")
_SERVER_FIELDS = ("name", "gpus", "nic_gbps", "mac", "ip")
_SWITCH_FIELDS = ("name", "tier")
_LINK_FIELDS = ("a", "b", "gbps", "delay_us")


def load_topology_file(path: str | Path) -> Topology:
    """Parse and validate a topology file; every error starts with the file name."""
    return topology_from_dict(read_data_file(path, "topology"), source=str(path))


def save_topology_file(topo: Topology, path: str | Path) -> None:
    """Write `topo` as JSON or YAML by the file's extension."""
    p = Path(path)
    fmt = data_format(p, "topology")
    data = topology_to_dict(topo)
    if fmt == "json":
        text = json.dumps(data, indent=2) + "\n"
    else:
        text = yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100)
    write_file(p, text)


def topology_to_dict(topo: Topology) -> dict[str, Any]:
    """Plain dict in the file format, addresses written out so the file is complete."""
    data: dict[str, Any] = {"name": topo.name}
    if topo.description:
        data["description"] = topo.description
    data["servers"] = [
        {"name": s.name, "gpus": s.gpus, "nic_gbps": s.nic_gbps, "mac": s.mac, "ip": s.ip}
        for s in topo.servers
    ]
    data["switches"] = [{"name": s.name, "tier": s.tier} for s in topo.switches]
    data["links"] = [
        {"a": ln.a, "b": ln.b, "gbps": ln.gbps, "delay_us": ln.delay_us} for ln in topo.links
    ]
    if topo.chip_ports:
        data["chip_ports"] = list(topo.chip_ports)
    return data


def topology_from_dict(data: Any, source: str = "topology") -> Topology:
    """Build and validate a Topology from the file format; `source` prefixes errors."""
    try:
        topo = _from_dict(data)
        validate(topo)
    except UserInputError as err:
        raise UserInputError(f"{source}: {err}") from None
    return topo


def _from_dict(data: Any) -> Topology:
    top = _mapping(data, "top level", _TOP_FIELDS)
    name = _string(top, "name", "")
    description = _string(top, "description", "", required=False)
    servers = tuple(
        _server(item, f"servers[{i}]", i + 1)
        for i, item in enumerate(_list(top, "servers", required=True))
    )
    switches = tuple(
        _switch(item, f"switches[{i}]") for i, item in enumerate(_list(top, "switches"))
    )
    links = tuple(_link(item, f"links[{i}]") for i, item in enumerate(_list(top, "links")))
    chip_ports = tuple(
        _int_value(v, f"chip_ports[{i}]", minimum=0) for i, v in enumerate(_list(top, "chip_ports"))
    )
    return Topology(name, servers, switches, links, description, chip_ports)


def _server(item: Any, where: str, index: int) -> Server:
    m = _mapping(item, where, _SERVER_FIELDS)
    return Server(
        name=_string(m, "name", where),
        gpus=_int_value(m.get("gpus", 1), f"{where}.gpus", minimum=1),
        nic_gbps=_number(m, "nic_gbps", where, default=50.0, positive=True),
        mac=_string(m, "mac", where, required=False) or server_mac(index),
        ip=_string(m, "ip", where, required=False) or server_ip(index),
    )


def _switch(item: Any, where: str) -> Switch:
    m = _mapping(item, where, _SWITCH_FIELDS)
    return Switch(name=_string(m, "name", where), tier=_string(m, "tier", where))


def _link(item: Any, where: str) -> Link:
    m = _mapping(item, where, _LINK_FIELDS)
    return Link(
        a=_string(m, "a", where),
        b=_string(m, "b", where),
        gbps=_number(m, "gbps", where, positive=True),
        delay_us=_number(m, "delay_us", where, default=1.0),
    )


def _mapping(value: Any, where: str, fields: tuple[str, ...]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise UserInputError(f"{where}: expected a mapping of fields, got {_kind(value)}")
    for key in value:
        if key not in fields:
            raise UserInputError(f"{where}: " + did_you_mean(str(key)[:40], fields, "field"))
    return value


def _list(m: Mapping[str, Any], key: str, required: bool = False) -> list[Any]:
    if key not in m:
        if required:
            raise UserInputError(f"{key}: missing (a list is required)")
        return []
    value = m[key]
    if not isinstance(value, list):
        raise UserInputError(f"{key}: expected a list, got {_kind(value)}")
    return value


def _field(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _string(m: Mapping[str, Any], key: str, where: str, required: bool = True) -> str:
    if key not in m or m[key] is None:
        if required:
            raise UserInputError(f"{_field(where, key)}: missing")
        return ""
    value = m[key]
    if not isinstance(value, str):
        raise UserInputError(f"{_field(where, key)}: expected a string, got {shown(value)}")
    return value


def _number(
    m: Mapping[str, Any],
    key: str,
    where: str,
    default: float | None = None,
    positive: bool = False,
) -> float:
    field = _field(where, key)
    if key not in m:
        if default is None:
            raise UserInputError(f"{field}: missing")
        return default
    value = m[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UserInputError(f"{field}: expected a number, got {shown(value)}")
    if not math.isfinite(value):
        raise UserInputError(f"{field}: expected a finite number, got {value}")
    if positive and not value > 0:
        raise UserInputError(f"{field}: must be > 0, got {value}")
    if not positive and value < 0:
        raise UserInputError(f"{field}: must be >= 0, got {value}")
    return float(value)


def _int_value(value: Any, field: str, minimum: int, maximum: int = 2**31 - 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserInputError(f"{field}: expected an integer, got {shown(value)}")
    if value < minimum:
        raise UserInputError(f"{field}: must be >= {minimum}, got {shown(value)}")
    if value > maximum:
        raise UserInputError(f"{field}: must be <= {maximum}, got {shown(value)}")
    return value


def _kind(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__
