"""What can an emulated fabric be asked to be?

One frozen value, `FabricOptions`, holds everything `EmulatedFabric` is
told besides its topology, each with its default; `switch_class` maps its
target to the Mininet switch class that runs the chip. What can never run is
refused when the value is made (the scale out of range, an unknown target,
bmv2 in this process); what only this machine can answer (bmv2 installed,
the device config readable, the results folders free) when the fabric is
made, by `device_config_bytes` and `results_folders`. A changed copy is
`options.replace(...)`:

>>> FabricOptions(scale=0.01).replace(target="bmv2").target
'bmv2'
>>> FabricOptions(target="p4")
Traceback (most recent call last):
topologies.errors.UserInputError: --target: no target named 'p4'. (known: bmv2, softswitch)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controlplane.settings import ControlPlaneSettings
from topologies.errors import UserInputError, did_you_mean
from topologies.outputs import check_output

from .bmv2_switch import Bmv2Switch
from .capture import check_tcpdump
from .mininet_switches import ChipSwitch, InProcessSwitch, SoftSwitch
from .scaling import DEFAULT_SCALE, check_scale

DEFAULT_TARGET = "softswitch"
# (our choice) The switch process runs at nice -10. Arrivals carry the kernel's
# receive stamps, so a late read no longer invents a queue, but departures
# still happen when the switch thread runs: a higher priority keeps delivery
# jitter low on a shared machine.
SWITCH_NICE = -10
# Each target's switch class in its own process, and in the caller's (None: no such mode).
TARGETS: Mapping[str, tuple[type[ChipSwitch], type[ChipSwitch] | None]] = {
    "softswitch": (SoftSwitch, InProcessSwitch),
    "bmv2": (Bmv2Switch, None),
}


def switch_class(target: str, own_process: bool = True) -> type[ChipSwitch]:
    """The class that runs `target`'s chip in a process of its own or in the caller's;
    an unknown target, or one with no such mode, is one line naming what is wrong.

    >>> switch_class("bmv2").__name__, switch_class("softswitch", own_process=False).__name__
    ('Bmv2Switch', 'InProcessSwitch')
    """
    if target not in TARGETS:
        raise UserInputError("--target: " + did_you_mean(target, TARGETS, "target"))
    in_its_own, in_the_callers = TARGETS[target]
    if own_process:
        return in_its_own
    if in_the_callers is None:
        raise UserInputError(f"--target {target} runs {target}'s own process (switch_process=True)")
    return in_the_callers


@dataclass(frozen=True, kw_only=True)
class FabricOptions:
    """`EmulatedFabric(topo, FabricOptions(scale=0.01, prefix="cas1"))`.

    switch_process=True runs the switch as `cassini switch serve` in its own
    process at `switch_nice` (its own interpreter lock and a higher priority,
    so a busy test or sender cannot stall the packet path and fake
    queueing); False runs a SoftwareSwitch in this process. `pin_loop`
    (software switch, two or more CPUs) puts the packet loop on a core of its
    own and steers the hosts' receive processing to the others (cpu_split.py).

    target="bmv2" runs simple_switch_grpc instead (refused, naming what is
    missing, when it is not installed) and pushes `device_config`, the
    compiled JSON (default: where `make p4` writes it). `pcap_dir` receives a
    pcap per switch-side interface, `log_dir` the switch's log; both are
    results folders (refused when they hold files, unless `force`, then
    replaced by a folder of the fabric's own, never written into).
    """

    scale: float = DEFAULT_SCALE  # S: port rate = link Gbps x S, thresholds to match
    prefix: str | None = None  # of namespaces and interfaces; None: a fresh random one
    settings: ControlPlaneSettings = field(default_factory=ControlPlaneSettings)
    pfc: bool = True
    device_id: int = 1
    grpc_address: str = "127.0.0.1:0"  # the switch's P4Runtime service; port 0: any
    seed: int = 0  # of the WRED marking RNG
    switch_process: bool = True
    switch_nice: int = SWITCH_NICE
    timeout: float = 30.0  # s, for bring-up and P4Runtime sessions
    target: str = DEFAULT_TARGET
    device_config: bytes | str | Path | None = None  # bytes, or a file to read
    pcap_dir: str | Path | None = None
    log_dir: str | Path | None = None
    force: bool = False
    thrift_port: int = 0  # bmv2's Thrift server; 0: any
    pin_loop: bool = True

    def __post_init__(self) -> None:
        check_scale(self.scale)
        self.switch_class  # noqa: B018 (refuses an unknown target, or bmv2 in this process)

    @property
    def switch_class(self) -> type[ChipSwitch]:
        """The Mininet switch class that runs the chip (`switch_class`)."""
        return switch_class(self.target, own_process=self.switch_process)

    def replace(self, **changes: Any) -> FabricOptions:
        """A copy with `changes`, checked as a new value is."""
        return dataclasses.replace(self, **changes)

    def device_config_bytes(self) -> bytes:
        """The device config the target pushes with the pipeline, read and checked."""
        return self.switch_class.device_config(self.device_config)

    def results_folders(self) -> tuple[Path | None, Path | None]:
        """(pcap_dir, log_dir), checked by the output rule (one folder may serve both); a
        pcap folder needs tcpdump, refused before anything is built. Nothing is made
        here: the fabric writes them as stages of its own and publishes them once
        bring-up has opened their files (`EmulatedFabric`)."""
        checked: dict[Path, Path] = {}
        found: list[Path | None] = []
        if self.pcap_dir is not None:
            check_tcpdump()
        for folder, flag in ((self.pcap_dir, "--pcap"), (self.log_dir, "--log-dir")):
            if folder is None:
                found.append(None)
                continue
            path = Path(folder)
            if path not in checked:
                checked[path] = check_output(path, "folder", self.force, flag)
            found.append(checked[path])
        return found[0], found[1]
