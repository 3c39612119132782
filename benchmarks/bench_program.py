"""How long does programming the default testbed take? (run by hand, prints numbers)

    .venv/bin/python benchmarks/bench_program.py [--repeat 3] [--batch-size 500]

Measures against the software P4Runtime target in this process: pipeline push
plus all inserts, an idempotent re-run (read + diff), a WRED threshold change
(72 modifies), and one wildcard counter read.
"""

from __future__ import annotations

import argparse
import time

from controlplane.compile import desired_entries
from controlplane.p4info import load_p4info
from controlplane.program import program_device
from controlplane.session import P4RuntimeSession
from controlplane.settings import WredSettings
from emulation.softswitch.p4runtime_service import serve
from topologies.chip_mapping import map_to_chip
from topologies.library import load_topology


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--topology", default="cassini-testbed")
    args = parser.parse_args()
    index = load_p4info()
    topo = load_topology(args.topology)
    chip = map_to_chip(topo)
    first = [e.canonical(index) for e in desired_entries(topo, chip, WredSettings())]
    second = [e.canonical(index) for e in desired_entries(topo, chip, WredSettings(800, 1600, 50))]
    print(f"topology {topo.name}: {len(first)} entries, batch size {args.batch_size}")
    for run in range(args.repeat):
        with (
            serve(device_id=1) as device,
            P4RuntimeSession.connect(device.address, 1, p4info=index) as s,
        ):
            t0 = time.perf_counter()
            r1 = program_device(s, first, index, batch_size=args.batch_size)
            t1 = time.perf_counter()
            r2 = program_device(s, first, index, batch_size=args.batch_size)
            t2 = time.perf_counter()
            r3 = program_device(s, second, index, batch_size=args.batch_size)
            t3 = time.perf_counter()
            samples = s.read_counters()
            t4 = time.perf_counter()
        assert (
            len(r1.plan.inserts) == len(first)
            and r2.plan.is_empty()
            and len(r3.plan.modifies) == 72
        )
        print(
            f"run {run + 1}: push+insert {t1 - t0:.3f} s ({len(first) / (t1 - t0):.0f} entries/s), "
            f"idempotent re-run {t2 - t1:.3f} s, 72 WRED modifies {t3 - t2:.3f} s, "
            f"counter read ({len(samples)} cells) {t4 - t3:.3f} s"
        )


if __name__ == "__main__":
    main()
