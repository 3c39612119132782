"""How many packets, bytes, ECN marks and drops did each port and logical link see?

Counters are polled as snapshots; `deltas` (pure) turns two snapshots into
per-port increments, `link_deltas` (pure) attributes them to logical link
directions through the chip map (a direction a->b is measured at a's egress
port toward b), and `TelemetryLog` writes the time series as CSV or JSON.
Only `poll` touches a device.
"""

from __future__ import annotations

import csv
import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from topologies.chip_mapping import ChipMap
from topologies.errors import UserInputError

from .entries import CounterSample

if TYPE_CHECKING:
    from .session import P4RuntimeSession

# P4Info counter names -> the column prefix they fill (tests check they exist in the P4Info).
COUNTER_COLUMNS: Mapping[str, str] = MappingProxyType(
    {
        "CassiniIngress.port_rx": "rx",
        "CassiniEgress.port_tx": "tx",
        "CassiniEgress.ecn_marked": "ecn_marked",
        "CassiniEgress.wred_dropped": "wred_dropped",
    }
)


@dataclass(frozen=True)
class Snapshot:
    """All counter cells of a device at one instant: (counter, index) -> (packets, bytes)."""

    time_s: float
    cells: Mapping[tuple[str, int], tuple[int, int]]

    @classmethod
    def of(cls, time_s: float, samples: Iterable[CounterSample]) -> Snapshot:
        return cls(
            time_s, MappingProxyType({(s.counter, s.index): (s.packets, s.bytes) for s in samples})
        )


@dataclass(frozen=True)
class PortDelta:
    """What one chip port counted between two snapshots."""

    time_s: float
    interval_s: float
    port: int
    rx_packets: int = 0
    rx_bytes: int = 0
    tx_packets: int = 0
    tx_bytes: int = 0
    ecn_marked_packets: int = 0
    ecn_marked_bytes: int = 0
    wred_dropped_packets: int = 0
    wred_dropped_bytes: int = 0


@dataclass(frozen=True)
class LinkDelta:
    """What one logical link direction (sender -> receiver) carried between two snapshots."""

    time_s: float
    interval_s: float
    link: str  # "sender->receiver"
    port: int  # the sender's egress chip port
    tx_packets: int
    tx_bytes: int
    ecn_marked_packets: int
    wred_dropped_packets: int
    gbps: float


def _increase(after: int, before: int) -> int:
    # A counter that went down was reset (pipeline re-pushed): count from zero.
    return after - before if after >= before else after


def deltas(
    before: Snapshot, after: Snapshot, ports: Iterable[int] | None = None
) -> list[PortDelta]:
    """Per-port increments between two snapshots; only ports that moved unless `ports` is given.

    >>> a = Snapshot(0.0, {("CassiniEgress.ecn_marked", 3): (10, 15000)})
    >>> b = Snapshot(1.0, {("CassiniEgress.ecn_marked", 3): (14, 21000)})
    >>> d = deltas(a, b)[0]; (d.port, d.ecn_marked_packets, d.interval_s)
    (3, 4, 1.0)
    """
    interval = after.time_s - before.time_s
    per_port: dict[int, dict[str, int]] = {p: {} for p in (ports or ())}
    for (counter, index), (packets, nbytes) in after.cells.items():
        column = COUNTER_COLUMNS.get(counter)
        if column is None:
            continue
        old_packets, old_bytes = before.cells.get((counter, index), (0, 0))
        dp, db = _increase(packets, old_packets), _increase(nbytes, old_bytes)
        if ports is None and dp == 0 and db == 0:
            continue
        if ports is not None and index not in per_port:
            continue
        row = per_port.setdefault(index, {})
        row[f"{column}_packets"] = dp
        row[f"{column}_bytes"] = db
    return [
        PortDelta(time_s=after.time_s, interval_s=interval, port=port, **values)
        for port, values in sorted(per_port.items())
    ]


def link_deltas(port_deltas: Iterable[PortDelta], chip: ChipMap) -> list[LinkDelta]:
    """Per logical link direction, from the egress port on its sending switch."""
    sender_of: dict[int, str] = {}
    for (a, b), port in chip.link_ports.items():
        sender_of[port] = f"{a}->{b}"
    for server, port in chip.server_port.items():
        sender_of[port] = f"{chip.switch_of_port[port]}->{server}"
    out = []
    for d in port_deltas:
        link = sender_of.get(d.port)
        if link is None:
            continue
        gbps = d.tx_bytes * 8 / d.interval_s / 1e9 if d.interval_s > 0 else 0.0
        out.append(
            LinkDelta(
                d.time_s,
                d.interval_s,
                link,
                d.port,
                d.tx_packets,
                d.tx_bytes,
                d.ecn_marked_packets,
                d.wred_dropped_packets,
                gbps,
            )
        )
    return out


@dataclass
class TelemetryLog:
    """The time series of one watch: port rows and, with a chip map, link rows."""

    ports: list[PortDelta] = field(default_factory=list)
    links: list[LinkDelta] = field(default_factory=list)

    def add(self, port_rows: Iterable[PortDelta], link_rows: Iterable[LinkDelta] = ()) -> None:
        self.ports.extend(port_rows)
        self.links.extend(link_rows)

    def to_json(self) -> dict[str, Any]:
        return {
            "ports": [asdict(r) for r in self.ports],
            "links": [asdict(r) for r in self.links],
        }

    def write(self, path: str | Path) -> list[Path]:
        """Write .json (one file) or .csv (ports to PATH, links to PATH with -links.csv)."""
        p = Path(path)
        if p.suffix not in (".csv", ".json"):
            raise UserInputError(f"output file {p}: use a .csv or .json name")
        p.parent.mkdir(parents=True, exist_ok=True)
        if p.suffix == ".json":
            p.write_text(json.dumps(self.to_json(), indent=1) + "\n")
            return [p]
        written = [p]
        _write_csv(p, PortDelta, [asdict(r) for r in self.ports])
        if self.links:
            link_path = p.with_name(p.stem + "-links.csv")
            _write_csv(link_path, LinkDelta, [asdict(r) for r in self.links])
            written.append(link_path)
        return written


def _write_csv(path: Path, cls: type, rows: list[dict[str, Any]]) -> None:
    names = [f.name for f in fields(cls)]
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=names)
        writer.writeheader()
        writer.writerows(rows)


def snapshot(session: P4RuntimeSession, clock: Callable[[], float] = time.monotonic) -> Snapshot:
    """Read every counter of the device (one wildcard read) as a snapshot."""
    t = clock()
    return Snapshot.of(t, session.read_counters())


def poll(
    session: P4RuntimeSession,
    interval_s: float,
    on_interval: Callable[[list[PortDelta]], None],
    duration_s: float | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Snapshot every `interval_s` and hand each interval's port deltas to `on_interval`.

    Runs until `duration_s` elapsed or `stop` is set (Ctrl-C propagates).
    """
    if interval_s <= 0:
        raise UserInputError(f"interval must be > 0 s, got {interval_s}")
    stop = stop or threading.Event()
    start = time.monotonic()
    previous = snapshot(session)
    next_tick = start + interval_s
    while not stop.is_set():
        if duration_s is not None and next_tick - start > duration_s + 1e-9:
            break
        if stop.wait(max(0.0, next_tick - time.monotonic())):
            break
        current = snapshot(session)
        on_interval(deltas(previous, current))
        previous = current
        next_tick += interval_s
