"""Topology generators, validation, files, the library and `cassini topo`."""

from __future__ import annotations

import dataclasses
import ipaddress
import json
from pathlib import Path

import pytest

from emulation.cli import main
from topologies.addressing import server_ip, server_mac
from topologies.errors import UserInputError
from topologies.generators import cassini_testbed, cassini_testbed_2gpu, fat_tree, leaf_spine
from topologies.io import (
    load_topology_file,
    save_topology_file,
    topology_from_dict,
    topology_to_dict,
)
from topologies.library import builtin_names, load_topology
from topologies.model import Link, Server, Switch, Topology
from topologies.tiers import oversubscription
from topologies.validate import validate


def _tiers(topo: Topology) -> dict[str, int]:
    counts: dict[str, int] = {}
    for sw in topo.switches:
        counts[sw.tier] = counts.get(sw.tier, 0) + 1
    return counts


def test_cassini_testbed_counts_and_layout() -> None:
    topo = cassini_testbed()
    assert topo.name == "cassini-testbed"
    assert len(topo.servers) == 24 and topo.total_gpus() == 24
    assert [s.name for s in topo.servers][:3] == ["s01", "s02", "s03"]
    assert topo.servers[-1].name == "s24"
    assert len(topo.switches) == 13 and len(topo.links) == 48
    assert _tiers(topo) == {"tor": 6, "agg": 4, "core": 3}
    assert all(s.nic_gbps == 50 for s in topo.servers)
    assert all(ln.delay_us == pytest.approx(1.0) for ln in topo.links)
    pairs = {frozenset((ln.a, ln.b)) for ln in topo.links}
    # each ToR links to both aggs of its pod and nothing else upward
    for t in range(1, 7):
        pod_aggs = ("agg1", "agg2") if t <= 3 else ("agg3", "agg4")
        other = ("agg3", "agg4") if t <= 3 else ("agg1", "agg2")
        assert all(frozenset((f"tor{t}", a)) in pairs for a in pod_aggs)
        assert not any(frozenset((f"tor{t}", a)) in pairs for a in other)
    for a in range(1, 5):
        assert all(frozenset((f"agg{a}", f"core{c}")) in pairs for c in range(1, 4))
    # four servers per ToR, in order
    assert frozenset(("s05", "tor2")) in pairs and frozenset(("s24", "tor6")) in pairs
    assert oversubscription(topo) == {"tor": 2.0, "agg": 1.0}


def test_two_gpu_variant() -> None:
    topo = cassini_testbed_2gpu()
    assert topo.name == "cassini-testbed-2gpu"
    assert len(topo.servers) == 6 and all(s.gpus == 2 for s in topo.servers)
    assert topo.total_gpus() == 12
    assert _tiers(topo) == {"tor": 3, "agg": 2}
    assert len(topo.links) == 12
    assert oversubscription(topo) == {"tor": 2.0}


def test_fat_tree_counts() -> None:
    topo = fat_tree(4)
    assert len(topo.servers) == 16 and len(topo.switches) == 20
    assert _tiers(topo) == {"edge": 8, "agg": 8, "core": 4}
    assert len(topo.links) == 48
    assert oversubscription(topo) == {"edge": 1.0, "agg": 1.0}
    big = fat_tree(8)
    assert len(big.servers) == 128 and len(big.switches) == 80
    with pytest.raises(UserInputError, match="even"):
        fat_tree(3)


def test_leaf_spine_counts_and_ratio() -> None:
    topo = leaf_spine(16, 8, 16)
    assert len(topo.servers) == 256 and len(topo.switches) == 24
    assert len(topo.links) == 256 + 16 * 8
    assert oversubscription(topo) == {"leaf": 2.0}
    assert oversubscription(leaf_spine(4, 2, 4, uplink_gbps=100)) == {"leaf": 1.0}
    assert leaf_spine(2, 2, 2, gpus_per_server=4).total_gpus() == 16
    assert leaf_spine(2, 2, 2, name="mine").name == "mine"
    with pytest.raises(UserInputError, match="spines"):
        leaf_spine(2, 0, 2)


def test_addresses_are_unique_valid_and_deterministic() -> None:
    topo = leaf_spine(40, 4, 100)  # 4000 servers
    macs = [s.mac for s in topo.servers]
    ips = [s.ip for s in topo.servers]
    assert len(set(macs)) == 4000 and len(set(ips)) == 4000
    for mac in macs[:300]:
        first = int(mac[:2], 16)
        assert first & 0x02 and not first & 0x01  # locally administered unicast
    net = ipaddress.IPv4Network("10.0.0.0/8")
    for ip in ips:
        addr = ipaddress.IPv4Address(ip)
        assert addr in net and addr not in (net.network_address, net.broadcast_address)
    assert server_mac(1) == "02:00:00:00:00:01" and server_ip(1) == "10.0.0.1"
    assert server_mac(256) == "02:00:00:00:01:00" and server_ip(256) == "10.0.1.0"
    assert cassini_testbed() == cassini_testbed()


