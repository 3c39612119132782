"""`fabric up --pcap`: a capture that could not record whole is said, and the run fails."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from emulation.fabric.capture import PCAP_HEADER_BYTES, capture_problem
from tests.helpers import CASSINI
from tests.helpers.leftovers import leftovers


def test_an_empty_or_cut_capture_is_a_problem_and_a_whole_one_is_not(tmp_path: Path) -> None:
    whole = tmp_path / "1-x.pcap"
    whole.write_bytes(b"\xd4\xc3\xb2\xa1" + b"\0" * (PCAP_HEADER_BYTES - 4) + b"frames")
    assert capture_problem(whole, "listening on x, link-type EN10MB\n12 packets captured") is None
    empty = tmp_path / "2-x.pcap"
    empty.write_bytes(b"")
    assert capture_problem(empty, "") == "empty (no pcap header)"
    cut = "tcpdump: pcap_dump_flush failed: No space left on device"
    assert capture_problem(whole, cut) == f"cut short: {cut}"
    assert capture_problem(tmp_path / "3-x.pcap", "") == "no file was written"


@pytest.mark.root
def test_fabric_up_onto_a_full_disk_names_the_empty_captures_and_exits_1(
    tmp_path: Path, prefix: str
) -> None:
    # It said "pcap: 4 ports" and exited 0 with 3 of 4 captures empty.
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(disk)], check=True)
    try:
        (disk / "filler").write_bytes(b"\0" * 12288)  # one 4 KiB block left: one capture
        result = subprocess.run(
            [CASSINI, "fabric", "up", "-t", "leaf-spine:2:1:2", "--prefix", prefix,
             "--grpc-server-addr", "127.0.0.1:0", "--pcap", str(disk / "p"), "--check"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        empty = sorted(p.name for p in (disk / "p").iterdir() if p.stat().st_size == 0)
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("cassini: error:")]
    assert len(empty) >= 2 and len(errors) == len(empty)
    for name, line in zip(empty, errors, strict=True):
        assert f"({name}): empty (no pcap header)" in line
    assert "Traceback" not in result.stderr
    assert leftovers(prefix) == []
