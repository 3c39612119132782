"""How is the software target's traffic manager configured?

The settings a Tofino keeps in its traffic manager (reached through BfRt, not
P4Runtime): cell size, shared buffer, per-port rate and queue limit, PFC
thresholds, and the loopback cables that join two ports of the chip. The
emulation scales rates down (0.05-1 Gbps) so one CPU core keeps up; the
thresholds stay in cells as on the chip.

File format (YAML or JSON), every key optional:

    cell_bytes: 80                 # Tofino1
    buffer_cells: 280000           # shared by all queues
    default_rate_gbps: 1.0
    default_queue_cells: 20000
    wire_overhead_bytes: 24        # preamble+SFD 8, FCS 4, inter-frame gap 12
    ports:
      3: {rate_gbps: 0.05, queue_cells: 5000}
    pfc: {enabled: true, xoff_cells: 4000, xon_cells: 3000, pause_quanta: 65535, priority: 3}
    loopback_cables:
      - {port_a: 10, port_b: 11, delay_us: 1}
    classes:                       # per queue class 0..7 (7 served first), every key optional
      7: {queue_cells: 2000,
          wred: {min_cells: 100, max_cells: 400, max_prob_percent: 20},
          pfc: {enabled: false, xoff_cells: 1000, xon_cells: 750, priority: 7}}

Every egress port has QUEUE_CLASSES strict-priority queues. A class's
settings default to the port's: its queue limit to the port's queue_cells,
its WRED profile to the one the control plane wrote for the port, its PFC to
the `pfc` block; so a file without `classes` means what it meant before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from topologies.datafile import read_data_file
from topologies.errors import UserInputError, did_you_mean
from topologies.names import shown

# Tofino1 facts (testbed.md): 80-byte cells, 280K cells of shared buffer.
TOFINO1_CELL_BYTES = 80
TOFINO1_BUFFER_CELLS = 280_000
# The paper's PFC skid threshold per logical switch.
PAPER_XOFF_CELLS = 4000
MAX_PORT = 511  # bit<9> ports
# Strict-priority queues per egress port (Tofino's and bmv2's --priority-queues).
QUEUE_CLASSES = 8
# What the traffic manager counts per (port, queue class) (TrafficManager.class_<name>).
CLASS_COUNTERS = (
    "enqueued_packets",
    "sent_packets",
    "sent_bytes",
    "marked_packets",
    "dropped_packets",
)
# The largest frame a 1500-byte MTU gives on the wire, FCS excluded (the TM adds
# `wire_overhead_bytes` on top of what it is handed).
MTU_FRAME_BYTES = 1514


@dataclass(frozen=True)
class PortSettings:
    """Overrides for one port; None means the default."""

    rate_gbps: float | None = None
    queue_cells: int | None = None


@dataclass(frozen=True)
class PfcConfig:
    """IEEE 802.1Qbb settings, shared by every ingress port."""

    enabled: bool = True
    xoff_cells: int = PAPER_XOFF_CELLS
    # (our choice) 75 % of XOFF: hysteresis so a port does not flap at the threshold.
    xon_cells: int = 3000
    pause_quanta: int = 0xFFFF
    # (our choice) RoCE traffic conventionally rides priority 3; the target has one
    # queue per port, so this is only the class its own pause frames name.
    priority: int = 3


@dataclass(frozen=True)
class ClassWred:
    """WRED/ECN thresholds of one queue class, in cells, on every port (overrides the port's)."""

    min_cells: int
    max_cells: int
    max_prob_percent: int


@dataclass(frozen=True)
class ClassSettings:
    """Overrides for one queue class; None means the port's (or `pfc`'s) setting."""

    queue_cells: int | None = None
    wred: ClassWred | None = None
    pfc_enabled: bool | None = None
    xoff_cells: int | None = None
    xon_cells: int | None = None
    # The 802.1Qbb priority this class's pause frames name.
    pfc_priority: int | None = None


@dataclass(frozen=True)
class LoopbackCable:
    """Two ports joined by a cable: what leaves one enters the other after delay_us."""

    port_a: int
    port_b: int
    delay_us: float = 1.0


@dataclass(frozen=True)
class TmConfig:
    """Traffic-manager settings of one software switch."""

    cell_bytes: int = TOFINO1_CELL_BYTES
    buffer_cells: int = TOFINO1_BUFFER_CELLS
    default_rate_gbps: float = 1.0
    default_queue_cells: int = 20_000
    wire_overhead_bytes: int = 24
    ports: Mapping[int, PortSettings] = field(default_factory=dict)
    pfc: PfcConfig = field(default_factory=PfcConfig)
    loopback_cables: tuple[LoopbackCable, ...] = ()
    classes: Mapping[int, ClassSettings] = field(default_factory=dict)

    def class_settings(self, queue_class: int) -> ClassSettings:
        return self.classes.get(queue_class) or ClassSettings()

    def class_queue_cells(self, port: int, queue_class: int) -> int:
        """The class queue's limit: its own, else the port's."""
        own = self.class_settings(queue_class).queue_cells
        return own if own is not None else self.queue_cells(port)

    def class_pfc(self, queue_class: int) -> tuple[bool, int, int, int]:
        """(enabled, xoff cells, xon cells, priority) of the class's PFC, `pfc`'s by default."""
        c = self.class_settings(queue_class)
        pfc = self.pfc
        return (
            pfc.enabled if c.pfc_enabled is None else c.pfc_enabled,
            pfc.xoff_cells if c.xoff_cells is None else c.xoff_cells,
            pfc.xon_cells if c.xon_cells is None else c.xon_cells,
            pfc.priority if c.pfc_priority is None else c.pfc_priority,
        )

    def rate_gbps(self, port: int) -> float:
        settings = self.ports.get(port)
        if settings is not None and settings.rate_gbps is not None:
            return settings.rate_gbps
        return self.default_rate_gbps

    def queue_cells(self, port: int) -> int:
        settings = self.ports.get(port)
        if settings is not None and settings.queue_cells is not None:
            return settings.queue_cells
        return self.default_queue_cells

    def cable_peers(self) -> dict[int, tuple[int, float]]:
        """port -> (peer port, delay in seconds), both directions."""
        peers: dict[int, tuple[int, float]] = {}
        for cable in self.loopback_cables:
            delay = cable.delay_us * 1e-6
            peers[cable.port_a] = (cable.port_b, delay)
            peers[cable.port_b] = (cable.port_a, delay)
        return peers

    def describe(self, ports: Mapping[int, str] | None = None) -> str:
        """Multi-line summary for the start-up log, so every run records its profile."""
        lines = [
            f"cells {self.cell_bytes} B, shared buffer {self.buffer_cells} cells "
            f"({self.buffer_cells * self.cell_bytes / 1e6:.1f} MB), "
            f"wire overhead {self.wire_overhead_bytes} B/frame",
            f"default port rate {self.default_rate_gbps:g} Gbps, "
            f"queue limit {self.default_queue_cells} cells",
            (
                f"PFC on: XOFF {self.pfc.xoff_cells} cells, XON {self.pfc.xon_cells} cells, "
                f"pause quanta {self.pfc.pause_quanta}, priority {self.pfc.priority}"
                if self.pfc.enabled
                else "PFC off"
            ),
        ]
        for port in sorted(set(self.ports) | set(ports or {})):
            where = f" ({ports[port]})" if ports and port in ports else ""
            lines.append(
                f"port {port}{where}: {self.rate_gbps(port):g} Gbps, "
                f"queue {self.queue_cells(port)} cells"
            )
        for queue_class, c in sorted(self.classes.items()):
            enabled, xoff, xon, priority = self.class_pfc(queue_class)
            wred = (
                f"WRED {c.wred.min_cells}..{c.wred.max_cells} cells {c.wred.max_prob_percent}%"
                if c.wred
                else "WRED of the port"
            )
            pfc = f"PFC XOFF {xoff} XON {xon} priority {priority}" if enabled else "PFC off"
            limit = f"queue {c.queue_cells} cells" if c.queue_cells else "queue of the port"
            lines.append(f"class {queue_class}: {limit}, {wred}, {pfc}")
        for cable in self.loopback_cables:
            lines.append(f"loopback cable {cable.port_a} <-> {cable.port_b}, {cable.delay_us:g} us")
        return "\n".join(lines)


_TOP_KEYS = (
    "cell_bytes",
    "buffer_cells",
    "default_rate_gbps",
    "default_queue_cells",
    "wire_overhead_bytes",
    "ports",
    "pfc",
    "loopback_cables",
    "classes",
)
# (our choice) Bounds past any chip: 1.6 Tbit/s ports, a second of cable, and
# integers the packet loop's 63-bit arithmetic holds.
MAX_RATE_GBPS = 1600.0
MAX_CABLE_DELAY_US = 1e6
MAX_INT = 2**40
_PORT_KEYS = ("rate_gbps", "queue_cells")
_PFC_KEYS = ("enabled", "xoff_cells", "xon_cells", "pause_quanta", "priority")
_CABLE_KEYS = ("port_a", "port_b", "delay_us")
_CLASS_KEYS = ("queue_cells", "wred", "pfc")
_CLASS_WRED_KEYS = ("min_cells", "max_cells", "max_prob_percent")
_CLASS_PFC_KEYS = ("enabled", "xoff_cells", "xon_cells", "priority")


def load_tm_config(path: str | Path) -> TmConfig:
    """Read a TmConfig from a YAML or JSON file; errors name the file and field."""
    data = read_data_file(path, "TM config")
    return tm_config_from_dict(data if data is not None else {}, source=str(path))


def tm_config_from_dict(data: Any, source: str = "TM config") -> TmConfig:
    """Validate plain data (as read from a file) into a TmConfig."""
    _check_mapping(data, source, _TOP_KEYS)
    defaults = TmConfig()
    pfc_defaults = PfcConfig()
    cell_bytes = _int(data, "cell_bytes", source, defaults.cell_bytes, minimum=1)
    buffer_cells = _int(data, "buffer_cells", source, defaults.buffer_cells, minimum=1)
    default_rate = _rate(data, "default_rate_gbps", source, defaults.default_rate_gbps)
    default_queue = _int(
        data, "default_queue_cells", source, defaults.default_queue_cells, minimum=1
    )
    overhead = _int(data, "wire_overhead_bytes", source, defaults.wire_overhead_bytes, minimum=0)

    ports: dict[int, PortSettings] = {}
    raw_ports = data.get("ports") or {}
    if not isinstance(raw_ports, Mapping):
        raise UserInputError(f"{source}: field 'ports' must be a mapping of port -> settings")
    for raw_port, raw_settings in raw_ports.items():
        port = _port(raw_port, f"{source}: ports")
        where = f"{source}: ports.{port}"
        _check_mapping(raw_settings, where, _PORT_KEYS)
        ports[port] = PortSettings(
            rate_gbps=_rate(raw_settings, "rate_gbps", where, None),
            queue_cells=_int(raw_settings, "queue_cells", where, None, minimum=1),
        )

    raw_pfc = data.get("pfc") or {}
    _check_mapping(raw_pfc, f"{source}: pfc", _PFC_KEYS)
    where = f"{source}: pfc"
    enabled = raw_pfc.get("enabled", pfc_defaults.enabled)
    if not isinstance(enabled, bool):
        raise UserInputError(f"{where}.enabled must be true or false, got {enabled!r}")
    xoff = _int(raw_pfc, "xoff_cells", where, pfc_defaults.xoff_cells, minimum=1)
    # Default XON follows a user's XOFF (75 %) unless given.
    xon = _int(raw_pfc, "xon_cells", where, xoff * 3 // 4, minimum=0)
    if xon >= xoff:
        raise UserInputError(f"{where}.xon_cells ({xon}) must be below xoff_cells ({xoff})")
    quanta = _int(raw_pfc, "pause_quanta", where, pfc_defaults.pause_quanta, minimum=1)
    if quanta > 0xFFFF:
        raise UserInputError(f"{where}.pause_quanta ({quanta}) must fit 16 bits (<= 65535)")
    priority = _int(raw_pfc, "priority", where, pfc_defaults.priority, minimum=0)
    if priority > 7:
        raise UserInputError(f"{where}.priority ({priority}) must be 0..7")

    cables: list[LoopbackCable] = []
    raw_cables = data.get("loopback_cables") or []
    if not isinstance(raw_cables, list):
        raise UserInputError(f"{source}: field 'loopback_cables' must be a list")
    cabled: dict[int, int] = {}
    for index, raw_cable in enumerate(raw_cables):
        where = f"{source}: loopback_cables[{index}]"
        _check_mapping(raw_cable, where, _CABLE_KEYS)
        for key in ("port_a", "port_b"):
            if key not in raw_cable:
                raise UserInputError(f"{where}: missing field '{key}'")
        a = _port(raw_cable["port_a"], f"{where}.port_a")
        b = _port(raw_cable["port_b"], f"{where}.port_b")
        if a == b:
            raise UserInputError(f"{where}: a cable cannot join port {a} to itself")
        for port in (a, b):
            if port in cabled:
                raise UserInputError(
                    f"{where}: port {port} is already cabled in loopback_cables[{cabled[port]}]"
                )
            cabled[port] = index
        delay = raw_cable.get("delay_us", 1.0)
        if (
            isinstance(delay, bool)
            or not isinstance(delay, int | float)
            or not 0 <= delay <= MAX_CABLE_DELAY_US  # NaN fails this too
        ):
            raise UserInputError(
                f"{where}.delay_us must be a number in 0..{MAX_CABLE_DELAY_US:g}, got {shown(delay)}"
            )
        cables.append(LoopbackCable(a, b, float(delay)))

    classes = _classes(data.get("classes") or {}, source, xoff, xon)

    return TmConfig(
        cell_bytes=cell_bytes,
        buffer_cells=buffer_cells,
        default_rate_gbps=default_rate if default_rate is not None else defaults.default_rate_gbps,
        default_queue_cells=default_queue
        if default_queue is not None
        else defaults.default_queue_cells,
        wire_overhead_bytes=overhead if overhead is not None else defaults.wire_overhead_bytes,
        ports=ports,
        pfc=PfcConfig(enabled, xoff or 1, xon or 0, quanta or 1, priority or 0),
        loopback_cables=tuple(cables),
        classes=classes,
    )


def _classes(raw: Any, source: str, xoff: int, xon: int) -> dict[int, ClassSettings]:
    """The `classes` block: queue class -> ClassSettings (see the module docstring)."""
    if not isinstance(raw, Mapping):
        raise UserInputError(f"{source}: field 'classes' must be a mapping of class -> settings")
    classes: dict[int, ClassSettings] = {}
    for raw_class, settings in raw.items():
        queue_class = _port(raw_class, f"{source}: classes")
        if queue_class >= QUEUE_CLASSES:
            raise UserInputError(
                f"{source}: classes: class {queue_class} must be 0..{QUEUE_CLASSES - 1}"
            )
        where = f"{source}: classes.{queue_class}"
        _check_mapping(settings, where, _CLASS_KEYS)
        wred = None
        if settings.get("wred") is not None:
            raw_wred = settings["wred"]
            _check_mapping(raw_wred, f"{where}.wred", _CLASS_WRED_KEYS)
            for key in _CLASS_WRED_KEYS:
                if key not in raw_wred:
                    raise UserInputError(f"{where}.wred: missing field '{key}'")
            low = _int(raw_wred, "min_cells", f"{where}.wred", None, minimum=0)
            high = _int(raw_wred, "max_cells", f"{where}.wred", None, minimum=0)
            prob = _int(raw_wred, "max_prob_percent", f"{where}.wred", None, minimum=0)
            if high <= low:
                raise UserInputError(
                    f"{where}.wred.max_cells ({high}) must exceed min_cells ({low})"
                )
            if prob > 100:
                raise UserInputError(f"{where}.wred.max_prob_percent ({prob}) must be 0..100")
            wred = ClassWred(low, high, prob)
        raw_pfc = settings.get("pfc") or {}
        _check_mapping(raw_pfc, f"{where}.pfc", _CLASS_PFC_KEYS)
        enabled = raw_pfc.get("enabled")
        if enabled is not None and not isinstance(enabled, bool):
            raise UserInputError(f"{where}.pfc.enabled must be true or false, got {shown(enabled)}")
        class_xoff = _int(raw_pfc, "xoff_cells", f"{where}.pfc", None, minimum=1)
        class_xon = _int(raw_pfc, "xon_cells", f"{where}.pfc", None, minimum=0)
        effective_xoff = class_xoff if class_xoff is not None else xoff
        if class_xon is None and class_xoff is not None:
            class_xon = class_xoff * 3 // 4  # as for the port's: 75 % of XOFF
        if (class_xon if class_xon is not None else xon) >= effective_xoff:
            raise UserInputError(
                f"{where}.pfc.xon_cells must be below xoff_cells ({effective_xoff})"
            )
        priority = _int(raw_pfc, "priority", f"{where}.pfc", None, minimum=0)
        if priority is not None and priority > 7:
            raise UserInputError(f"{where}.pfc.priority ({priority}) must be 0..7")
        classes[queue_class] = ClassSettings(
            queue_cells=_int(settings, "queue_cells", where, None, minimum=1),
            wred=wred,
            pfc_enabled=enabled,
            xoff_cells=class_xoff,
            xon_cells=class_xon,
            pfc_priority=priority,
        )
    return classes


def _class_to_dict(c: ClassSettings) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if c.queue_cells is not None:
        out["queue_cells"] = c.queue_cells
    if c.wred is not None:
        out["wred"] = {
            "min_cells": c.wred.min_cells,
            "max_cells": c.wred.max_cells,
            "max_prob_percent": c.wred.max_prob_percent,
        }
    pfc = {
        key: value
        for key, value in (
            ("enabled", c.pfc_enabled),
            ("xoff_cells", c.xoff_cells),
            ("xon_cells", c.xon_cells),
            ("priority", c.pfc_priority),
        )
        if value is not None
    }
    if pfc:
        out["pfc"] = pfc
    return out


def tm_config_to_dict(tm: TmConfig) -> dict[str, Any]:
    """The file form `tm_config_from_dict` reads back (for `cassini switch serve --tm-config`)."""
    out: dict[str, Any] = {
        "cell_bytes": tm.cell_bytes,
        "buffer_cells": tm.buffer_cells,
        "default_rate_gbps": tm.default_rate_gbps,
        "default_queue_cells": tm.default_queue_cells,
        "wire_overhead_bytes": tm.wire_overhead_bytes,
        "ports": {
            str(port): {
                key: value
                for key, value in (("rate_gbps", s.rate_gbps), ("queue_cells", s.queue_cells))
                if value is not None
            }
            for port, s in sorted(tm.ports.items())
        },
        "pfc": {
            "enabled": tm.pfc.enabled,
            "xoff_cells": tm.pfc.xoff_cells,
            "xon_cells": tm.pfc.xon_cells,
            "pause_quanta": tm.pfc.pause_quanta,
            "priority": tm.pfc.priority,
        },
        "loopback_cables": [
            {"port_a": c.port_a, "port_b": c.port_b, "delay_us": c.delay_us}
            for c in tm.loopback_cables
        ],
    }
    if tm.classes:  # only when set: older readers of this form never see the key
        out["classes"] = {str(k): _class_to_dict(c) for k, c in sorted(tm.classes.items())}
    return out


def _check_mapping(data: Any, where: str, known: tuple[str, ...]) -> None:
    if not isinstance(data, Mapping):
        raise UserInputError(f"{where}: expected a mapping, got {type(data).__name__}")
    for key in data:
        if key not in known:
            raise UserInputError(f"{where}: " + did_you_mean(str(key), known, "field"))


def _int(data: Mapping[str, Any], key: str, where: str, default: Any, minimum: int) -> Any:
    value = data.get(key, default)
    if value is None:
        return None
    # Integers past the packet loop's 63-bit counters killed it with OverflowError at start.
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_INT:
        raise UserInputError(
            f"{where}.{key} must be an integer in {minimum}..{MAX_INT}, got {shown(value)}"
        )
    return value


def _rate(data: Mapping[str, Any], key: str, where: str, default: Any) -> Any:
    value = data.get(key, default)
    if value is None:
        return None
    # NaN <= 0 is false: a NaN rate passed and put the packet loop to sleep for ever.
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 < value <= MAX_RATE_GBPS
    ):
        raise UserInputError(
            f"{where}.{key} must be a rate in Gbps in (0, {MAX_RATE_GBPS:g}], got {shown(value)}"
        )
    return float(value)


def _port(value: Any, where: str) -> int:
    """A port key: an integer or its decimal text ('1.7' is not a port, nor is 1.7)."""
    if isinstance(value, int) and not isinstance(value, bool):
        port = value
    elif isinstance(value, str) and value.strip().isdigit() and len(value.strip()) < 10:
        port = int(value)
    else:
        raise UserInputError(f"{where}: port {shown(value)} is not an integer")
    if not 0 <= port <= MAX_PORT:
        raise UserInputError(f"{where}: port {shown(value)} must be 0..{MAX_PORT}")
    return port
