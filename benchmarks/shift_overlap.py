"""Did two jobs on a shared link take turns? The overlap of run folders' telemetry.csv.

Run after `benchmarks/bench_shift_cases.py --out DIR`:
`.venv/bin/python benchmarks/shift_overlap.py DIR/case-a DIR/case-b --link tor1->agg1`.

Per folder: the link's busy 10 ms samples (a job above a quarter of its
capacity), those in which two or more jobs were (`emulation.jobs.
telemetry_rows.overlap`, the figure summary.json gives per scheduler), and
the per-job bytes on the link (to show the jobs were both there).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from emulation.emulate.runner import link_rates
from emulation.jobs.telemetry_rows import TELEMETRY_FILE, overlap, read_telemetry
from topologies.library import load_topology


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="run folders (write_run's)")
    parser.add_argument("--link", default="tor1->agg1", help="the shared link")
    parser.add_argument("--topology", default="cassini-testbed")
    args = parser.parse_args()
    topo = load_topology(args.topology)
    print("| run | samples | busy samples | overlapped | overlap | bytes per job (MB) |")
    print("|---|---|---|---|---|---|")
    for folder in args.folders:
        summary = json.loads((folder / "summary.json").read_text())
        rates = link_rates(topo, summary["emulation_profile"]["scale"])
        info = summary.get("telemetry", {})
        rows = read_telemetry(folder / TELEMETRY_FILE)
        found = overlap(rows, {args.link: rates[args.link]}, info.get("interval_s") or 0.01)
        link = found[args.link]
        per_job: dict[str, int] = {}
        for r in rows:
            if r.link == args.link:
                per_job[r.job] = per_job.get(r.job, 0) + r.bytes
        jobs = ", ".join(f"{j} {b / 1e6:.2f}" for j, b in sorted(per_job.items()))
        fraction = "-" if link.fraction is None else f"{link.fraction:.0%}"
        print(
            f"| {folder.name} | {info.get('samples')} | {link.busy_samples} | "
            f"{link.overlapped_samples} | {fraction} | {jobs} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
