"""What does the emulation cost on this machine? A short measurement, cached per machine.

One software switch and a small ring of replicas (`CALIBRATION_TOPOLOGY`,
one `CALIBRATION_MODEL` job on every server, half of its flows crossing
the spine) run a few iterations at each of `CALIBRATION_SCALES`; each run's
CPU is read as every run reads it (`emulation.jobs.supervisor`: the
switch's process tree from /proc, the replicas' rusage, the machine's
/proc/stat), its traffic from the replicas' records, and the witnesses'
lateness (late frames and late loop wake-ups, over gNMI /fidelity) is kept
beside it. A least-squares line through the points gives the constants of
`emulation.capacity.CostConstants` (intercepts clipped at zero: a negative
idle cost is noise; a slope at zero: the switch's loop polls, and a flat
line is its appetite, not its cost, which `emulation.capacity` then bounds
by the points' lateness instead).

The constants are cached in the user's cache folder (`$XDG_CACHE_HOME/cassini`,
else `~/.cache/cassini`), one file per machine identity (CPU model, cores,
kernel, the harness's version), so a new kernel or release measures again;
`--recalibrate` measures again on demand.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from topologies.errors import UserInputError

from .capacity import HEADROOM, CostConstants, Load, ScaleChoice, largest_scale, load_of

CALIBRATION_TOPOLOGY = "leaf-spine:2:1:2"  # 4 servers, 2 leaves: passes of 1 and 3 switches
CALIBRATION_MODEL = "vgg19"  # the four-jobs trace's heaviest talker
# (our choice) Three scales an octave apart around the default 0.001, low
# enough that a busy 2-core machine still carries the top one.
CALIBRATION_SCALES: tuple[float, ...] = (0.0005, 0.001, 0.002)
CALIBRATION_ITERATIONS = 12  # about 3 s of a VGG19 ring per scale
CACHE_ENV = "XDG_CACHE_HOME"
BACKGROUND_S = 1.0  # the machine's other work is sampled this long before each run


def machine_identity() -> dict[str, str]:
    """What the constants depend on: CPU model, cores, kernel, the harness's version."""
    model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        version = importlib.metadata.version("cassini-harness")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return {
        "cpu_model": model,
        "cores": str(os.cpu_count() or 1),
        "kernel": platform.release(),
        "harness": version,
    }


def cache_path(identity: Mapping[str, str], environ: Mapping[str, str] | None = None) -> Path:
    """This machine's calibration file in the user's cache folder."""
    env = os.environ if environ is None else environ
    root = Path(env.get(CACHE_ENV) or Path.home() / ".cache") / "cassini"
    key = hashlib.sha256(json.dumps(dict(identity), sort_keys=True).encode()).hexdigest()[:16]
    return root / f"calibration-{key}.json"


def load_cached(path: Path) -> CostConstants | None:
    """The cached constants, or None when there are none (or the file is unreadable)."""
    try:
        return CostConstants.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save(constants: CostConstants, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(constants.as_dict(), indent=1) + "\n")
    tmp.replace(path)