def _tiny(**changes: object) -> Topology:
    topo = Topology(
        "tiny",
        (Server("s1", mac=server_mac(1)), Server("s2", mac=server_mac(2))),
        (Switch("tor1", "tor"), Switch("tor2", "tor"), Switch("spine1", "spine")),
        (
            Link("s1", "tor1", 50),
            Link("s2", "tor2", 50),
            Link("tor1", "spine1", 50),
            Link("tor2", "spine1", 50),
        ),
    )
    return dataclasses.replace(topo, **changes)  # type: ignore[arg-type]


def test_validate_accepts_sound_topology() -> None:
    validate(_tiny())


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"links": (Link("s1", "tor1", 50), Link("s2", "tor3", 50))},
            r"links\[1\] \(s2 - tor3\): no node named 'tor3'. Did you mean 'tor2'",
        ),
        (
            {"switches": (Switch("tor1", "tor"), Switch("tor1", "tor"))},
            r"switches\[1\]: duplicate node name 'tor1'",
        ),
        (
            {"switches": (Switch("s1", "tor"),)},
            r"switches\[0\]: duplicate node name 's1' \(also servers\[0\]\)",
        ),
        ({"switches": (Switch("tor1", "torr"),)}, r"no tier named 'torr'. Did you mean 'tor'"),
    ],
)
def test_validate_names_bad_nodes(changes: dict[str, object], message: str) -> None:
    with pytest.raises(UserInputError, match=message):
        validate(_tiny(**changes))


def _tiny_links(*extra: Link, replace: int | None = None) -> tuple[Link, ...]:
    links = list(_tiny().links)
    if replace is not None:
        links[replace] = extra[0]
        return tuple(links)
    return tuple(links) + extra


@pytest.mark.parametrize(
    ("links", "message"),
    [
        (_tiny_links(Link("tor1", "spine1", -5), replace=2), r"links\[2\].*gbps: must be > 0"),
        (_tiny_links(Link("tor1", "spine1", 50, -1), replace=2), r"links\[2\].*delay_us"),
        (_tiny_links(Link("spine1", "tor1", 50)), r"links\[4\].*duplicate link.*links\[2\]"),
        (_tiny_links(Link("s1", "s2", 50)), r"links\[4\] \(s1 - s2\): links two servers"),
        (_tiny_links(Link("s1", "tor2", 50)), r"servers\[0\] \(s1\): must link to exactly one"),
        (_tiny_links(Link("tor1", "tor1", 50)), r"two different nodes"),
        (_tiny().links[1:], r"servers\[0\] \(s1\): must link to exactly one switch, links to none"),
        (
            (Link("s1", "tor1", 50), Link("s2", "tor2", 50), Link("tor2", "spine1", 50)),
            r"servers\[1\] \(s2\): no path to server s1",
        ),
    ],
)
def test_validate_names_bad_links(links: tuple[Link, ...], message: str) -> None:
    with pytest.raises(UserInputError, match=message):
        validate(_tiny(links=links))


def test_validate_rejects_stray_switch() -> None:
    extra = (*_tiny().switches, Switch("spine2", "spine"))
    with pytest.raises(UserInputError, match=r"switches\[3\] \(spine2\): not connected"):
        validate(_tiny(switches=extra))


def test_validate_addresses() -> None:
    dup = (Server("s1", mac=server_mac(1)), Server("s2", mac=server_mac(1)))
    with pytest.raises(UserInputError, match=r"servers\[1\] \(s2\).mac: .* already used by s1"):
        validate(_tiny(servers=dup))
    multicast = (Server("s1", mac="01:00:5e:00:00:01"), Server("s2"))
    with pytest.raises(UserInputError, match=r"servers\[0\] \(s1\).mac"):
        validate(_tiny(servers=multicast))
    bad_ip = (Server("s1", ip="10.0.0.300"), Server("s2"))
    with pytest.raises(UserInputError, match=r"servers\[0\] \(s1\).ip"):
        validate(_tiny(servers=bad_ip))


# ---- files -------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".json", ".yaml", ".yml"])
@pytest.mark.parametrize("make", [cassini_testbed, cassini_testbed_2gpu, lambda: fat_tree(4)])
def test_save_load_round_trip(tmp_path: Path, suffix: str, make: object) -> None:
    topo = make()  # type: ignore[operator]
    path = tmp_path / f"topo{suffix}"
    save_topology_file(topo, path)
    assert load_topology_file(path) == topo
    assert topology_from_dict(topology_to_dict(topo)) == topo


