"""A topology is refused, in one line of numbers, before anything is built when the
target cannot hold it: entries per table against the P4Info's sizes, a Read cap, a
Tofino's panel cages (controlplane.fit, emulation.fabric.target_limits). The package's own
forwarding table holds every fabric that maps onto one chip, so the table refusals
are shown with the P4Info's old 4,096 (`_resized`)."""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

import pytest

from controlplane.compile import FORWARD_TABLE, WRED_TABLE
from controlplane.fit import (
    P4INFO_ONLY,
    TOFINO,
    DoesNotFit,
    TargetLimits,
    check_fit,
    fit,
    topology_needs,
)
from controlplane.p4info import P4InfoIndex, index_p4info, load_p4info
from controlplane.program import topology_entries
from controlplane.settings import WredSettings
from emulation.fabric.target_limits import TARGET_LIMITS, check_fabric_fit, target_limits
from emulation.softswitch.service_limits import read_capacity
from tests.helpers import CASSINI
from topologies.chip_mapping import CPU_PORT, MAX_SOFTWARE_PORT, map_to_chip
from topologies.errors import UserInputError
from topologies.library import load_topology


def _resized(p4: P4InfoIndex, table: str, size: int) -> P4InfoIndex:
    """The P4Info with `table`'s size changed (the one source of table sizes)."""
    message = type(p4.p4info)()
    message.CopyFrom(p4.p4info)
    (found,) = [t for t in message.tables if t.preamble.name == table]
    found.size = size
    return index_p4info(message)


OLD_TABLE = 4_096  # logical_forward's size before issue 31


def _old(p4: P4InfoIndex | None = None) -> P4InfoIndex:
    return _resized(p4 or load_p4info(), FORWARD_TABLE, OLD_TABLE)


def test_the_large_leaf_spine_needs_what_the_issue_counted() -> None:
    topo = load_topology("leaf-spine:8:4:16")
    needs = topology_needs(topo, map_to_chip(topo))
    assert dict(needs.entries) == {FORWARD_TABLE: 23_936, WRED_TABLE: 192}
    assert (needs.chip_ports, needs.cables, needs.hosts) == (192, 32, 128)
    assert needs.veths(TARGET_LIMITS["softswitch"]) == 256  # two per server cable
    assert needs.veths(TARGET_LIMITS["bmv2"]) == 256 + 64  # and two per loopback cable


def test_the_counts_are_those_of_the_entries_cassini_program_installs() -> None:
    p4 = load_p4info()
    for name in ("cassini-testbed", "fat-tree:4", "leaf-spine:4:2:8"):
        topo = load_topology(name)
        chip = map_to_chip(topo)
        installed = Counter(e.table for e in topology_entries(topo, chip, WredSettings(), p4))
        assert dict(topology_needs(topo, chip, p4).entries) == dict(installed)


def test_the_testbed_fits_every_target() -> None:
    p4 = load_p4info()
    topo = load_topology("cassini-testbed")
    needs = topology_needs(topo, map_to_chip(topo), p4)
    assert sum(needs.entries.values()) == 1_728
    assert needs.panel_cages == 36  # 72 ports at 50G, two per 100G cage
    for limits in (*(target_limits(t, p4) for t in TARGET_LIMITS), TOFINO, P4INFO_ONLY):
        result = fit(needs, p4, limits)
        assert result.fits and result.shortfalls == ()
        assert "1,656 in CassiniIngress.logical_forward" in result.message
    assert check_fabric_fit(topo, map_to_chip(topo), "softswitch").fits


def test_every_fabric_one_chip_carries_fits_the_forwarding_table() -> None:
    """One entry per (chip port, destination server) at most, and a server is a chip
    port: 509 x 509 entries bound every fabric `map_to_chip` accepts."""
    p4 = load_p4info()
    chip_ports = MAX_SOFTWARE_PORT - 1  # 1..510 without the CPU port
    assert CPU_PORT <= MAX_SOFTWARE_PORT and chip_ports == 509
    assert chip_ports * chip_ports <= p4.table(FORWARD_TABLE).size == 262_144
    for name, forwarding in (("leaf-spine:8:4:16", 23_936), ("leaf-spine:16:4:16", 97_024)):
        topo = load_topology(name)
        result = check_fabric_fit(topo, map_to_chip(topo), "softswitch", p4)
        assert result.fits and result.needs.entries[FORWARD_TABLE] == forwarding
        assert f"{forwarding:,} in CassiniIngress.logical_forward" in result.message


def test_a_forwarding_table_too_small_is_one_line_of_numbers_and_the_knob() -> None:
    p4 = _old()
    topo = load_topology("leaf-spine:8:4:16")
    result = fit(topology_needs(topo, map_to_chip(topo), p4), p4, P4INFO_ONLY)
    (short,) = result.shortfalls
    assert (short.what, short.needed, short.available) == (
        f"entries in {FORWARD_TABLE}",
        23_936,
        4_096,
    )
    message = result.message
    assert "\n" not in message
    assert message.startswith(
        "leaf-spine-8x4x16 does not fit the device: needs 23,936 entries in "
        "CassiniIngress.logical_forward; the P4 program holds 4,096 (one entry per chip "
        "port and destination server: 192 ports x 128 servers here;"
    )
    assert "`size` is at least 23,936" in message


