"""The emulator's capacity curve: the largest S per topology, predicted and checked.

For the default testbed and 32-, 64- and 128-server leaf-spines, with every
server running one replica (`emulation.capacity.model.fill_jobs`: the four-jobs
trace's models in turn, six workers each), the largest S the cost model
predicts from this machine's calibration (`cassini capacity`), on a quiet
machine and with the machine's other work as measured now. Then, for the
topologies named by `--check`, a real short `cassini emulate` (one
scheduler, Themis, a trace that fills every server) at the predicted S,
with its fidelity verdict, the switch's CPU and lateness and the replicas'
CPU. Every measurement records the 1-minute load average beside it.

    sudo .venv/bin/python benchmarks/bench_capacity.py [--recalibrate] \\
        [--check cassini-testbed,leaf-spine:4:2:8] [--iterations 15] \\
        [--out benchmarks/capacity]

Writes OUT/capacity.json and OUT/capacity.png; prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from emulation.capacity.calibration import background_cores, cached_or_calibrate  # noqa: E402
from emulation.capacity.model import CostConstants, fill_jobs, largest_scale, load_of  # noqa: E402
from scheduler.workloads.traces import TraceJob, write_trace  # noqa: E402
from topologies.library import load_topology  # noqa: E402

TOPOLOGIES = ("cassini-testbed", "leaf-spine:4:2:8", "leaf-spine:8:4:8", "leaf-spine:8:4:16")


def _load_average() -> float:
    return round(os.getloadavg()[0], 2)


def predict_all(constants: Any, others: float) -> list[dict[str, Any]]:
    rows = []
    for name in TOPOLOGIES:
        topo = load_topology(name)
        load = load_of(topo, fill_jobs(topo))
        quiet = largest_scale(constants, load)
        now = largest_scale(constants, load, background_cores=others)
        rows.append(
            {
                "topology": name,
                "servers": len(topo.servers),
                "quiet": quiet.as_dict(),
                "now": now.as_dict(),
            }
        )
    return rows


def check_run(name: str, scale: float, iterations: int, folder: Path) -> dict[str, Any]:
    """One short emulate at `scale`, every server a replica; its witnesses."""
    from emulation.emulate.runner import EmulateSettings, emulate
    from topologies.errors import UserInputError

    topo = load_topology(name)
    jobs = [
        TraceJob(f"j{i}", p.model, len(servers), 1000)
        for i, (servers, p) in enumerate(fill_jobs(topo))
    ]
    trace = write_trace(jobs, folder / f"trace-{name.replace(':', '_')}.csv")
    settings = EmulateSettings(topology=name, trace=str(trace), schedulers=("themis",),
                               iterations=iterations, scale=scale)  # fmt: skip
    load_before = _load_average()
    began = time.monotonic()
    try:
        report, _ = emulate(settings, folder / name.replace(":", "_"))
    except UserInputError as err:  # e.g. the fabric does not fit the target
        return {"topology": name, "scale": scale, "refused": str(err), "load_average": load_before}
    s = report.summary["schedulers"]["themis"]
    fid = s.get("fidelity", {})
    return {
        "topology": name,
        "scale": scale,
        "wall_s": round(time.monotonic() - began, 1),
        "trustworthy": s["trustworthy"],
        "reasons": fid.get("reasons", []),
        "fidelity": fid,
        "load_average_before": load_before,
        "load_average_after": _load_average(),
    }


def plot(doc: dict[str, Any], path: Path) -> None:
    """Left: the largest S per topology. Right: the CPU predicted at S = 0.001 (the
    default) against the limits the choice keeps under, and what the checked runs took."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from emulation.capacity.model import CostConstants, Load, predict
    from emulation.fabric.scaling import DEFAULT_SCALE

    rows, checks = doc["predicted"], doc["checked"]
    constants = CostConstants.from_dict(doc["constants"])
    servers = [r["servers"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.0))
    floor = 1e-5
    for key, label, style in (("quiet", "predicted, quiet machine", "o-"),
                              ("now", "predicted, others' load as measured", "s--")):  # fmt: skip
        pts = [(r["servers"], r[key]["scale"]) for r in rows if r[key]["scale"]]
        if pts:
            left.plot(*zip(*pts, strict=True), style, label=label)
    for r in rows:
        if not r["quiet"]["scale"]:
            left.text(r["servers"], floor * 1.3, "no S fits", rotation=90, ha="center", va="bottom")
    for c in checks:
        if "trustworthy" in c:
            n = next(r["servers"] for r in rows if r["topology"] == c["topology"])
            mark = {True: "g^", False: "rv", None: "kx"}[c["trustworthy"]]
            left.plot([n], [c["scale"]], mark, markersize=10)
    left.plot([], [], "g^", label="checked run: trustworthy")
    left.plot([], [], "rv", label="checked run: not trustworthy")
    left.axhline(DEFAULT_SCALE, color="grey", lw=0.8, ls=":")
    left.set_ylim(floor, 1e-2)
    left.set_yscale("log")
    left.set_ylabel("largest scale S")
    left.legend(fontsize=7, loc="upper right")
    # right: CPU at each topology's chosen S (at S -> 0, no traffic, where none fits)
    at = [(r["quiet"]["scale"] or 0.0) for r in rows]
    preds = [predict(constants, Load(**r["quiet"]["load_at_scale_1"]).at(a))
             for r, a in zip(rows, at, strict=True)]  # fmt: skip
    right.plot(servers, [p.switch_cores for p in preds], "o-", label="switch, predicted")
    right.plot(
        servers, [p.machine_cores for p in preds], "s-", label="ours on the machine, predicted"
    )
    caps = rows[0]["quiet"]["limits"]
    right.axhline(caps["switch_cpu_cores"], color="C0", ls=":", label="switch limit x headroom")
    right.axhline(caps["machine_cpu_cores"], color="C1", ls=":", label="machine limit x headroom")
    for c in checks:
        fid = c.get("fidelity", {}).get("extra", {})
        if "switch_cpu_cores" in fid:
            n = next(r["servers"] for r in rows if r["topology"] == c["topology"])
            right.plot([n], [fid["switch_cpu_cores"]], "C0x", markersize=9)
            right.plot([n], [fid["switch_cpu_cores"] + fid["replicas_cpu_cores"]], "C1x",
                       markersize=9)  # fmt: skip
    right.plot([], [], "kx", label="checked run, measured (switch; switch + replicas)")
    for n, a in zip(servers, at, strict=True):
        if not a:
            right.annotate("S -> 0", (n, preds[servers.index(n)].machine_cores), fontsize=7,
                           textcoords="offset points", xytext=(-30, 4))  # fmt: skip
    right.set_ylabel("cores at the chosen S")
    right.set_yscale("linear")
    right.legend(fontsize=7)
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xlim(servers[0] / 1.2, servers[-1] * 1.2)
        ax.set_xticks(servers, [str(n) for n in servers])
        ax.set_xlabel("servers (every one running a replica)")
    loads = [c[k] for c in checks for k in ("load_average_before", "load_average_after") if k in c]
    busy = f"load average {min(loads)}-{max(loads)} in the runs" if loads else "busy"
    fig.suptitle(f"Emulator capacity, measured on a shared 2-core machine ({busy})")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--recalibrate", action="store_true")
    parser.add_argument("--check", default="cassini-testbed,leaf-spine:4:2:8")
    parser.add_argument("--iterations", type=int, default=15)
    parser.add_argument("--out", default="benchmarks/capacity")
    parser.add_argument("--replot", action="store_true", help="redraw OUT/capacity.png only")
    parser.add_argument(
        "--constants", metavar="JSON", help="predict from the constants in this capacity.json"
    )
    parser.add_argument("--name", default="capacity", help="OUT/NAME.json and OUT/NAME.png")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.replot:
        plot(json.loads((out / f"{args.name}.json").read_text()), out / f"{args.name}.png")
        return
    if args.constants:
        raw = json.loads(Path(args.constants).read_text())["constants"]
        constants, fresh = CostConstants.from_dict(raw), False
    else:
        constants, fresh = cached_or_calibrate(args.recalibrate, print)
    others = background_cores()
    rows = predict_all(constants, others)
    checks = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in [n for n in args.check.split(",") if n]:
            row = next(r for r in rows if r["topology"] == name)
            scale = row["quiet"]["scale"]
            if scale is None:
                checks.append({"topology": name, "skipped": "no S fits"})
                continue
            checks.append(check_run(name, scale, args.iterations, Path(tmp)))
    doc = {
        "constants": constants.as_dict(),
        "calibrated_now": fresh,
        "others_busy_cores": others,
        "load_average": _load_average(),
        "predicted": rows,
        "checked": checks,
    }
    (out / f"{args.name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    plot(doc, out / f"{args.name}.png")
    print("| topology | servers | S (quiet) | switch / replicas / machine cores | bound | "
          "S (others now) |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for r in rows:
        q, n = r["quiet"], r["now"]
        cpu = q["predicted_cpu"]
        cpu_text = "-" if cpu is None else (
            f"{cpu['switch_cores']:.2f} / {cpu['replica_cores']:.2f} / {cpu['machine_cores']:.2f}"
        )  # fmt: skip
        print(f"| {r['topology']} | {r['servers']} | {q['scale'] or 'none'} | {cpu_text} | "
              f"{q['bound_by']} | {n['scale'] or 'none'} |")  # fmt: skip
    for c in checks:
        print(json.dumps(c))


if __name__ == "__main__":
    main()
