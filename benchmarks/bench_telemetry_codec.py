"""What does one 10 ms telemetry sample cost to encode (switch) and decode (collector)?

`.venv/bin/python benchmarks/bench_telemetry_codec.py` (no root): a sample of the
default testbed's 72 chip ports with `--busy` of them sending `--classes` job
classes each and queueing, encoded per leaf (`fast_notification`, a leaf per
count: what a subscription to /cassini/telemetry gets) and packed
(`packed_notification`: /cassini/telemetry/packed), each serialised as the
SubscribeResponse gRPC sends; then decoded as the collector does
(`decode_responses`: the response parsed, the sample built). Microseconds per
sample, the median of `--rounds` rounds of 200.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from pygnmi.spec.v080 import gnmi_pb2

from controlplane.job_samples import decode_responses
from emulation.softswitch.gnmi_telemetry import (
    fast_notification,
    packed_notification,
    packed_paths,
)
from emulation.softswitch.sample_ring import Sample
from emulation.softswitch.state import JOB_CLASSES

PORTS = tuple(range(1, 73))


def busy_sample(busy: int, classes: int) -> Sample:
    """A sample whose first `busy` ports send `classes` classes each and queue."""
    z = np.zeros((len(PORTS), JOB_CLASSES), np.int64)
    packets, byte_counts, marks = z.copy(), z.copy(), z.copy()
    packets[:busy, 1 : classes + 1] = 40
    byte_counts[:busy, 1 : classes + 1] = 60_000
    marks[:busy, 1] = 3
    depths = np.zeros(len(PORTS), np.int64)
    depths[:busy] = 17
    return Sample(5, 1.0, time.time(), 1, PORTS, packets, byte_counts, marks, depths)


def per_sample_us(work: Callable[[], Any], rounds: int, n: int = 200) -> float:
    """Median microseconds of one call of `work`."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(n):
            work()
        times.append((time.perf_counter() - start) / n * 1e6)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--busy", type=int, default=20, help="ports sending")
    parser.add_argument("--classes", type=int, default=3, help="job classes per busy port")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    sample = busy_sample(args.busy, args.classes)
    names = {p: f"port{p}" for p in PORTS}
    ports = {f"port{p}": p for p in PORTS}
    cache: dict[Any, tuple[bytes, ...]] = {}
    paths = packed_paths()
    forms = {
        "per leaf": lambda: fast_notification(sample, names, 0, None, cache),
        "packed": lambda: packed_notification(sample, 0, None, paths),
    }
    print("| form | updates | bytes | encode us | decode us |")
    print("|---|---|---|---|---|")
    for form, encode in forms.items():

        def response(encode: Callable[[], Any] = encode) -> bytes:
            return bytes(gnmi_pb2.SubscribeResponse(update=encode()).SerializeToString())

        raw = response()
        meanings: dict[bytes, Any] = {}

        def decode(raw: bytes = raw, meanings: dict[bytes, Any] = meanings) -> Any:
            return decode_responses([raw], ports, 0.01, meanings)

        encode_us = per_sample_us(response, args.rounds)
        decode_us = per_sample_us(decode, args.rounds)
        updates = len(gnmi_pb2.SubscribeResponse.FromString(raw).update.update)
        print(f"| {form} | {updates} | {len(raw)} | {encode_us:.0f} | {decode_us:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
