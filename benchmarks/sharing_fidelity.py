"""How close is the fluid simulator to an emulated run, per job, with and without the sharing model?

For each `cassini emulate` results folder given, the run's plan is made again
(`emulate.runner.make_plan`: same trace, schedulers, seed and iterations;
no fabric) with the profiles and the sharing model named here, and each
job's emulated mean iteration time is set against the simulator's. The
placement and shifts at t = 0 do not depend on the sharing model, so the
emulated run is the one the simulator predicts; with other profiles than
the run planned with, Cassini's shifts may differ (the script says so).

    .venv/bin/python benchmarks/sharing_fidelity.py RUN_DIR... [--sharing FILE] [--profiles FILE]
"""

from __future__ import annotations

import argparse
import json
from dataclasses import fields
from pathlib import Path
from typing import Any


def settings_of(summary: dict[str, Any], profiles: str | None, sharing: str | None) -> Any:
    """The run's EmulateSettings as its summary.json recorded them, with our profiles/sharing."""
    from emulation.emulate.runner import EmulateSettings

    recorded = dict(summary["settings"])
    recorded["trace"] = recorded.get("trace_spec", recorded["trace"])
    names = {f.name for f in fields(EmulateSettings)}
    kept = {k: v for k, v in recorded.items() if k in names and k not in ("jobs",)}
    # summary.json lists the trace's jobs; the setting is how many a generated trace has
    kept["jobs"] = len(recorded.get("jobs") or []) or EmulateSettings.jobs
    kept["schedulers"] = tuple(kept["schedulers"])
    kept["profiles"] = profiles
    kept["sharing"] = sharing
    return EmulateSettings(**kept)


def compare(run: Path, profiles: str | None, sharing: str | None) -> list[dict[str, Any]]:
    """Per scheduler and job: emulated mean, the recorded and the recomputed simulated mean."""
    from emulation.emulate.runner import make_plan
    from topologies.library import load_topology

    summary = json.loads((run / "summary.json").read_text())
    settings = settings_of(summary, profiles, sharing)
    plan = make_plan(settings, load_topology(settings.topology))
    rows = []
    for name, sched in summary["schedulers"].items():
        sim = plan.of(name).sim_job_mean_ms
        for job, rec in sched["jobs"].items():
            emu = rec["mean_iteration_ms"]
            if emu is None:  # the job failed in the emulation (its error is in the report)
                continue
            rows.append(
                {
                    "scheduler": name,
                    "job": job,
                    "emulated_ms": round(emu, 1),
                    "recorded_sim_ms": round(rec["sim_mean_iteration_ms"], 1),
                    "sim_ms": round(sim[job], 1),
                    "emulated_over_sim": round(emu / sim[job], 3),
                }
            )
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", type=Path, help="cassini emulate results folders")
    p.add_argument("--profiles", help="measured profiles (cassini profile --out)")
    p.add_argument("--sharing", help="sharing model (cassini profile --sharing-out)")
    args = p.parse_args()
    for run in args.runs:
        rows = compare(run, args.profiles, args.sharing)
        off = max(abs(r["emulated_over_sim"] - 1) for r in rows)
        print(f"{run}: profiles {args.profiles or 'derived'}, sharing {args.sharing or 'ideal'}")
        for r in rows:
            print(
                f"  {r['scheduler']:11s} {r['job']:18s} emulated {r['emulated_ms']:7.1f}  "
                f"simulated {r['sim_ms']:7.1f} (recorded {r['recorded_sim_ms']:7.1f})  "
                f"{r['emulated_over_sim']:.3f}x"
            )
        for name in dict.fromkeys(r["scheduler"] for r in rows):
            errs = [abs(r["emulated_over_sim"] - 1) for r in rows if r["scheduler"] == name]
            print(f"  {name}: worst {max(errs):.1%}, mean {sum(errs) / len(errs):.1%} off")
        print(f"  worst: {off:.1%} off")


if __name__ == "__main__":
    main()
