"""Small things a new user met on the command line (issue: a Mininet user's habits).

`program --dry-run` says how many entries it did not show; a busy P4Runtime
port is one line naming the address; `switch serve` on port 0 prints the
port it bound; `make p4`'s hint names what exists; `cassini clean` removes
lock files; the custom file refuses the wrong `mn` before Mininet's cleanup.
"""

from __future__ import annotations

import pytest

from emulation.cli import main


def test_program_dry_run_counts_the_entries_it_does_not_show(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Nothing listens on port 1: the dry run plans against an empty device.
    code = main(
        ["program", "-t", "cassini-testbed", "--dry-run", "--grpc", "127.0.0.1:1", "--timeout", "1"]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    shown = [line for line in out.splitlines() if line.startswith("  + logical_forward")]
    assert len(shown) == 3
    # 1,656 forwarding and 72 WRED entries are inserted; 3 are shown.
    assert "  + ... and 1,725 more" in out, out