def test_chip_ports_round_trip(tmp_path: Path) -> None:
    topo = dataclasses.replace(cassini_testbed_2gpu(), chip_ports=tuple(range(100, 118)))
    save_topology_file(topo, tmp_path / "t.yaml")
    assert load_topology_file(tmp_path / "t.yaml").chip_ports == tuple(range(100, 118))


def test_minimal_file_fills_defaults(tmp_path: Path) -> None:
    path = tmp_path / "mini.yaml"
    path.write_text(
        "name: mini\n"
        "servers: [{name: a}, {name: b, gpus: 4}]\n"
        "switches: [{name: sw, tier: tor}]\n"
        "links:\n  - {a: a, b: sw, gbps: 100}\n  - {a: b, b: sw, gbps: 100, delay_us: 2}\n"
    )
    topo = load_topology_file(path)
    assert topo.server("a").mac == server_mac(1) and topo.server("b").ip == server_ip(2)
    assert topo.server("b").gpus == 4 and topo.server("a").nic_gbps == 50.0
    assert topo.links[0].delay_us == 1.0 and topo.links[1].delay_us == 2.0


def _write_testbed_json(tmp_path: Path, edit: object) -> Path:
    data = topology_to_dict(cassini_testbed())
    edit(data)  # type: ignore[operator]
    path = tmp_path / "topo.json"
    path.write_text(json.dumps(data, indent=2))
    return path


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda d: d["links"][3].update(gbps=-5),
            r"topo.json: links\[3\].gbps: must be > 0, got -5",
        ),
        (
            lambda d: d["links"][3].update(gbps="fast"),
            r"topo.json: links\[3\].gbps: expected a number",
        ),
        (lambda d: d["links"][3].pop("gbps"), r"topo.json: links\[3\].gbps: missing"),
        (
            lambda d: d["links"][36].update(b="core9"),
            r"topo.json: links\[36\] \(agg1 - core9\): no node named 'core9'",
        ),
        (
            lambda d: d["switches"].append({"name": "tor2", "tier": "tor"}),
            r"topo.json: switches\[13\]: duplicate node name 'tor2'",
        ),
        (
            lambda d: d["links"].pop(0),
            r"topo.json: servers\[0\] \(s01\): must link to exactly one switch, links to none",
        ),
        (
            lambda d: d["links"][0].update(gpbs=50),
            r"topo.json: links\[0\]: no field named 'gpbs'. Did you mean 'gbps'",
        ),
        (lambda d: d.pop("servers"), r"topo.json: servers: missing"),
        (lambda d: d["servers"][2].update(gpus=0), r"topo.json: servers\[2\].gpus: must be >= 1"),
    ],
)
def test_bad_json_files_name_the_field(tmp_path: Path, edit: object, message: str) -> None:
    path = _write_testbed_json(tmp_path, edit)
    with pytest.raises(UserInputError, match=message):
        load_topology_file(path)


def test_malformed_json_reports_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text(
        '{\n  "name": "x",\n  "servers": [\n    {"name": "s1"}\n    {"name": "s2"}\n  ]\n}\n'
    )
    with pytest.raises(UserInputError, match=r"broken.json:5:5: invalid JSON"):
        load_topology_file(path)


def test_malformed_yaml_reports_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("name: x\nservers:\n  - {name: s1\n  - {name: s2}\n")
    with pytest.raises(UserInputError, match=r"broken.yaml:4:\d+: invalid YAML"):
        load_topology_file(path)


def test_yaml_field_errors(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(
        "name: t\nservers: [{name: s1}, {name: s2}]\nswitches: [{name: tor1, tier: tor}]\n"
        "links:\n  - {a: s1, b: tor1, gbps: 50}\n  - {a: s2, b: tor1, gbps: 0}\n"
    )
    with pytest.raises(UserInputError, match=r"t.yaml: links\[1\].gbps: must be > 0, got 0"):
        load_topology_file(path)
    path.write_text("- just\n- a list\n")
    with pytest.raises(UserInputError, match=r"t.yaml: top level: expected a mapping"):
        load_topology_file(path)


def test_file_type_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match=r"unknown topology file type '.txt'"):
        load_topology_file(tmp_path / "t.txt")
    with pytest.raises(UserInputError, match=r"nope.json: no such topology file"):
        load_topology_file(tmp_path / "nope.json")


# ---- library -----------------------------------------------------------------


