"""What does the packet loop ask of a switch program?

A switch program is the P4 program's ingress and egress with the traffic
manager between them: frames in with the time they were received, frames out
at the time they are due, counters and statistics. There are two:
`reference_program.ReferenceSwitchProgram` in Python (the reference) and
`fast_pipeline.FastSwitchProgram` over the compiled `_fastpath` module (tested
against it frame for frame). The loop (`datapath.Datapath`) holds a
`SwitchProgram` and never the classes: a program with a `CompiledPath` also
reads the port rings and sends by itself, and the loop asks for it with
`SwitchProgram.compiled_path()`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from topologies.errors import UserInputError

from .tm_config import TmConfig

if TYPE_CHECKING:
    from .sample_ring import SampleRing
    from .shared_counters import SharedCounters


class PortCounts(Protocol):
    """One count per port the loop adds to (`counts[port] += n`): a list or a numpy row."""

    def __getitem__(self, port: int, /) -> Any: ...

    def __setitem__(self, port: int, value: int, /) -> None: ...


class FrameQueues(Protocol):
    """The traffic manager as the loop sees it: frames in, with the time a host began
    sending them; finished frames and PFC frames out (the loop sends and clears them)."""

    def receive(self, port: int, frame: bytes, stamp: float) -> None: ...

    def next_event_time(self) -> float | None:
        """When the next reception, departure or PFC refresh is due (None: nothing is)."""
        ...

    @property
    def now(self) -> float: ...

    @property
    def transmitted(self) -> list[tuple[int, bytes]]: ...

    @property
    def transmitted_due(self) -> list[float]: ...

    @property
    def control(self) -> list[tuple[int, bytes]]: ...


class CompiledPath(Protocol):
    """What a compiled program does without Python: read the port rings (PACKET_RX_RING)
    and send with sendmmsg() (`read_ring`, `send`), or run the whole loop, sleeping
    included, until a deadline (`add_ring` each port's ring, then `run`)."""

    @property
    def stamp_fallbacks(self) -> int: ...

    def read_ring(
        self,
        port: int,
        ring: Any,
        next_slot: int,
        slots: int,
        slot_bytes: int,
        limit: int,
        offset: float | None,
        read_time: float,
    ) -> tuple[int, int, int, float, int]: ...

    def send(self, fds: Sequence[int], now: float) -> int: ...

    def add_ring(
        self, port: int, ring: Any, slots: int, slot_bytes: int, next_slot: int
    ) -> None: ...

    def release_rings(self) -> None: ...

    def run(
        self,
        poll_fds: Sequence[int],
        send_fds: Sequence[int],
        offset: float | None,
        until: float,
        busy_until: float,
        granularity: float = 0.0,
    ) -> tuple[int, int]: ...


class SwitchProgram(Protocol):
    """The switch program over one DataplaneState and one traffic manager.

    It has no sockets and takes `now` from the caller, so tests run it on a
    fake clock.
    """

    # Fidelity: how late the loop woke up for the event it slept toward (the
    # loop fills these; departure lateness is the program's own).
    wakeup_max: float
    # The ring of 10 ms samples it writes (None: it does not sample).
    sample_ring: SampleRing | None

    @property
    def tm(self) -> FrameQueues: ...

    @property
    def shared(self) -> SharedCounters | None:
        """The block counters and statistics go to (in a packet-loop process)."""
        ...

    @property
    def rx_overruns(self) -> PortCounts:
        """Frames the kernel dropped before the loop read them."""
        ...

    @property
    def port_down(self) -> PortCounts:
        """1 for a port whose interface the loop found gone (gNMI oper-status DOWN)."""
        ...

    @property
    def send_errors(self) -> PortCounts:
        """Finished frames a host socket refused."""
        ...

    @property
    def wakeup_lateness(self) -> np.ndarray: ...

    def start_sampling(self, ring: SampleRing, first_due: float) -> None:
        """Sample the job counts and deepest queues into `ring` every ring.interval_s:
        a compiled loop (`CompiledPath.run`) does it itself, a Python loop calls `sample`."""
        ...

    def sample(self, loop_time: float, wall_time: float) -> None:
        """One sample into the ring now (resets each port's deepest queue)."""
        ...

    def compiled_path(self) -> CompiledPath | None:
        """The compiled reader and sender, or None for a program that runs in Python."""
        ...

    def ingress(self, port: int, frame: bytes, now: float) -> None:
        """One received frame through parser, ingress counter, table and queue."""
        ...

    def receive(self, port: int, frame: bytes, stamp: float) -> None:
        """A frame a host began sending at `stamp`; ingress runs when it is fully received."""
        ...

    def advance(self, now: float) -> None:
        """Run everything due by `now` in time order: receptions (from hosts and
        cables) through ingress, departures, PFC refreshes."""
        ...

    def note_departures(self, now: float) -> None:
        """The frames in `tm.transmitted` are handed to their sockets at `now`."""
        ...

    def flush_counters(self) -> None:
        """Add what changed since the last flush to the shared P4 counter arrays."""
        ...

    def publish_stats(self) -> None:
        """Copy every per-port statistic and the lateness histograms into the shared block."""
        ...

    def port_stats(self) -> dict[str, dict[int, int]]:
        """Every statistic of `port_stats.STAT_NAMES`, per port (non-zero ones only)."""
        ...

    def stats(self) -> dict[str, dict[int, int]]:
        """Drops and events that have no P4 counter, per port (for logs and tests)."""
        ...


def program_ports(config: TmConfig, interface_ports: Iterable[int]) -> tuple[list[int], list[int]]:
    """(interface ports, all ports: interfaces and cable ends), sorted; a port may not be both.

    >>> from emulation.softswitch.tm_config import LoopbackCable
    >>> program_ports(TmConfig(loopback_cables=(LoopbackCable(10, 11, 1.0),)), [2, 1])
    ([1, 2], [1, 2, 10, 11])
    """
    interfaces = sorted(set(interface_ports))
    cabled = set(config.cable_peers())
    both = cabled & set(interfaces)
    if both:
        raise UserInputError(
            f"port {min(both)} is both an interface port and one end of a loopback cable"
        )
    return interfaces, sorted(set(interfaces) | cabled)
