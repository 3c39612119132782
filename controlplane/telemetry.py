"""How many packets, bytes, ECN marks and losses did each port and logical link see?

Counters are polled as snapshots: the P4 counters over P4Runtime and, where
the target serves gNMI, the interface counters (`controlplane.gnmi`), which
count every loss by cause. `deltas` (pure) turns two snapshots into
per-port increments, `link_deltas` (pure) attributes them to logical link
directions through the chip map (a direction a->b is measured at a's egress
port toward b), `watch` runs the polling loop (a row per port for every
interval, idle or not), and `TelemetryLog` writes the time series as CSV or
JSON. Only `snapshot` touches a device; `counter_watch` opens one and watches it.
"""

from __future__ import annotations

import csv
import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from topologies.chip_mapping import ChipMap
from topologies.errors import UserInputError
from topologies.outputs import write_file

from .entries import CounterSample
from .gnmi import Interface
from .p4names import ECN_MARKED, PORT_RX, PORT_TX, WRED_DROPPED

if TYPE_CHECKING:
    from .session import P4RuntimeSession

# P4Info counter names -> the column prefix they fill.
COUNTER_COLUMNS: Mapping[str, str] = MappingProxyType(
    {PORT_RX: "rx", PORT_TX: "tx", ECN_MARKED: "ecn_marked", WRED_DROPPED: "wred_dropped"}
)

# gNMI counters leaves recorded per port: the column is the leaf with '_' for '-'.
# (WRED drops are the P4 counter's column, wred_dropped_packets.)
GNMI_COLUMNS: tuple[str, ...] = (
    "in-discards",
    "in-errors",
    "out-discards",
    "out-errors",
    "tail-dropped",
    "forward-misses",
    "to-unknown-port",
    "rx-overruns",
    "malformed",
    "pfc-pauses-sent",
    "pfc-paused-us",
)


def _column(leaf: str) -> str:
    return leaf.replace("-", "_")