def test_library_specs(tmp_path: Path) -> None:
    assert builtin_names() == ["cassini-testbed", "cassini-testbed-2gpu"]
    assert load_topology("cassini-testbed") == cassini_testbed()
    assert load_topology("cassini-testbed-2gpu") == cassini_testbed_2gpu()
    ls = load_topology("leaf-spine:16:8:16")
    assert len(ls.servers) == 256 and len(ls.switches) == 24
    assert load_topology("fat-tree:4") == fat_tree(4)
    path = tmp_path / "mine.yaml"
    save_topology_file(fat_tree(4), path)
    assert load_topology(str(path)) == fat_tree(4)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("cassini-testbd", r"no topology named 'cassini-testbd'. Did you mean 'cassini-testbed'"),
        ("leaf-spine:16:x:16", r"SPINES must be an integer, got 'x'"),
        ("leaf-spine:16:8", r"leaf-spine takes 3 number"),
        ("fat-tre:4", r"Did you mean 'fat-tree'"),
        ("fat-tree:5", r"even"),
        ("fat-tree:0", r"K must be >= 1"),
    ],
)
def test_library_errors(spec: str, message: str) -> None:
    with pytest.raises(UserInputError, match=message):
        load_topology(spec)


# ---- CLI ---------------------------------------------------------------------


def test_cli_topo_show_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topo", "show", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["name"] == "cassini-testbed"
    assert info["counts"] == {
        "servers": 24,
        "gpus": 24,
        "switches": 13,
        "links": 48,
        "chip_ports": 72,
        "loopback_pairs": 24,
    }
    assert info["oversubscription"] == {"tor": 2.0, "agg": 1.0}
    tor1 = next(s for s in info["switches"] if s["name"] == "tor1")
    assert tor1["tier"] == "tor" and tor1["port_count"] == 6 and tor1["uplinks"] == 2
    assert len(tor1["chip_ports"]) == 6
    assert len(info["chip"]["loopback_pairs"]) == 24
    assert sorted(p for pair in info["chip"]["loopback_pairs"] for p in pair) == list(range(25, 73))


def test_cli_topo_show_human_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topo", "show", "--topology", "fat-tree:4"]) == 0
    out = capsys.readouterr().out
    assert "fat-tree-4: 16 servers (16 GPUs), 20 switches, 48 links" in out
    assert "chip: 80 ports (1-80), 32 loopback pairs" in out
    assert main(["topo", "show", "--topology", "cassini-testbd"]) == 2
    assert "Did you mean 'cassini-testbed'" in capsys.readouterr().err


def test_cli_topo_show_too_big_for_one_chip(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topo", "show", "-t", "leaf-spine:16:8:16", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["counts"]["servers"] == 256 and info["counts"]["chip_ports"] is None
    assert "needs 512 chip ports" in info["chip"]["error"]


def test_cli_topo_export_then_load(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "tb.yaml"
    assert main(["topo", "export", "--topology", "cassini-testbed-2gpu", "--out", str(out)]) == 0
    assert load_topology_file(out) == cassini_testbed_2gpu()
    assert main(["topo", "export", "--out", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["topo", "export", "--out", str(out), "--force"]) == 0
    assert load_topology_file(out) == cassini_testbed()



@pytest.mark.parametrize(
    ("name", "shown"),
    [("s/01", "'s/01'"), ("s 01", "'s 01'"), ("s" * 300, "(302 characters)"), ("..", "'..'")],
)
def test_a_server_name_that_is_not_a_safe_name_is_refused_before_a_fabric_is_built(
    tmp_path, name, shown
) -> None:
    doc = {
        "name": "t",
        "servers": [{"name": name}, {"name": "s02"}],
        "switches": [{"name": "tor1", "tier": "tor"}],
        "links": [{"a": name, "b": "tor1", "gbps": 50}, {"a": "s02", "b": "tor1", "gbps": 50}],
    }
    path = tmp_path / "topo.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(UserInputError, match=r"topo.json: servers\[0\].name: node name ") as err:
        load_topology(str(path))
    assert shown in str(err.value) and len(str(err.value)) < len(str(path)) + 250


def test_a_yaml_alias_bomb_and_deep_nesting_are_one_line_without_growing(tmp_path) -> None:
    levels = ["a: &a [" + ",".join(['"lol"'] * 9) + "]"]
    for prev, cur in zip("abcdefgh", "bcdefghi", strict=True):
        levels.append(f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]")
    levels.append("name: *i")
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(levels) + "\n")
    with pytest.raises(UserInputError, match=r"bomb.yaml: its aliases expand to more than"):
        load_topology(str(bomb))
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000)
    with pytest.raises(UserInputError, match=r"deep.json: nested too deeply"):
        load_topology(str(deep))


def test_nan_and_huge_numbers_in_a_topology_are_refused(tmp_path) -> None:
    path = _write_testbed_json(tmp_path, lambda d: d["links"][0].update(delay_us=float("nan")))
    with pytest.raises(UserInputError, match=r"links\[0\].delay_us: expected a finite number"):
        load_topology_file(path)
    path = _write_testbed_json(tmp_path, lambda d: d["servers"][0].update(gpus=2**63))
    with pytest.raises(UserInputError, match=r"servers\[0\].gpus: must be <= "):
        load_topology_file(path)
