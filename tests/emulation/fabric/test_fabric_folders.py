"""`fabric up --log-dir/--pcap`: nothing is written through a link planted in the
folders (before the check with --force, or after it), and a full disk is one line.

Root followed such links: `D/chip.log -> a root-owned 0600 file` planted after the
output check was overwritten on the first try, and with --force so were pcaps.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from emulation.fabric.capture import pcap_name
from emulation.fabric.emulated import EmulatedFabric
from emulation.fabric.mininet_net import switch_ifname
from emulation.fabric.options import FabricOptions
from emulation.softswitch.switch import READY_PATTERN
from tests.helpers import CASSINI
from tests.helpers.full_disk import fill, tiny_tmpfs
from tests.helpers.leftovers import leftovers
from topologies.library import load_topology

TOPOLOGY = "leaf-spine:2:1:2"


@pytest.mark.root
def test_links_planted_after_the_check_are_not_written_through(prefix: str, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("root's")
    victim.chmod(0o600)
    folder = tmp_path / "D"
    topo = load_topology(TOPOLOGY)
    options = FabricOptions(scale=0.001, prefix=prefix, pcap_dir=folder, log_dir=folder)
    fabric = EmulatedFabric(topo, options)  # the output check is done here
    port = fabric.chip.server_port["s01"]
    pcap = pcap_name(port, switch_ifname(prefix, port))
    folder.mkdir(exist_ok=True)  # the race: another user fills D after the check
    (folder / "chip.log").symlink_to(victim)
    (folder / pcap).symlink_to(victim)
    with fabric:
        assert fabric.ping([("s01", "s04")])[("s01", "s04")] is not None
        assert fabric.describe().log_dir == folder
    assert victim.read_text() == "root's"
    assert not (folder / "chip.log").is_symlink() and not (folder / pcap).is_symlink()
    assert READY_PATTERN.search((folder / "chip.log").read_text())
    assert (folder / pcap).stat().st_size > 24  # the capture landed in D, whole
    assert fabric.capture_problems == [] and fabric.output_problems == []
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@pytest.mark.root
def test_force_replaces_a_folder_of_planted_links_instead_of_writing_through_them(
    prefix: str, tmp_path: Path
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("root's")
    folder = tmp_path / "D"
    folder.mkdir()
    (folder / "chip.log").symlink_to(victim)
    argv = [CASSINI, "fabric", "up", "-t", TOPOLOGY, "--prefix", prefix, "--scale", "0.001",
            "--log-dir", str(folder), "--check"]  # fmt: skip
    refused = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "already exists and is not empty" in refused.stderr
    done = subprocess.run([*argv, "--force"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert victim.read_text() == "root's"
    assert READY_PATTERN.search((folder / "chip.log").read_text())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["D", "victim"]
    assert leftovers(prefix) == []


@pytest.mark.root
def test_a_log_dir_on_a_full_disk_is_one_line_and_the_fabric_still_checks(
    prefix: str, tmp_path: Path
) -> None:
    # It ended in three chained tracebacks.
    with tiny_tmpfs(tmp_path / "disk") as disk:
        fill(disk)
        result = subprocess.run(
            [CASSINI, "fabric", "up", "-t", TOPOLOGY, "--prefix", prefix, "--scale", "0.001",
             "--log-dir", str(disk / "logs"), "--check"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        logs = sorted(p.name for p in (disk / "logs").iterdir())
    assert "Traceback" not in result.stderr and "Exception" not in result.stderr, result.stderr
    assert result.returncode == 1, result.stderr
    assert "check: 12/12 server pairs answered one ping" in result.stdout
    errors = [line for line in result.stderr.splitlines() if line.startswith("cassini: error:")]
    assert errors == [
        f"cassini: error: --log-dir {disk}/logs: chip.log cut short (No space left on device)"
    ]
    assert logs == ["chip.log"]
    assert leftovers(prefix) == []
