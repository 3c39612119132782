"""Which running processes are a switch a run may leave behind?

A fabric's switch is `cassini switch serve` (with its packet loop, `python
-m` `DATAPATH_MODULE`) or bmv2's `simple_switch_grpc`, whose flags `switch
serve` takes. Each names the interfaces it attaches as `-i PORT@IFACE`, so
`cassini clean` (`emulation.housekeeping.clean`, given `is_switch_process`) finds those
on a run's interfaces even when no run file recorded them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

# The packet loop of a software switch runs as `python -m` this module.
DATAPATH_MODULE = "emulation.softswitch.datapath_process"
BMV2_PROCESS = "simple_switch_grpc"  # bmv2 as the fabric's switch (emulation.fabric.bmv2_switch)


def is_switch_process(argv: Sequence[str]) -> bool:
    """Is this command line a software switch, its packet loop, or bmv2?

    >>> is_switch_process(["cassini", "switch", "serve", "-i", "1@cas1p1"])
    True
    >>> is_switch_process(["/usr/bin/simple_switch_grpc", "-i", "1@cas1p1"])
    True
    >>> is_switch_process(["sleep", "30"])
    False
    """
    serving = ("switch" in argv and "serve" in argv) or (
        bool(argv) and Path(argv[0]).name == BMV2_PROCESS
    )
    return serving or DATAPATH_MODULE in argv
