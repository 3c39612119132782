"""Which thresholds does the control plane program? One config, one place.

WRED/ECN thresholds (P4Runtime entries of wred_profile), PFC and buffer
settings (Tofino traffic manager via BfRt), and the packet-size assumption
that turns cells into packets for bmv2. Loadable from YAML or JSON:

    cell_bytes: 80
    wred: {min_cells: 1000, max_cells: 2000, max_prob_percent: 100}
    pfc: {enabled: true, skid_cells: 4000, priority: 3}
    queue_cells: 20000
    bmv2_packet_bytes: 1500
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from topologies.datafile import read_data_file
from topologies.errors import UserInputError, did_you_mean
from topologies.names import shown

# The paper's testbed (testbed.md): WRED min 1000 / max 2000 cells, PFC skid 4000 cells.
PAPER_WRED_MIN_CELLS = 1000
PAPER_WRED_MAX_CELLS = 2000
PAPER_PFC_SKID_CELLS = 4000
TOFINO1_CELL_BYTES = 80
# set_wred's thresholds are bit<24>, max_prob bit<8> holding a percentage.
MAX_THRESHOLD_CELLS = (1 << 24) - 1
# (our choice) A cell is at most 1 KiB and a packet at most a jumbo frame on
# any chip this harness targets.
MAX_CELL_BYTES = 1024
MAX_PACKET_BYTES = 9216


def _integer(value: object, name: str, low: int, high: int) -> None:
    """Refuse anything but an int (not a bool, not a float such as inf) in low..high."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserInputError(f"{name}: expected an integer, got {shown(value)}")
    if not low <= value <= high:
        raise UserInputError(f"{name}: {value} is outside {low}..{high}")


@dataclass(frozen=True)
class WredSettings:
    """ECN marking ramp of every egress port.

    (our choice) max_prob_percent defaults to 100: the paper gives only the
    thresholds, and 100 makes the marking probability continuous at max_cells,
    where the program marks every packet anyway.
    """

    min_cells: int = PAPER_WRED_MIN_CELLS
    max_cells: int = PAPER_WRED_MAX_CELLS
    max_prob_percent: int = 100

    def __post_init__(self) -> None:
        for name in ("min_cells", "max_cells", "max_prob_percent"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise UserInputError(f"wred.{name}: expected an integer, got {shown(value)}")
        if not 0 <= self.min_cells <= MAX_THRESHOLD_CELLS:
            raise UserInputError(
                f"wred.min_cells: {self.min_cells} is outside 0..{MAX_THRESHOLD_CELLS}"
            )
        if not self.min_cells <= self.max_cells <= MAX_THRESHOLD_CELLS:
            raise UserInputError(
                f"wred.max_cells: {self.max_cells} must be between min_cells "
                f"({self.min_cells}) and {MAX_THRESHOLD_CELLS}"
            )
        if not 0 <= self.max_prob_percent <= 100:
            raise UserInputError(
                f"wred.max_prob_percent: {self.max_prob_percent} is not a percentage (0..100)"
            )


@dataclass(frozen=True)
class PfcSettings:
    """IEEE 802.1Qbb on every port (Tofino traffic manager only; bmv2 has no PFC)."""

    enabled: bool = True
    skid_cells: int = PAPER_PFC_SKID_CELLS
    # (our choice) RoCEv2 conventionally rides priority 3.
    priority: int = 3

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):  # 'no' is a string, and truthy
            raise UserInputError(f"pfc.enabled: expected true or false, got {shown(self.enabled)}")
        _integer(self.priority, "pfc.priority", 0, 7)
        _integer(self.skid_cells, "pfc.skid_cells", 0, MAX_THRESHOLD_CELLS)


@dataclass(frozen=True)
class ControlPlaneSettings:
    """Everything the control plane programs besides forwarding."""

    wred: WredSettings = field(default_factory=WredSettings)
    pfc: PfcSettings = field(default_factory=PfcSettings)
    cell_bytes: int = TOFINO1_CELL_BYTES
    # Egress queue limit of every port, in cells (our choice: 20000 cells = 1.6 MB on
    # Tofino1, ten times max_cells, so WRED acts long before tail drop).
    queue_cells: int = 20000
    # (our choice) bmv2 counts its queue in packets; thresholds in cells are
    # converted assuming MTU-sized (1500 B) packets, the size of RDMA/TCP bulk data.
    bmv2_packet_bytes: int = 1500

    def __post_init__(self) -> None:
        _integer(self.cell_bytes, "cell_bytes", 1, MAX_CELL_BYTES)
        _integer(self.queue_cells, "queue_cells", 1, MAX_THRESHOLD_CELLS)
        _integer(self.bmv2_packet_bytes, "bmv2_packet_bytes", 1, MAX_PACKET_BYTES)

    def with_wred(
        self,
        min_cells: int | None = None,
        max_cells: int | None = None,
        max_prob_percent: int | None = None,
    ) -> ControlPlaneSettings:
        """These settings with some WRED values overridden (the CLI's --wred-* flags)."""
        wred = self.wred
        return replace(
            self,
            wred=WredSettings(
                wred.min_cells if min_cells is None else min_cells,
                wred.max_cells if max_cells is None else max_cells,
                wred.max_prob_percent if max_prob_percent is None else max_prob_percent,
            ),
        )


def settings_from_dict(data: Any, source: str = "settings") -> ControlPlaneSettings:
    """Settings from parsed YAML/JSON; unknown keys are named with suggestions, and every
    error names `source` (the file)."""
    try:
        return _settings_from_dict(data, source)
    except UserInputError as err:
        text = str(err)
        raise UserInputError(text if text.startswith(f"{source}:") else f"{source}: {text}") from None


def _settings_from_dict(data: Any, source: str) -> ControlPlaneSettings:
    if data is None:
        return ControlPlaneSettings()
    if not isinstance(data, Mapping):
        raise UserInputError(f"{source}: expected a mapping at the top level")
    top = {f.name for f in fields(ControlPlaneSettings)}
    _check_keys(data, top, source)
    kwargs: dict[str, Any] = {k: v for k, v in data.items() if k not in ("wred", "pfc")}
    for name, cls in (("wred", WredSettings), ("pfc", PfcSettings)):
        sub = data.get(name)
        if sub is None:
            continue
        if not isinstance(sub, Mapping):
            raise UserInputError(f"{source}: '{name}' must be a mapping")
        _check_keys(sub, {f.name for f in fields(cls)}, f"{source}: {name}")
        kwargs[name] = cls(**sub)
    return ControlPlaneSettings(**kwargs)


def load_settings(path: str | Path | None = None) -> ControlPlaneSettings:
    """Read a settings file (.yaml/.yml/.json); None gives the paper's defaults."""
    if path is None:
        return ControlPlaneSettings()
    return settings_from_dict(read_data_file(path, "settings"), str(path))


def _check_keys(data: Mapping[str, Any], known: set[str], where: str) -> None:
    for key in data:
        if key not in known:
            raise UserInputError(f"{where}: " + did_you_mean(str(key)[:40], known, "setting"))
