"""Do MLTCP's jobs fall into turns, and within how many iterations? Run folders compared.

Run after two `cassini fabric run`s of the shift cases' aligned pair (case (a),
`bench_shift_cases.shift_cases`), one with `--transport roce --policy mltcp`:
`.venv/bin/python benchmarks/mltcp_turns.py RUN ... --link 'tor1->agg1'`.

Per folder: the overlap on the shared link (`telemetry_rows.overlap`, the
measure summary.json gives per scheduler under `overlap_shared_links`: of the
10 ms samples in which a job sent above a quarter of the link, the share in
which both did) over the whole run and in blocks of the first job's
iterations (the samples between its block's first start and the next
block's), the CE marks on that link (the switch's counter, `ecn-links.csv`),
and the mean and p90 iteration time over both jobs' workers (iteration 0
left out, as `bench_shift_cases`).
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import numpy as np

from emulation.emulate.runner import link_rates
from emulation.emulate.telemetry_series import job_starts
from emulation.jobs.records import read_records
from emulation.jobs.run_folder import REPLICA_FOLDER
from emulation.jobs.telemetry_rows import TELEMETRY_FILE, TelemetryRow, overlap, read_telemetry
from topologies.library import load_topology

WARMUP = 1
# (our choice) A block in which at most this share of the busy samples had both jobs
# sending counts as the jobs taking turns (Th+Cassini's shifts gave 17% on the pair).
TURNS_LIMIT = 0.2


def block_fractions(
    rows: list[TelemetryRow], link: str, gbps: float, starts: np.ndarray, block: int
) -> list[float | None]:
    """The overlap in each block of `block` iterations of the first job (None: not busy)."""
    out = []
    for k in range(0, len(starts) - 1, block):
        lo, hi = starts[k], starts[min(k + block, len(starts) - 1)]
        mine = [r for r in rows if lo <= r.time_s < hi]
        out.append(overlap(mine, {link: gbps}, 0.01)[link].fraction)
    return out


def block_overlaps(
    rows: list[TelemetryRow], link: str, gbps: float, starts: np.ndarray, block: int
) -> list[str]:
    """`block_fractions` as percentages."""
    found = block_fractions(rows, link, gbps, starts, block)
    return ["-" if f is None else f"{f:.0%}" for f in found]


def turns_after(
    fractions: list[float | None], block: int, limit: float = TURNS_LIMIT
) -> int | None:
    """Iterations after which the jobs fell into turns: the start of the first block from
    which every block's overlap stays at most `limit`; None if they never did.

    >>> turns_after([0.9, 0.1, 0.6, 0.2, 0.1], 5), turns_after([0.9, 0.1], 5, 0.05)
    (15, None)
    """
    first = None
    for k, fraction in enumerate(fractions):
        if fraction is None or fraction > limit:
            first = None
        elif first is None:
            first = k
    return None if first is None else first * block


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="run folders (write_run's)")
    parser.add_argument("--link", default="tor1->agg1", help="the shared link")
    parser.add_argument("--topology", default="cassini-testbed")
    parser.add_argument("--block", type=int, default=5, help="iterations per overlap block")
    args = parser.parse_args()
    topo = load_topology(args.topology)
    for folder in args.folders:
        summary = json.loads((folder / "summary.json").read_text())
        gbps = link_rates(topo, summary["emulation_profile"]["scale"])[args.link]
        rows = [r for r in read_telemetry(folder / TELEMETRY_FILE) if r.link == args.link]
        whole = overlap(rows, {args.link: gbps}, 0.01)[args.link]
        paths = sorted((folder / REPLICA_FOLDER).glob("*.jsonl"))
        records = [r for p in paths for r in read_records(p)]
        starts = job_starts(records)
        first = starts[min(starts)]
        blocks = block_overlaps(rows, args.link, gbps, first.starts_s, args.block)
        times = np.array([r.iteration_ms for r in records if r.iteration >= WARMUP])
        with open(folder / "ecn-links.csv") as f:
            marks = sum(int(r["ecn_marked_packets"]) for r in csv.DictReader(f)
                        if r["link"] == args.link)  # fmt: skip
        settings = summary["settings"]
        machine = summary["fidelity"].get("machine_cpu", {})
        hosts = summary["fidelity"].get("hosts", {})
        print(
            f"{folder.name}: transport {settings.get('transport')} policy "
            f"{settings.get('policy', 'none')}; overlap {whole.fraction:.0%} "
            f"({whole.overlapped_samples}/{whole.busy_samples} busy samples); marks on "
            f"{args.link} {marks}; iteration mean {times.mean():.1f} ms p90 "
            f"{np.percentile(times, 90):.1f} ms; overlap per {args.block} iterations "
            f"{' '.join(blocks)}; machine busy {machine.get('busy')}, late host iterations "
            f"{hosts.get('host_late_iterations')}/{hosts.get('host_iterations')}, samples "
            f"{summary['telemetry'].get('samples')} ({summary['telemetry'].get('lost_samples')} lost)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
