"""What does streaming the 10 ms telemetry cost the switch?

Run as root: `.venv/bin/python benchmarks/bench_telemetry_cost.py --runs 2 --iterations 30`;
`--isolated` (no root) measures the gNMI service alone instead.

On the default testbed (S = 0.001) the shift cases' pair of one model
(`bench_shift_cases.shift_cases`, case (b)) runs `--runs` times with the
per-job telemetry collected over gNMI STREAM (as `cassini emulate` does)
and as often without it (the run's `RunTelemetry` replaced by one that does
nothing), alternating, on one fabric. Printed per run: the switch's CPU (its
process tree: P4Runtime/gNMI service and packet loop), the mean iteration
time, and the telemetry's samples and losses. The packet loop samples into
its ring either way (its own cost is `CASSINI_SWITCH_SAMPLING`'s, measured
apart); this is the cost of reading the ring and streaming it.

`--isolated`: a ring of 120 ports written every 10 ms by one process (20
ports sending two classes each, queues on those 20) and served by the gNMI
service in another; the service's CPU for 5 s without a subscriber, then 5 s
streaming to one `TelemetryStream`.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from controlplane.job_samples import TelemetryStream
from emulation.fabric.emulated import EmulatedFabric
from emulation.fabric.options import FabricOptions
from emulation.jobs import supervisor
from emulation.jobs.job_telemetry import RunTelemetry, Series
from emulation.jobs.launch import parse_schedule, plan_jobs
from emulation.jobs.run_settings import RunSettings
from topologies.library import load_topology

ISOLATED_PORTS = tuple(range(1, 121))

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_shift_cases import TOPOLOGY, shift_cases  # noqa: E402


class NoTelemetry:
    """A RunTelemetry that installs and collects nothing."""

    def __init__(self, *args: Any) -> None:
        pass

    def start(self) -> NoTelemetry:
        return self

    def stop(self) -> Series:
        return Series()


def _write_ring(words: Any, stop: Any) -> None:
    from emulation.softswitch.sample_ring import SampleRing

    n = len(ISOLATED_PORTS)
    ring = SampleRing(np.frombuffer(words, np.int64), ISOLATED_PORTS)
    packets, byte_counts, marks = (np.zeros(n * 16, np.int64) for _ in range(3))
    depths = np.zeros(n, np.int64)
    depths[:40:2] = 3
    k = 0
    while not stop.is_set():
        packets[1:640:32] += 5  # ports 0, 2, ..., 38: class 1 ...
        byte_counts[1:640:32] += 7000
        packets[2:640:32] += 1  # ... and class 2
        byte_counts[2:640:32] += 66
        ring.write(k * 0.01, time.time(), packets, byte_counts, marks, depths)
        k += 1
        time.sleep(0.01)


def _serve_ring(words: Any, ready: Any, stop: Any) -> None:
    from concurrent import futures

    import grpc

    from emulation.softswitch.gnmi_service import add_gnmi_service
    from emulation.softswitch.gnmi_telemetry import TelemetrySource
    from emulation.softswitch.sample_ring import SampleRing

    ring = SampleRing(np.frombuffer(words, np.int64), ISOLATED_PORTS)
    server = grpc.server(futures.ThreadPoolExecutor(8))
    add_gnmi_service(server, lambda: [], telemetry=TelemetrySource(lambda: ring, {}))
    ready.put(server.add_insecure_port("127.0.0.1:0"))
    server.start()
    stop.wait()
    server.stop(0)


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def isolated(seconds: float = 5.0) -> None:
    """The gNMI service's CPU idle and streaming (see the module docstring)."""
    from emulation.softswitch.sample_ring import ring_words

    words = multiprocessing.RawArray("q", ring_words(len(ISOLATED_PORTS)))
    stop = multiprocessing.Event()
    ready: Any = multiprocessing.Queue()
    procs = [
        multiprocessing.Process(target=_write_ring, args=(words, stop)),
        multiprocessing.Process(target=_serve_ring, args=(words, ready, stop)),
    ]
    for p in procs:
        p.start()
    try:
        port, pid = ready.get(timeout=30), procs[1].pid or 0
        time.sleep(1.0)
        before = _cpu_s(pid)
        time.sleep(seconds)
        idle = (_cpu_s(pid) - before) / seconds
        got: list[Any] = []
        stream = TelemetryStream(f"127.0.0.1:{port}", {}, got.append).start()
        before = _cpu_s(pid)
        time.sleep(seconds)
        streaming = (_cpu_s(pid) - before) / seconds
        stream.stop()
        print(f"gNMI service: {idle:.3f} cores idle, {streaming:.3f} streaming "
              f"({len(got)} samples, {stream.lost} lost)")  # fmt: skip
    finally:
        stop.set()
        for p in procs:
            p.join(timeout=10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=2, help="runs with and without, each")
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--isolated", action="store_true", help="the gNMI service alone")
    args = parser.parse_args()
    if args.isolated:
        isolated()
        return 0
    topo = load_topology(TOPOLOGY)
    schedule = shift_cases(topo, args.model)["b"]
    jobs = plan_jobs(parse_schedule(schedule, "case b"), topo)
    rows: dict[str, list[tuple[float, float]]] = {"on": [], "off": []}
    with (
        tempfile.TemporaryDirectory() as scratch,
        EmulatedFabric(topo, FabricOptions(scale=0.001)) as fabric,
    ):
        for k in range(2 * args.runs):
            mode = "on" if k % 2 == 0 else "off"
            chosen: Any = RunTelemetry if mode == "on" else NoTelemetry
            supervisor.RunTelemetry = chosen  # type: ignore[misc]
            settings = replace(RunSettings(), iterations=args.iterations)
            result = supervisor.run_schedule(fabric, jobs, settings, Path(scratch) / str(k))
            cpu = result.fidelity.get("switch_cpu_cores") or float("nan")
            times = [r.iteration_ms for r in result.records if r.iteration >= 1]
            mean = statistics.fmean(times) if times else float("nan")
            rows[mode].append((cpu, mean))
            info = result.telemetry_info
            print(
                f"run {k} telemetry {mode}: switch {cpu:.3f} cores, mean iteration {mean:.1f} ms, "
                f"samples {info.get('samples', 0)}, lost {info.get('lost_samples', 0)}",
                flush=True,
            )
    for mode, got in rows.items():
        cpus = [c for c, _ in got]
        print(f"telemetry {mode}: switch {statistics.fmean(cpus):.3f} cores (runs: "
              + ", ".join(f"{c:.3f}" for c in cpus) + ")")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