def utc_iso(wall_s: float | None) -> str:
    """ISO 8601 UTC of a wall-clock time, to the millisecond ('' if unknown).

    >>> utc_iso(0.25)
    '1970-01-01T00:00:00.250Z'
    """
    if wall_s is None:
        return ""
    stamp = datetime.fromtimestamp(wall_s, tz=UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


@dataclass(frozen=True)
class Snapshot:
    """All counters of a device at one instant.

    cells: (P4 counter, index) -> (packets, bytes); interfaces: gNMI interface
    counters by P4Runtime port (None: not read); wall_s: the wall clock then.
    """

    time_s: float
    cells: Mapping[tuple[str, int], tuple[int, int]]
    wall_s: float | None = None
    interfaces: Mapping[int, Interface] | None = None

    @classmethod
    def of(
        cls,
        time_s: float,
        samples: Iterable[CounterSample],
        wall_s: float | None = None,
        interfaces: Iterable[Interface] | None = None,
    ) -> Snapshot:
        """Interfaces the target gives no port id cannot be matched to a port: left out."""
        by_port = None
        if interfaces is not None:
            by_port = MappingProxyType({i.port: i for i in interfaces if i.port is not None})
        return cls(
            time_s,
            MappingProxyType({(s.counter, s.index): (s.packets, s.bytes) for s in samples}),
            wall_s,
            by_port,
        )


@dataclass(frozen=True, kw_only=True)
class PortDelta:
    """What one chip port counted between two snapshots.

    The gNMI columns are None when the target's interface counters were not
    read (or lack that leaf); lost_packets is every loss the port counted:
    its interface discards and errors with gNMI, else its WRED drops (the
    only loss the P4 counters see).
    """

    utc: str = ""  # wall clock at the end of the interval, ISO 8601
    time_s: float  # monotonic; in a watch, seconds since its first snapshot
    interval_s: float
    port: int
    interface: str = ""
    rx_packets: int = 0
    rx_bytes: int = 0
    tx_packets: int = 0
    tx_bytes: int = 0
    ecn_marked_packets: int = 0
    ecn_marked_bytes: int = 0
    wred_dropped_packets: int = 0
    wred_dropped_bytes: int = 0
    lost_packets: int = 0
    in_discards: int | None = None
    in_errors: int | None = None
    out_discards: int | None = None
    out_errors: int | None = None
    tail_dropped: int | None = None
    forward_misses: int | None = None
    to_unknown_port: int | None = None
    rx_overruns: int | None = None
    malformed: int | None = None
    pfc_pauses_sent: int | None = None  # PFC pause frames this port sent (not a loss)
    pfc_paused_us: int | None = None  # how long it held its ingress paused


@dataclass(frozen=True, kw_only=True)
class LinkDelta:
    """What one logical link direction (sender -> receiver) carried between two snapshots."""

    utc: str = ""
    time_s: float
    interval_s: float
    link: str  # "sender->receiver"
    port: int  # the sender's egress chip port
    tx_packets: int
    tx_bytes: int
    ecn_marked_packets: int
    wred_dropped_packets: int
    lost_packets: int = 0
    gbps: float


def _increase(after: int, before: int) -> int:
    # A counter that went down was reset (pipeline re-pushed): count from zero.
    return after - before if after >= before else after


# The interface counters whose sum is every frame a port lost (see port_stats).
OPENCONFIG_LOSSES = ("in-discards", "in-errors", "out-discards", "out-errors")


def _gnmi_increases(before: Snapshot, after: Snapshot, port: int) -> dict[str, Any]:
    """The gNMI columns of one port between two snapshots (empty if it has no interface)."""
    if after.interfaces is None or port not in after.interfaces:
        return {}
    now = after.interfaces[port]
    old = before.interfaces.get(port) if before.interfaces is not None else None
    values: dict[str, Any] = {"interface": now.name}
    for leaf in GNMI_COLUMNS:
        if leaf in now.counters:
            earlier = old.counters.get(leaf, 0) if old is not None else 0
            values[_column(leaf)] = _increase(now.counters[leaf], earlier)
    return values


def _lost(values: Mapping[str, Any]) -> int:
    losses = [values.get(_column(leaf)) for leaf in OPENCONFIG_LOSSES]
    if all(v is None for v in losses):
        return int(values.get("wred_dropped_packets", 0))
    return sum(int(v) for v in losses if v is not None)


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
    wanted = None if ports is None else set(ports)
    per_port: dict[int, dict[str, Any]] = {p: {} for p in (wanted or ())}
    for (counter, index), (packets, nbytes) in after.cells.items():
        column = COUNTER_COLUMNS.get(counter)
        if column is None:
            continue
        old_packets, old_bytes = before.cells.get((counter, index), (0, 0))
        dp, db = _increase(packets, old_packets), _increase(nbytes, old_bytes)
        if wanted is None and dp == 0 and db == 0:
            continue
        if wanted is not None and index not in wanted:
            continue
        row = per_port.setdefault(index, {})
        row[f"{column}_packets"] = dp
        row[f"{column}_bytes"] = db
    for port in after.interfaces or ():
        if wanted is not None and port not in wanted:
            continue
        values = _gnmi_increases(before, after, port)
        moved = any(v for k, v in values.items() if k != "interface")
        if wanted is not None or moved or port in per_port:
            per_port.setdefault(port, {}).update(values)
    utc = utc_iso(after.wall_s)
    return [
        PortDelta(
            utc=utc,
            time_s=after.time_s,
            interval_s=interval,
            port=port,
            lost_packets=_lost(values),
            **values,
        )
        for port, values in sorted(per_port.items())
    ]


def watched_ports(before: Snapshot, after: Snapshot, chip: ChipMap | None = None) -> list[int]:
    """The ports a watch writes a row for every interval, idle or not.

    The device's interfaces (gNMI) and the chip map's ports; without either,
    every index of its P4 counters; always any port that moved.
    """
    ports: set[int] = set(after.interfaces or ())
    if chip is not None:
        ports |= set(chip.link_ports.values()) | set(chip.server_port.values())
    if not ports:
        ports = {index for (counter, index) in after.cells if counter in COUNTER_COLUMNS}
    return sorted(ports | {d.port for d in deltas(before, after)})


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
                utc=d.utc,
                time_s=d.time_s,
                interval_s=d.interval_s,
                link=link,
                port=d.port,
                tx_packets=d.tx_packets,
                tx_bytes=d.tx_bytes,
                ecn_marked_packets=d.ecn_marked_packets,
                wred_dropped_packets=d.wred_dropped_packets,
                lost_packets=d.lost_packets,
                gbps=gbps,
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

    @staticmethod
    def paths(path: str | Path) -> list[Path]:
        """The files `write(path)` writes: PATH, and for .csv also PATH-links.csv."""
        p = Path(path)
        return [p] if p.suffix == ".json" else [p, p.with_name(p.stem + "-links.csv")]

    def write(self, path: str | Path) -> list[Path]:
        """Write .json (one file) or .csv (ports to PATH, links to PATH with -links.csv)
        at once, with the writer a watch uses as it goes."""
        writer = TelemetryWriter(path)
        writer.add_rows(self.ports, self.links)
        return writer.close()


class TelemetryWriter:
    """A watch's recording written as it goes: .csv rows are appended and flushed every
    interval (a killed or failed watch keeps every interval before it, whole lines
    only); .json, which is one document, is written whole at `close` (atomically).
    Errors of the disk (a full one) are OSError from `add` or `close`.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if self.path.suffix not in (".csv", ".json"):
            raise UserInputError(f"output file {self.path}: use a .csv or .json name")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.log = TelemetryLog()
        self.intervals = 0
        self._files: list[Any] = []
        self._writers: list[csv.DictWriter[str]] = []
        self._link_rows = 0
        if self.path.suffix == ".csv":
            for target, cls in zip(TelemetryLog.paths(self.path), (PortDelta, LinkDelta), strict=True):
                handle = target.open("w", newline="")
                writer = csv.DictWriter(handle, fieldnames=[f.name for f in fields(cls)])
                writer.writeheader()
                self._files.append(handle)
                self._writers.append(writer)

    def add(self, done: Interval) -> None:
        """One interval's rows, on disk when this returns (.csv)."""
        self.intervals += 1
        self.add_rows(done.ports, done.links)

    def add_rows(self, ports: Iterable[PortDelta], links: Iterable[LinkDelta]) -> None:
        if not self._writers:
            self.log.add(ports, links)
            return
        batches: tuple[list[Any], list[Any]] = (list(ports), list(links))
        for writer, handle, rows in zip(self._writers, self._files, batches, strict=True):
            writer.writerows(asdict(r) for r in rows)
            handle.flush()
        self._link_rows += len(batches[1])

    def discard(self) -> None:
        """Remove what was started: a watch that recorded nothing leaves no file."""
        for handle in self._files:
            handle.close()
        for target in TelemetryLog.paths(self.path) if self._files else []:
            target.unlink(missing_ok=True)
        self._files, self._writers = [], []

    def close(self) -> list[Path]:
        """Finish the files; returns those written (a links file only if it has rows)."""
        if not self._writers:
            write_file(self.path, json.dumps(self.log.to_json(), indent=1) + "\n")
            return [self.path]
        written = []
        for target, handle in zip(TelemetryLog.paths(self.path), self._files, strict=True):
            handle.close()
            if target != self.path and not self._link_rows:
                target.unlink(missing_ok=True)  # no chip map: no link rows, no file
            else:
                written.append(target)
        self._files, self._writers = [], []
        return written


def snapshot(
    session: P4RuntimeSession,
    clock: Callable[[], float] = time.monotonic,
    interfaces: Callable[[], Iterable[Interface]] | None = None,
    wall: Callable[[], float] = time.time,
    ports: Iterable[int] | None = None,
) -> Snapshot:
    """Read the per-port P4 counters (a wildcard read of each, or only the cells of
    `ports`) and, given `interfaces`, the gNMI counters. The per-job counters are the
    10 ms telemetry's, not a poll's: reading their 16,384 cells made a poll take over
    a second."""
    t, wall_s = clock(), wall()
    samples = session.read_counters(indices=ports, counters=COUNTER_COLUMNS)
    return Snapshot.of(t, samples, wall_s, interfaces() if interfaces is not None else None)


@dataclass(frozen=True)
class Interval:
    """One interval of a watch: its number (from 1), its port rows and its link rows."""

    index: int
    time_s: float  # seconds since the watch's first snapshot
    utc: str
    ports: list[PortDelta]
    links: list[LinkDelta]


def watch(
    take: Callable[[], Snapshot],
    interval_s: float,
    on_interval: Callable[[Interval], None],
    duration_s: float | None = None,
    stop: threading.Event | None = None,
    chip: ChipMap | None = None,
    clock: Callable[[], float] = time.monotonic,
    wait: Callable[[float], bool] | None = None,
) -> int:
    """Snapshot every `interval_s` and hand each interval to `on_interval`; returns how many.

    Every interval has a row for every watched port (`watched_ports`), idle
    ones with zeros. Ticks are on a fixed grid from the first snapshot, so a
    slow read does not shift the ones after it. Runs for `duration_s` of the
    clock from the first snapshot: the ticks due within it, and none once the
    clock has passed it (reads slower than the interval fall behind the grid;
    a duration counted in polls ran 25.6 s for `--interval 100ms --duration
    10s` when each poll took 256 ms). Or until `stop` is set (Ctrl-C
    propagates). `wait(seconds) -> stopped` defaults to `stop.wait`.
    """
    if interval_s <= 0:
        raise UserInputError(f"interval must be > 0 s, got {interval_s}")
    stop = stop or threading.Event()
    wait = wait or stop.wait
    first = take()
    start = clock()
    deadline = None if duration_s is None else start + duration_s
    origin = first.time_s
    previous = replace(first, time_s=0.0)
    done = 0
    while True:
        due = start + (done + 1) * interval_s
        if deadline is not None and (due > deadline + 1e-9 or clock() > deadline):
            break
        if wait(max(0.0, due - clock())):
            break
        current = take()
        current = replace(current, time_s=current.time_s - origin)
        rows = deltas(previous, current, watched_ports(previous, current, chip))
        links = link_deltas(rows, chip) if chip is not None else []
        done += 1
        on_interval(Interval(done, current.time_s, utc_iso(current.wall_s), rows, links))
        previous = current
    return done