def _line(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Least-squares (intercept, slope), the intercept clipped at 0 and the slope at >= 0.

    >>> _line([1.0, 2.0, 3.0], [1.5, 2.5, 3.5])
    (0.5, 1.0)
    """
    if len(x) < 2 or max(x) == min(x):
        slope = (sum(y) / sum(x)) if sum(x) else 0.0
        return 0.0, max(0.0, slope)
    slope, intercept = np.polyfit(np.asarray(x, float), np.asarray(y, float), 1)
    if intercept < 0:  # through the origin instead
        xs, ys = np.asarray(x, float), np.asarray(y, float)
        return 0.0, max(0.0, float(xs @ ys / (xs @ xs)))
    return round(float(intercept), 6), round(max(0.0, float(slope)), 6)


def constants_from_points(
    points: Sequence[Mapping[str, Any]], cores: int, machine: Mapping[str, str]
) -> CostConstants:
    """Fit the cost model to calibration points (each: passes_per_s, gbps, replicas,
    switch_cores, replica_cores, machine_cores, background_cores: the machine's other
    work, measured before the run and left out of the harness's cost)."""
    switch_base, switch_slope = _line(
        [p["passes_per_s"] / 1e3 for p in points], [p["switch_cores"] for p in points]
    )
    replica_base, replica_slope = _line(
        [p["gbps"] for p in points], [p["replica_cores"] for p in points]
    )
    replicas = max(1, int(points[0]["replicas"])) if points else 1
    rest = [
        p["machine_cores"] - p.get("background_cores", 0.0) - p["switch_cores"] - p["replica_cores"]
        for p in points
    ]
    return CostConstants(
        switch_base_cores=switch_base,
        switch_cores_per_kpps=switch_slope,
        replica_base_cores=round(replica_base / replicas, 6),
        replica_cores_per_gbps=replica_slope,
        harness_cores=round(max(0.0, float(np.median(rest))) if rest else 0.0, 6),
        cores=cores,
        machine=dict(machine),
        points=tuple(dict(p) for p in points),
    )


def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def background_cores(seconds: float = BACKGROUND_S) -> float:
    """Cores the machine is busy with over `seconds`, before anything of ours runs: what
    other users' work takes from the machine's fidelity limit."""
    import time

    from emulation.jobs.cpu_usage import machine_cpu, machine_fractions

    before = machine_cpu()
    time.sleep(seconds)
    after = machine_cpu()
    return round(machine_fractions(before, after)["busy"] * after.cores, 4)


def _read_lateness(grpc_address: str | None) -> dict[str, dict[str, int]]:
    """The switch's lateness histograms over gNMI, as the runner reads them (its own copy:
    the runner calls this module, so this module does not call the runner)."""
    from controlplane.gnmi import GnmiError, GnmiReader

    if grpc_address is None:
        return {}
    try:
        with GnmiReader(grpc_address, timeout=10.0) as reader:
            return reader.read_fidelity()
    except GnmiError:
        return {}


def measure_point(scale: float, iterations: int = CALIBRATION_ITERATIONS) -> dict[str, Any]:
    """One calibration run at `scale` (root: builds a fabric, torn down on exit)."""
    from emulation.emulate.fidelity import switch_lateness
    from emulation.fabric import EmulatedFabric
    from emulation.fabric_options import FabricOptions
    from emulation.jobs.launch import parse_schedule, plan_jobs
    from emulation.jobs.run_settings import RunSettings
    from emulation.jobs.supervisor import run_schedule
    from topologies.library import load_topology

    topo = load_topology(CALIBRATION_TOPOLOGY)
    servers = [s.name for s in topo.servers]
    doc = {"placement": {"calib": servers}, "models": {"calib": CALIBRATION_MODEL}}
    jobs = plan_jobs(parse_schedule(doc, "calibration"), topo, where="calibration")
    per_gbps = load_of(topo, [(j.servers, j.profile) for j in jobs])
    load_before = _load_average()
    background = background_cores()
    with (
        tempfile.TemporaryDirectory() as out,
        EmulatedFabric(topo, FabricOptions(scale=scale)) as fabric,
    ):
        before = _read_lateness(fabric.grpc_address)
        result = run_schedule(fabric, jobs, RunSettings(iterations=iterations, gnmi=False), out)
        lateness = switch_lateness(before, _read_lateness(fabric.grpc_address))
    if result.error is not None:
        raise RuntimeError(f"calibration run at S = {scale:g} failed: {result.error}")
    fid = result.fidelity
    gbps = float(fid["emulated_gbps"])
    machine = fid["machine_cpu"]
    cores = int(machine.get("cores", os.cpu_count() or 1))
    busy = float(machine.get("busy", 0.0))
    frames, late = lateness.get("frames"), lateness.get("late_frames")
    wakeups, late_wakeups = lateness.get("loop_wakeups"), lateness.get("late_wakeups")
    return {
        "scale": scale,
        "gbps": gbps,
        "passes_per_s": per_gbps.passes_per_s / per_gbps.gbps * gbps if per_gbps.gbps else 0.0,
        "replicas": per_gbps.replicas,
        "switch_cores": float(fid["switch_cpu_cores"] or 0.0),
        "replica_cores": float(fid["replicas_cpu_cores"]),
        "machine_cores": busy * cores,
        "background_cores": background,
        "cores": cores,
        "late_frame_fraction": (late / frames) if frames else None,
        "late_loop_fraction": (late_wakeups / wakeups) if wakeups else None,
        "frame_late_p99_ms": lateness.get("frame_late_p99_ms"),
        "host_late_p99_ms": fid.get("hosts", {}).get("host_late_p99_ms"),
        "load_average": load_before,
    }


def calibrate(
    scales: Sequence[float] = CALIBRATION_SCALES,
    iterations: int = CALIBRATION_ITERATIONS,
    say: Callable[[str], None] | None = None,
    measure: Callable[[float, int], dict[str, Any]] = measure_point,
) -> CostConstants:
    """Measure every scale and fit the cost model (`measure` is a seam for tests)."""
    points = []
    for scale in scales:
        if say is not None:
            say(f"calibrating: S = {scale:g} ({CALIBRATION_TOPOLOGY}, {CALIBRATION_MODEL} ring)")
        points.append(measure(scale, iterations))
    cores = int(points[0]["cores"]) if points else (os.cpu_count() or 1)
    return constants_from_points(points, cores, machine_identity())


def cached_or_calibrate(
    recalibrate: bool = False, say: Callable[[str], None] | None = None
) -> tuple[CostConstants, bool]:
    """This machine's constants and whether they were measured just now."""
    path = cache_path(machine_identity())
    found = None if recalibrate else load_cached(path)
    if found is not None:
        return found, False
    if os.geteuid() != 0:
        raise UserInputError(
            "no emulation cost cached for this machine: calibrating builds a fabric, run "
            "`sudo cassini capacity --recalibrate` once"
        )
    if say is not None:
        why = "--recalibrate" if recalibrate else "no calibration cached for this machine"
        say(f"{why}: measuring the emulator's cost (a few seconds per scale)")
    constants = calibrate(say=say)
    save(constants, path)
    return constants, True


def choose_scale(
    load: Load,
    recalibrate: bool = False,
    say: Callable[[str], None] | None = None,
    headroom: float = HEADROOM,
) -> tuple[ScaleChoice, dict[str, Any]]:
    """The largest S for `load` on this machine, and the record a report keeps of why.

    The machine's other work (sampled for `BACKGROUND_S`) counts against its CPU
    limit; when it leaves no S at all, the choice is the quiet machine's, and the
    reason says the machine-CPU witness may condemn the run whatever S it runs at
    (our choice: a busy machine is the user's to see, not a reason to refuse).
    """
    constants, fresh = cached_or_calibrate(recalibrate, say)
    others = background_cores()
    choice = largest_scale(constants, load, headroom, background_cores=others)
    if choice.scale is None:
        quiet = largest_scale(constants, load, headroom)
        note = (
            f"; the machine is already {others:.2f} of {constants.cores} cores busy with "
            "other work: its CPU witness may fail at any S"
            + (", chosen as on a quiet machine" if quiet.scale is not None else "")
        )
        choice = replace(quiet, reason=quiet.reason + note)
    record = choice.as_dict() | {
        "constants": constants.as_dict(),
        "calibrated_now": fresh,
        "others_busy_cores": others,
        "cache": str(cache_path(machine_identity())),
    }
    return choice, record
