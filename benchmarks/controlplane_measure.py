"""The measurements `bench_controlplane.py` runs in child processes, so each runs under
the protobuf implementation its environment picks (compiled upb, or pure Python with
PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python) while the benchmark itself stays on one.

    python controlplane_measure.py encode [--seconds 3]
    python controlplane_measure.py poll --grpc ADDR --switch-pid PID [--what both] [--count 50]
    python controlplane_measure.py poll --grpc ADDR --switch-pid PID --hz 10 --seconds 20

Each prints one JSON object on stdout.

- encode: the default testbed's entries as the control plane builds them
  (`desired_entries`, the entries `cassini program` writes), as INSERT updates
  in WriteRequests of 500 (the session's batch size): built (`Update.to_proto`),
  serialised, parsed (`WriteRequest.FromString`, what the switch's gRPC layer
  does), and, separately timed, turned back into `TableEntry`s (`from_proto`).
- poll: what one interval of `controlplane/counter_watch.py` reads: the P4
  counters of the chip's ports (`telemetry.snapshot`, one entity per cell) and
  a gNMI Get of every interface (`GnmiReader.read`). Back to back (`--count`)
  or on a fixed grid (`--hz`, a tick missed while a poll still runs is skipped,
  not caught up). The switch service's CPU (utime + stime of `--switch-pid`,
  its packet loop is a process of its own) is read just before the first poll
  and just after the last, so connecting does not count.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TOPOLOGY = "cassini-testbed"
BATCH = 500  # controlplane.session.P4RuntimeSession.write's default batch size
POLL_PARTS = ("counters", "gnmi", "both")


def implementation() -> str:
    """The protobuf implementation this process runs ('upb' or 'python')."""
    from google.protobuf.internal import api_implementation

    return str(api_implementation.Type())


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (not its children), from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def testbed_updates() -> tuple[Any, list[Any]]:
    """The P4Info index and the default testbed's entries as INSERT updates."""
    from controlplane.compile import desired_entries
    from controlplane.entries import Update, UpdateType
    from controlplane.p4info import load_p4info
    from controlplane.settings import WredSettings
    from topologies.chip_mapping import map_to_chip
    from topologies.library import load_topology

    index = load_p4info()
    topo = load_topology(TOPOLOGY)
    entries = desired_entries(topo, map_to_chip(topo), WredSettings())
    return index, [Update(UpdateType.INSERT, e.canonical(index)) for e in entries]


def encode(seconds: float) -> dict[str, Any]:
    """Entries per second built + serialised + parsed, and turned back into TableEntry."""
    from controlplane.entries import TableEntry
    from controlplane.proto.p4.v1 import p4runtime_pb2

    index, updates = testbed_updates()
    batches = [updates[i : i + BATCH] for i in range(0, len(updates), BATCH)]
    build = serialise = parse = decode = 0.0
    rounds = 0
    began = time.perf_counter()
    while rounds == 0 or time.perf_counter() - began < seconds:
        for batch in batches:
            t0 = time.perf_counter()
            request = p4runtime_pb2.WriteRequest(device_id=1)
            request.election_id.low = 1
            for update in batch:
                request.updates.append(update.to_proto(index))
            t1 = time.perf_counter()
            data = request.SerializeToString()
            t2 = time.perf_counter()
            parsed = p4runtime_pb2.WriteRequest.FromString(data)
            t3 = time.perf_counter()
            back = [TableEntry.from_proto(index, u.entity.table_entry) for u in parsed.updates]
            t4 = time.perf_counter()
            assert len(back) == len(batch)
            build, serialise, parse, decode = (
                build + t1 - t0,
                serialise + t2 - t1,
                parse + t3 - t2,
                decode + t4 - t3,
            )
        rounds += 1
    n = rounds * len(updates)
    return {
        "implementation": implementation(),
        "entries": len(updates),
        "rounds": rounds,
        "build_s": build,
        "serialise_s": serialise,
        "parse_s": parse,
        "decode_s": decode,
        "per_s": n / (build + serialise + parse),
        "per_s_with_decode": n / (build + serialise + parse + decode),
    }