def test_the_size_comes_from_the_p4info() -> None:
    p4 = load_p4info()
    topo = load_topology("leaf-spine:8:4:16")
    chip = map_to_chip(topo)
    bigger = _resized(p4, FORWARD_TABLE, 32_768)
    assert fit(topology_needs(topo, chip, bigger), bigger, P4INFO_ONLY).fits
    undeclared = _resized(p4, FORWARD_TABLE, 0)  # no size: the target decides
    assert fit(topology_needs(topo, chip, undeclared), undeclared, P4INFO_ONLY).fits
    # One entry short of the testbed's 1,656 forwarding entries.
    tight = _resized(p4, FORWARD_TABLE, 1_655)
    testbed = load_topology("cassini-testbed")
    result = fit(topology_needs(testbed, map_to_chip(testbed), tight), tight, P4INFO_ONLY)
    assert [(s.needed, s.available) for s in result.shortfalls] == [(1_656, 1_655)]


def test_the_software_switchs_read_cap_follows_the_p4info() -> None:
    """Its cap is every table full and every counter cell: a fabric whose tables fit
    is read back in one Read. A fixed cap (the old 20,000) is still counted."""
    p4 = load_p4info()
    topo = load_topology("leaf-spine:8:4:16")
    needs = topology_needs(topo, map_to_chip(topo), p4)
    assert target_limits("softswitch", p4).read_entities == read_capacity(p4) == 287_296
    assert target_limits("bmv2", p4).read_entities is None
    assert fit(needs, p4, target_limits("softswitch", p4)).fits
    smaller = _resized(p4, FORWARD_TABLE, 32_768)
    assert target_limits("softswitch", smaller).read_entities == 287_296 - 262_144 + 32_768
    fixed = TargetLimits("a capped switch", read_entities=20_000, read_knob="a larger cap")
    (short,) = fit(needs, p4, fixed).shortfalls
    assert (short.needed, short.available) == (24_128, 20_000)
    assert str(short).endswith("one Read of a capped switch returns at most 20,000 (a larger cap)")


def test_a_tofino_counts_its_panel_cages() -> None:
    p4 = load_p4info()
    topo = load_topology("leaf-spine:8:4:16")
    needs = topology_needs(topo, map_to_chip(topo), p4)
    (short,) = fit(needs, p4, TOFINO).shortfalls
    assert (short.needed, short.available) == (96, 64)  # 192 ports at 50G, two a cage
    small = TargetLimits("a small Tofino", panel_cages=35)
    testbed = load_topology("cassini-testbed")
    (cages,) = fit(topology_needs(testbed, map_to_chip(testbed), p4), p4, small).shortfalls
    assert (cages.needed, cages.available) == (36, 35)


def test_refusals_are_user_errors_before_any_write() -> None:
    p4 = _old()
    topo = load_topology("leaf-spine:8:4:16")
    chip = map_to_chip(topo)
    with pytest.raises(DoesNotFit) as refused:
        topology_entries(topo, chip, WredSettings(), p4)
    assert isinstance(refused.value, UserInputError)
    assert not refused.value.fit.fits
    with pytest.raises(DoesNotFit, match="does not fit the software switch"):
        check_fabric_fit(topo, chip, "softswitch", p4)
    with pytest.raises(DoesNotFit):
        check_fit(topology_needs(topo, chip, p4), p4, TOFINO)


def _one_line_refusal(argv: list[str]) -> str:
    done = subprocess.run([CASSINI, *argv], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_program_refuses_before_connecting(tmp_path: Path) -> None:
    """A dry run against no device at all: the refusal comes before the connection."""
    from google.protobuf import text_format

    p4info = tmp_path / "old.p4info.txtpb"
    p4info.write_text(text_format.MessageToString(_old().p4info))
    line = _one_line_refusal(
        ["program", "-t", "leaf-spine:8:4:16", "--dry-run", "--grpc", "127.0.0.1:1"]
        + ["--p4info", str(p4info)]
    )
    assert line.startswith(
        "cassini: error: leaf-spine-8x4x16 does not fit the device: needs 23,936 entries"
    )


@pytest.mark.root
def test_fabric_up_refuses_before_anything_is_built(tmp_path: Path) -> None:
    from emulation.housekeeping.prefixes import new_prefix
    from tests.helpers.leftovers import leftovers

    prefix = new_prefix("cas")
    logs = tmp_path / "logs"
    # The table holds every fabric one chip carries: what does not fit is the chip.
    argv = ["fabric", "up", "-t", "leaf-spine:16:8:16", "--prefix", prefix]
    line = _one_line_refusal([*argv, "--log-dir", str(logs)])
    assert line == (
        "cassini: error: topology 'leaf-spine-16x8x16' needs 512 chip ports but one chip "
        "has 509 (1..510 without CPU port 255)"
    )
    assert leftovers(prefix) == []
    assert not logs.exists()


@pytest.mark.root
def test_emulate_refuses_before_anything_is_built(tmp_path: Path) -> None:
    from emulation.housekeeping.prefixes import new_prefix
    from tests.helpers.leftovers import leftovers

    prefix = new_prefix("cas")
    out = tmp_path / "run"
    argv = ["emulate", "-t", "leaf-spine:16:8:16", "--iterations", "2", "--prefix", prefix]
    line = _one_line_refusal([*argv, "--out", str(out)])
    assert line.startswith("cassini: error: topology 'leaf-spine-16x8x16' needs 512 chip ports")
    assert leftovers(prefix) == []
    assert list(tmp_path.iterdir()) == []  # not even a staged results folder
