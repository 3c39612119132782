"""How does the packet loop run in a process of its own, and how does the service reach it?

The P4Runtime service parses protobufs in pure Python and holds the
interpreter lock while it does: a packet loop in the same process stopped
for hundreds of milliseconds during a large Write, a full Read, or the
counter read `ecn watch` makes every second. So the loop runs in a child
process (`python -m emulation.softswitch.datapath_process`, started fresh: it
inherits no threads and no locks) that opens the port sockets and owns the
tables. The two sides share:

- a control socket: the service sends each Write's `Change`s as one
  message; the loop applies a message between two packet batches, so the
  packet path sees a batch whole or not at all, and acknowledges it; the
  Write returns after the acknowledgement, so a frame sent after a Write
  returned meets its entries;
- a shared memory block (`shared_counters.SharedCounters`): the P4 counters,
  written by the loop every millisecond, and the per-port statistics of
  `port_stats.STAT_NAMES`, every `datapath.STATS_PUBLISH_S`, both under a
  sequence lock so a reader copies a consistent snapshot without asking the
  loop anything; and the ring of 10 ms samples per (port, job class)
  (`sample_ring`), which a reader takes from `DatapathProcess.sample_ring()`.

The child ends when told to, when the control socket closes (its parent
died), or on SIGTERM. Its command line names the interfaces, so `cassini
clean` finds it as it finds switch processes.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from emulation.housekeeping.signals import exit_cause
from topologies.errors import UserInputError

from .datapath import Datapath, wakeup_granularity
from .fast_pipeline import FastSwitchProgram, available
from .port_stats import Lateness
from .ports import open_ports
from .processes import DATAPATH_MODULE
from .reference_program import ReferenceSwitchProgram
from .sample_ring import SAMPLE_INTERVAL_S, SampleRing
from .shared_counters import SharedCounters
from .state import Change, DataplaneState, apply_batch, reduce_changes
from .switch_program import SwitchProgram, program_ports
from .tm_config import TmConfig

log = logging.getLogger(__name__)

MODULE = DATAPATH_MODULE
START_TIMEOUT_S = 30.0
ACK_TIMEOUT_S = 30.0
PR_SET_PDEATHSIG = 1
GC_YOUNG_THRESHOLD = 50_000
# (our choice) Set to "off" in the switch's environment, the loop does not sample (for
# measuring what sampling costs: benchmarks/README.md); any other value samples.
SAMPLING_ENV = "CASSINI_SWITCH_SAMPLING"


@dataclass(frozen=True)
class DatapathSpec:
    """Everything the child needs to build its pipeline (sent over the control socket)."""

    ports: Mapping[int, str]  # switch port -> interface
    tm: TmConfig
    counter_names: tuple[str, ...]  # as the P4Info spells them
    seed: int = 0
    rx_ring: bool = True
    kernel_timestamps: bool = True
    log_level: int = logging.INFO
    # (our choice) The loop runs at least at this niceness (when allowed: root), so
    # its own service parsing a large Write, or a busy client on the other core,
    # cannot take its CPU: every microsecond it waits is added to a frame's delay.
    nice: int = -10
    # (our choice) ... and, when allowed, under SCHED_FIFO at this priority (0: not):
    # with both cores busy (the service parsing, a client, replicas), nice alone left
    # p99 delays of 2-3 ms and 10-30 ms peaks; real-time scheduling took p99 to 0.2 ms.
    # The kernel's real-time throttling still leaves 5% of that core to the others.
    realtime_priority: int = 10
    # Every this many seconds the loop samples the job counters and queue depths into
    # the shared ring (sample_ring.py); 0: never.
    sample_interval_s: float = SAMPLE_INTERVAL_S
    # The compiled switch program (fast_pipeline.py); False runs the Python reference.
    fast: bool = True
    # The one CPU the loop runs on (emulation/housekeeping/cpu_split.py); None: wherever Linux puts it.
    cpu: int | None = None


class DatapathProcess:
    """The parent's handle on the packet loop: start, apply changes, read counters, stop.

    It is the service's `Dataplane` (see state.py).
    """

    def __init__(self, spec: DatapathSpec) -> None:
        self.spec = spec
        self.process: subprocess.Popen[bytes] | None = None
        self.shared: SharedCounters | None = None
        self.port_macs: dict[int, bytes] = {}
        self.uses_ring = False
        self._control: Connection | None = None
        self._lock = threading.Lock()
        self._sequence = 0

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def start(self) -> DatapathProcess:
        """Spawn the child and wait until its ports are open; UserInputError if they cannot be."""
        self.shared = SharedCounters.create(self.spec.counter_names, sampled_ports(self.spec))
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            argv = [sys.executable, "-m", MODULE, "--control-fd", str(child_end.fileno())]
            argv += ["--memory-fd", str(self.shared.fd)]
            for port, ifname in sorted(self.spec.ports.items()):
                argv += ["-i", f"{port}@{ifname}"]
            self.process = subprocess.Popen(
                argv, pass_fds=(child_end.fileno(), self.shared.fd), stdin=subprocess.DEVNULL
            )
        finally:
            child_end.close()
        self._control = Connection(parent_end.detach())
        try:
            self._control.send(self.spec)
            reply = self._receive(START_TIMEOUT_S, "starting")
            if reply[0] == "error":
                raise UserInputError(reply[1])
            _kind, macs, uses_ring = reply
            self.port_macs, self.uses_ring = dict(macs), bool(uses_ring)
        except BaseException:
            self.stop()
            raise
        log.info("packet loop running in process %d", self.process.pid)
        return self

    def _receive(self, timeout: float, doing: str) -> Any:
        assert self._control is not None
        end = time.monotonic() + timeout
        while not self._control.poll(0.05):
            code = self.process.poll() if self.process is not None else None
            if code is not None:
                raise RuntimeError(f"the packet loop (process {self.pid}) {exit_cause(code)}")
            if time.monotonic() > end:
                raise RuntimeError(f"the packet loop did not answer within {timeout:g} s ({doing})")
        try:
            return self._control.recv()
        except (EOFError, OSError):
            code = self.process.wait(1.0) if self.process is not None else None
            raise RuntimeError(f"the packet loop (process {self.pid}) {exit_cause(code)}") from None

    # --- the Dataplane protocol ------------------------------------------------------

    def apply(self, changes: Sequence[Change]) -> None:
        """Send one batch; return once the loop has applied it."""
        with self._lock:
            if self._control is None:
                raise RuntimeError("the packet loop is not running")
            self._sequence += 1
            self._control.send(("apply", self._sequence, reduce_changes(changes)))
            while True:
                reply = self._receive(ACK_TIMEOUT_S, f"applying {len(changes)} changes")
                if reply == ("ack", self._sequence):
                    return

    def counters(self, names: Iterable[str]) -> dict[str, np.ndarray]:
        if self.shared is None:
            raise RuntimeError("the packet loop is not running")
        return self.shared.read_counters(names)

    # --- the rest ------------------------------------------------------------------

    def stats(self) -> dict[str, dict[int, int]]:
        if self.shared is None:
            return {}
        return self.shared.read_stats()

    def class_stats(self) -> dict[str, dict[tuple[int, int], int]]:
        """Per (port, queue class) counters as the loop last published them."""
        if self.shared is None:
            return {}
        return self.shared.read_class_stats()

    def sample_ring(self) -> SampleRing:
        """The ring the loop samples into every 10 ms (read it with sample_ring.SampleReader)."""
        if self.shared is None:
            raise RuntimeError("the packet loop is not running")
        return self.shared.ring

    def fidelity(self) -> dict[str, Lateness]:
        """How late frames left and the loop woke up (port_stats.FIDELITY_NAMES)."""
        if self.shared is None:
            return {}
        return self.shared.read_fidelity()

    def fidelity_histograms(self) -> dict[str, tuple[tuple[int, ...], float]]:
        """The raw lateness histograms (`SharedCounters.read_fidelity_histograms`)."""
        if self.shared is None:
            return {}
        return self.shared.read_fidelity_histograms()

    def set_port_enabled(self, port: int, enabled: bool) -> None:
        """Take `port` down (its frames dropped, counted as tail drops) or up; returns once
        the loop has done it."""
        with self._lock:
            if self._control is None:
                raise RuntimeError("the packet loop is not running")
            self._sequence += 1
            self._control.send(("port", self._sequence, port, enabled))
            while True:
                reply = self._receive(ACK_TIMEOUT_S, f"setting port {port}")
                if reply == ("ack", self._sequence):
                    return

    def stall(self, seconds: float) -> None:
        """Make the loop sleep once, as if it had lost its core (for tests)."""
        with self._lock:
            if self._control is not None:
                self._control.send(("stall", seconds))

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def failure(self) -> str | None:
        """Why the loop is gone, if it died on its own; None while it runs."""
        if self.process is None or self.process.poll() is None:
            return None
        return f"the packet loop (process {self.pid}) {exit_cause(self.process.returncode)}"

    def stop(self, timeout: float = 2.0) -> None:
        """Ask the loop to stop, then make sure it has (idempotent)."""
        with self._lock:
            control, self._control = self._control, None
        if control is not None:
            with contextlib.suppress(OSError):
                control.send(("stop",))
            control.close()  # the child also stops on EOF
        if self.process is not None:
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                log.error("packet loop %d did not stop within %.1f s; killed", self.pid, timeout)
                self.process.kill()
                self.process.wait()
        if self.shared is not None:
            self.shared.close()
            self.shared = None


def sampled_ports(spec: DatapathSpec) -> list[int]:
    """The ports the sample ring holds: every port of the program, cable ends included."""
    return program_ports(spec.tm, spec.ports)[1]


# --- the child -----------------------------------------------------------------------


def _child(control: Connection, memory_fd: int) -> int:
    """Run the packet loop until told to stop; returns the exit code."""
    spec: DatapathSpec = control.recv()
    current = os.getpriority(os.PRIO_PROCESS, 0)
    if spec.nice < current:
        with contextlib.suppress(PermissionError):
            os.setpriority(os.PRIO_PROCESS, 0, spec.nice)
    if spec.realtime_priority > 0:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(spec.realtime_priority))
        except (PermissionError, OSError) as err:
            log.info(
                "packet loop: no real-time scheduling (%s); running at nice %d", err, spec.nice
            )
    logging.basicConfig(
        level=spec.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if spec.cpu is not None:
        try:
            os.sched_setaffinity(0, {spec.cpu})
        except OSError as err:
            log.warning("packet loop: not pinned to CPU %d (%s)", spec.cpu, err)
    try:
        sockets = open_ports(spec.ports, use_ring=spec.rx_ring)
    except UserInputError as err:
        control.send(("error", str(err)))
        return 2
    shared = SharedCounters(memory_fd, spec.counter_names, sampled_ports(spec))
    state = DataplaneState(counters=shared.counter_views())
    if spec.fast and not available():
        log.warning("packet loop: the compiled path is not built; running the Python reference")
    program = FastSwitchProgram if spec.fast and available() else ReferenceSwitchProgram
    pipeline: SwitchProgram = program(
        state,
        spec.tm,
        spec.ports,
        seed=spec.seed,
        port_macs={s.port: s.mac for s in sockets},
        counter_names=spec.counter_names,
        shared=shared,
    )
    if spec.sample_interval_s > 0 and os.environ.get(SAMPLING_ENV, "on") != "off":
        pipeline.start_sampling(shared.ring, time.monotonic() + spec.sample_interval_s)
    else:
        log.info("packet loop: not sampling the job counters (%s)", SAMPLING_ENV)
    datapath = Datapath(
        pipeline,
        sockets,
        kernel_timestamps=spec.kernel_timestamps,
        granularity=wakeup_granularity(spec.tm, spec.ports),
    )

    def on_control() -> None:
        while control.poll():
            try:
                message = control.recv()
            except (EOFError, OSError):
                datapath.request_stop()
                return
            kind = message[0]
            if kind == "apply":
                shared.begin()
                try:
                    apply_batch(state, message[2])
                finally:
                    shared.end()
                control.send(("ack", message[1]))
            elif kind == "port":  # ("port", sequence, port, enabled): an operator's
                pipeline.port_down[message[2]] = 0 if message[3] else 1
                pipeline.publish_stats()
                control.send(("ack", message[1]))
            elif kind == "stall":
                datapath.stall(message[1])
            elif kind == "stop":
                datapath.request_stop()
                return

    datapath.control = (control.fileno(), on_control)
    # (our choice) The loop allocates a few objects per frame and builds no cycles:
    # what exists now is kept out of collections, and the youngest generation is
    # collected 70x less often than by default (collections were 4% of the loop).
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, 50, 100)
    signal.signal(signal.SIGTERM, lambda _signum, _frame: datapath.request_stop())
    uses_ring = all(s.rx_ring is not None for s in sockets)
    control.send(("ready", {s.port: s.mac for s in sockets}, uses_ring))
    try:
        datapath.run()
    finally:
        for port_socket in sockets:
            port_socket.close()
        for name, per_port in pipeline.stats().items():
            if per_port:
                log.info("packet loop %s: %s", name, per_port)
        for name, summary in shared.read_fidelity().items():
            log.info("packet loop %s: %s", name, summary.as_dict())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}")
    parser.add_argument("--control-fd", type=int, required=True)
    parser.add_argument("--memory-fd", type=int, required=True)
    parser.add_argument("-i", action="append", default=[], help="PORT@IFACE (for `cassini clean`)")
    args = parser.parse_args(argv)
    # Ctrl-C and a closed terminal's SIGHUP reach the whole process group: the parent
    # decides when the loop stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    control = Connection(args.control_fd)
    try:
        return _child(control, args.memory_fd)
    except (EOFError, OSError) as err:
        log.error("packet loop: control socket closed: %s", err)
        return 1
    finally:
        control.close()


if __name__ == "__main__":
    raise SystemExit(main())