def poller(
    address: str, timeout: float
) -> tuple[Callable[[str], dict[str, float]], Callable[[], None]]:
    """poll(part) -> {part: seconds}, as counter_watch reads; and a close()."""
    from controlplane.gnmi import GnmiReader
    from controlplane.session import P4RuntimeSession
    from controlplane.telemetry import snapshot
    from topologies.chip_mapping import map_to_chip
    from topologies.library import load_topology

    ports = map_to_chip(load_topology(TOPOLOGY)).ports()
    session = P4RuntimeSession.connect(address, 1, None, timeout=timeout)  # read-only
    reader = GnmiReader(address, timeout)
    sizes: dict[str, float] = {}

    def poll(part: str) -> dict[str, float]:
        took: dict[str, float] = {}
        if part in ("counters", "both"):
            t0 = time.perf_counter()
            snap = snapshot(session, ports=ports)
            took["counters"] = time.perf_counter() - t0
            sizes["counter_cells"] = len(snap.cells)
        if part in ("gnmi", "both"):
            t0 = time.perf_counter()
            found = reader.read()
            took["gnmi"] = time.perf_counter() - t0
            sizes["interfaces"] = len(found)
            sizes["gnmi_leaves"] = sum(len(i.counters) + (i.port is not None) for i in found)
        return {**took, **sizes}

    def close() -> None:
        reader.close()
        session.close()

    return poll, close


def poll(
    address: str,
    switch_pid: int,
    part: str,
    count: int | None,
    hz: float | None,
    seconds: float,
    timeout: float,
) -> dict[str, Any]:
    """Poll back to back `count` times, or at `hz` for `seconds`; durations and service CPU."""
    run, close = poller(address, timeout)
    try:
        run(part)  # warm-up: channels connected, the pipeline's P4Info fetched
        polls: list[dict[str, float]] = []
        missed = 0
        cpu0, t0 = cpu_seconds(switch_pid), time.perf_counter()
        if count is not None:
            for _ in range(count):
                polls.append(run(part))
        else:
            assert hz is not None
            period, k = 1.0 / hz, 0
            while True:
                due = t0 + k * period
                if due - t0 >= seconds:
                    break
                delay = due - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                polls.append(run(part))
                late = int((time.perf_counter() - t0) / period) + 1  # next tick not yet due
                missed += max(0, late - k - 1)
                k = max(k + 1, late)
        wall, cpu = time.perf_counter() - t0, cpu_seconds(switch_pid) - cpu0
    finally:
        close()
    parts = [p for p in ("counters", "gnmi") if p in polls[0]] if polls else []
    return {
        "implementation": implementation(),
        "part": part,
        "polls": len(polls),
        "missed_ticks": missed,
        "wall_s": wall,
        "service_cpu_s": cpu,
        "durations_s": {p: [x[p] for x in polls] for p in parts},
        "interfaces": int(polls[-1].get("interfaces", 0)) if polls else 0,
        "counter_cells": int(polls[-1].get("counter_cells", 0)) if polls else 0,
        "gnmi_leaves": int(polls[-1].get("gnmi_leaves", 0)) if polls else 0,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    enc = sub.add_parser("encode", help="entries built, serialised and parsed per second")
    enc.add_argument("--seconds", type=float, default=3.0)
    pol = sub.add_parser("poll", help="counter and gNMI polls against a running switch")
    pol.add_argument("--grpc", required=True, help="the switch's P4Runtime/gNMI address")
    pol.add_argument("--switch-pid", type=int, required=True, help="its service's pid")
    pol.add_argument("--what", choices=POLL_PARTS, default="both")
    pol.add_argument("--count", type=int, help="polls back to back")
    pol.add_argument("--hz", type=float, help="polls per second, for --seconds")
    pol.add_argument("--seconds", type=float, default=20.0)
    pol.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args(argv)
    if args.command == "encode":
        result = encode(args.seconds)
    else:
        if (args.count is None) == (args.hz is None):
            parser.error("poll: give one of --count or --hz")
        result = poll(
            args.grpc, args.switch_pid, args.what, args.count, args.hz, args.seconds, args.timeout
        )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
