"""How does Mininet's own `mn` start the testbed with the project's classes?

    .venv/bin/mn --custom emulation/fabric/mn_custom.py --topo cassini[,TOPOLOGY[,SCALE]] \\
       --switch cassini --controller none

`mn` executes this file and takes `topos`, `switches` and `hosts` from it:
`--topo cassini` builds `CassiniTopo` from a topology of `topologies/`
(default the testbed, S = 0.001) with `CassiniHost`s (named namespaces,
static ARP, ECN on); `--switch cassini` is the software switch, which
programs itself in `start()` over P4Runtime with
`controlplane.program.program_topology`, as `cassini program` and the
fabric do, and prints its P4Runtime address and device id. Use the
project's `mn` (the venv's, `.venv/bin/mn`): Debian's runs Debian's
python3, which cannot import the project.

Every namespace, interface and process is recorded in a run file, so
`cassini clean` removes what a killed `mn` left. `mn` assigns every other
name this file defines to its own globals; this file defines `cleanup`,
so where `mn` would call Mininet's global cleanup (after an exception or
Ctrl-C: `killall`/`pkill -f` on machine-wide names, `rm /tmp/*.log`) it
removes only this process's runs. It also runs at exit. It defines
`Mininet` and `CLI` too, on purpose: `mn` then builds the project's network
and CLI (`emulation.fabric.mininet_net.CassiniNet`, `emulation.fabric.mininet_cli.CassiniCLI`),
whose `iperf` is bounded and ends only its own processes (Mininet's runs
`killall -9 iperf` on the machine), whose `link HOST chip up` restores the
host's ARP entries and whose `dpctl dump-flows` lists the P4 tables. Nothing
else is defined here at the top level that `mn` also uses.

Run by a Python that cannot import the project (Debian's `/usr/bin/mn`),
this file stops `mn` with one line naming the project's `mn`: `mn` runs
Mininet's global cleanup after any exception its custom file raises (our
`cleanup` is not defined yet at that point), but not after `SystemExit`,
which is what the failed import becomes.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path
from typing import Any


def _wrong_python(err: BaseException) -> str:
    """The one line that stops `mn` when this Python cannot import the project."""
    here = _Path(_sys._getframe(1).f_code.co_filename).resolve()  # mn sets no __file__
    right = here.parents[2] / ".venv" / "bin" / "mn"
    return (
        f"{here.name}: {_sys.executable} cannot import the project ({err}); "
        f"run the project's mn instead: {right} --custom {here} ..."
    )


try:
    from emulation.fabric.mininet_cli import CassiniCLI as _CassiniCLI
    from emulation.fabric.mininet_net import CassiniNet as _CassiniNet
    from emulation.fabric.mininet_switches import SoftSwitch as _SoftSwitch
except Exception as _err:  # noqa: BLE001 (any failure here must stop mn before its cleanup)
    raise SystemExit(_wrong_python(_err)) from None


class CassiniMnSwitch(_SoftSwitch):
    """The software switch that programs itself once its P4Runtime service is up."""

    def __init__(self, name: str, program: Any = None, **params: Any) -> None:
        self.program = program  # (topology, chip map, WRED settings) to install
        super().__init__(name, **params)

    def prefix_of_run(self) -> str:
        """The prefix of this network's namespaces and interfaces (`cassini clean --prefix`)."""
        return self.lab.prefix if self.lab is not None else "?"

    def start(self, controllers: Any = ()) -> None:
        from mininet.log import info

        from controlplane.program import program_topology
        from controlplane.session import P4RuntimeSession

        try:
            super().start(controllers)
            address = self.wait_ready_in_file()
            self.grpc_address = self.p4runtime_address = address
            with P4RuntimeSession.connect(address, self.device_id) as session:
                result = program_topology(session, *self.program)
        except RuntimeError as err:  # named, so `cassini clean --prefix` can be given it
            raise RuntimeError(f"fabric {self.prefix_of_run()}: {err}") from None
        info(
            f"*** cassini: fabric {self.prefix_of_run()}, P4Runtime {address} "
            f"(device {self.device_id}), "
            f"{result.desired_count} table entries, switch log {self.log_file}\n"
        )


def cassini_topo(topology: str = "cassini-testbed", scale: float = 0.001) -> Any:
    """`--topo cassini,TOPOLOGY,SCALE`: the Topo, its hosts' and switch's parameters,
    and a run file claimed for them (released by `cleanup` at exit)."""
    import atexit
    import json
    from functools import partial

    from controlplane.settings import ControlPlaneSettings
    from emulation.fabric.emulated import FABRIC_PREFIX_BASE
    from emulation.fabric.mininet_net import CassiniHost, CassiniTopo
    from emulation.fabric.mininet_switches import SWITCH_LOG
    from emulation.fabric.netns import NetnsLab
    from emulation.fabric.scaling import emulation_profile
    from emulation.softswitch.processes import is_switch_process
    from emulation.softswitch.tm_config import tm_config_to_dict
    from topologies.chip_mapping import map_to_chip
    from topologies.library import load_topology

    topo = load_topology(str(topology))
    chip = map_to_chip(topo)
    settings = ControlPlaneSettings()
    profile = emulation_profile(topo, chip, float(scale), settings.cell_bytes, True, settings)
    lab = NetnsLab(base=FABRIC_PREFIX_BASE, processes=is_switch_process)
    lab.claim()
    atexit.register(cleanup)
    folder = lab.tempdir("mn")
    tm_file = folder / "tm.json"
    tm_file.write_text(json.dumps(tm_config_to_dict(profile.tm), indent=1))
    neighbours = [(s.ip, s.mac) for s in topo.servers if s.ip]
    return CassiniTopo(
        topo,
        chip,
        lab.prefix,
        host_params={"cls": CassiniHost, "lab": lab, "neighbours": neighbours},
        nic_mbit=profile.nic_mbit(chip),
        wire_overhead=profile.tm.wire_overhead_bytes,
        lab=lab,
        launch=partial(lab.popen, None),
        tm_config=str(tm_file),
        log_file=str(folder / SWITCH_LOG),
        program=(topo, chip, profile.wred),
        grpc_address="127.0.0.1:0",
    )


def cleanup() -> None:
    """Remove what this process's runs created (never Mininet's global cleanup)."""
    import os

    from emulation.housekeeping.clean import clean
    from emulation.housekeeping.prefixes import PROJECT_PREFIXES
    from emulation.housekeeping.run_files import runs
    from emulation.softswitch.processes import is_switch_process

    for run in runs(PROJECT_PREFIXES):
        if run.owner.pid == os.getpid():
            clean((run.prefix,), include_live=True, processes=is_switch_process)


topos = {"cassini": cassini_topo}
switches = {"cassini": CassiniMnSwitch}
Mininet = _CassiniNet  # mn's network class (`mn` reads its global `Mininet`)
CLI = _CassiniCLI  # mn's CLI ("--custom files can set CLI", mn says)
