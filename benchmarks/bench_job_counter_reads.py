"""How often can the per-job telemetry be sampled by P4Runtime counter reads?

Run: `.venv/bin/python benchmarks/bench_job_counter_reads.py --ports 72 --seconds 10`.

The bmv2/Tofino path of issue 25 (`controlplane.job_samples.CounterSampler`):
each sample reads `job_tx` and `job_ecn_marked` for every (port, class) cell
of the chip's ports (16 classes each). Measured here against the software
switch's P4Runtime service, in a process of its own (as in a fabric), with
the sampler as fast as it can go: samples per second and the service's CPU.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time
from typing import Any

from controlplane.job_samples import CounterSampler
from controlplane.p4info import load_p4info
from controlplane.session import P4RuntimeSession


def _serve(queue: multiprocessing.Queue[str], stop: Any) -> None:
    from emulation.softswitch.p4runtime_service import serve

    server = serve(device_id=1)
    queue.put(server.address)
    stop.wait()
    server.stop()


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ports", type=int, default=72, help="chip ports sampled")
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    queue: multiprocessing.Queue[str] = multiprocessing.Queue()
    stop = multiprocessing.Event()
    process = multiprocessing.Process(target=_serve, args=(queue, stop), daemon=True)
    process.start()
    try:
        address = queue.get(timeout=30)
        with P4RuntimeSession.connect(address, 1) as session:
            session.set_pipeline(load_p4info())
        with P4RuntimeSession.connect(address, 1, None) as session:
            sampler = CounterSampler(session, range(1, args.ports + 1))
            sampler.take()
            samples, began, cpu0 = 0, time.monotonic(), _cpu_s(process.pid or 0)
            while time.monotonic() - began < args.seconds:
                sampler.take()
                samples += 1
            elapsed = time.monotonic() - began
            cpu = (_cpu_s(process.pid or 0) - cpu0) / elapsed
        cells = args.ports * 16 * 2
        print(
            f"{args.ports} ports ({cells} counter cells per sample): {samples / elapsed:.1f} "
            f"samples/s ({1e3 * elapsed / samples:.1f} ms each); the service used {cpu:.2f} cores"
        )
    finally:
        stop.set()
        process.join(timeout=10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
