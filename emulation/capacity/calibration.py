"""What does the emulation cost on this machine? A short measurement, cached per machine.

One software switch and a small ring of replicas (`CALIBRATION_TOPOLOGY`,
one `CALIBRATION_MODEL` job on every server, half of its flows crossing
the spine) run a few iterations at each of `CALIBRATION_SCALES`; each run's
CPU is read as every run reads it (`emulation.jobs.supervisor`: the
switch's process tree from /proc, the replicas' rusage, the machine's
/proc/stat), its traffic from the replicas' records, and the witnesses'
lateness (late frames and late loop wake-ups, over gNMI /fidelity) is kept
beside it. A least-squares line through the points gives the constants of
`emulation.capacity.model.CostConstants` (intercepts clipped at zero: a negative
idle cost is noise; a slope at zero: the switch's loop polls, and a flat
line is its appetite, not its cost, which `emulation.capacity.model` then bounds
by the points' lateness instead).

The constants are cached in the user's cache folder (`$XDG_CACHE_HOME/cassini`,
else `~/.cache/cassini`), one file per machine identity (CPU model, cores,
kernel, the harness's version), so a new kernel or release measures again;
`--recalibrate` measures again on demand. The file is written whole through
a fresh exclusive temporary beside it, and read only if it is a regular file
of this user's, opened without following a link (a planted link or file is
refused, naming it); a value that is missing, not finite, negative or absurd
refuses the file, naming the field.

A calibration is only as good as the quiet it was taken in: the switch and
the replicas compete with whatever else runs. The machine's other work
(`background_cores`, sampled for `BACKGROUND_S`) is measured before the
calibration and before each of its runs, and a calibration with more than
`MAX_BACKGROUND_FRACTION` of the machine's cores busy is refused, saying
the figure, and never cached; a cache whose points record such a figure
is refused the same way. Each calibration records when it was taken, and
every command that uses one says which file and when
(`calibration_line`). `CASSINI_BACKGROUND_CORES`, when set, is the other
work's figure instead of a measurement (tests set it; so may a user who
knows the machine's load better than a one-second sample).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import math
import os
import platform
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from emulation.capacity.model import (
    HEADROOM,
    MAX_CORES,
    CostConstants,
    Load,
    ScaleChoice,
    largest_scale,
    load_of,
)
from topologies.datafile import parse_data, read_private_file
from topologies.errors import UserInputError
from topologies.outputs import write_file

CALIBRATION_TOPOLOGY = "leaf-spine:2:1:2"  # 4 servers, 2 leaves: passes of 1 and 3 switches
CALIBRATION_MODEL = "vgg19"  # the four-jobs trace's heaviest talker
# (our choice) Three scales an octave apart around the default 0.001, low
# enough that a busy 2-core machine still carries the top one.
CALIBRATION_SCALES: tuple[float, ...] = (0.0005, 0.001, 0.002)
CALIBRATION_ITERATIONS = 12  # about 3 s of a VGG19 ring per scale
CACHE_ENV = "XDG_CACHE_HOME"
BACKGROUND_S = 1.0  # the machine's other work is sampled this long before each run
BACKGROUND_ENV = "CASSINI_BACKGROUND_CORES"  # the other work's figure, instead of a sample
# (our choice) A calibration is refused when other work keeps more than a tenth of
# the machine's cores busy (0.2 of a core on 2 cores; an idle machine measured 0.02):
# a compile on both cores had the calibration price the switch at what was left.
MAX_BACKGROUND_FRACTION = 0.1
# (our choice) A cache file holds a few points; a megabyte is far above any.
MAX_CACHE_BYTES = 1 << 20
RECALIBRATE = "`sudo cassini capacity --recalibrate` measures again"


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
    """The cached constants, or None when there are none. A cache that is a link,
    another user's, unreadable, malformed, holds a value out of range or was taken
    under load (`check_quiet`) is refused in one line naming it and the field."""
    where = f"calibration cache {path}"
    try:
        text = read_private_file(path, "calibration cache", MAX_CACHE_BYTES)
        if text is None:
            return None
        constants = CostConstants.from_dict(parse_data(text, "json", where), where)
        for point in constants.points:
            if point.get("background_cores") is not None:
                check_quiet(
                    float(point["background_cores"]), constants.cores,
                    f"at S = {point.get('scale', '?')}",
                )  # fmt: skip
    except UserInputError as err:
        text = str(err)
        if text.startswith(str(path)):  # the reader's own line, which names the file
            text = f"calibration cache {text}"
        elif not text.startswith(where):
            text = f"{where}: {text}"
        raise UserInputError(f"{text}; {RECALIBRATE}") from None
    return constants


def save(constants: CostConstants, path: Path) -> None:
    """Write the cache whole, through a fresh temporary in its folder (`write_file`:
    created exclusively, so a planted link is never written through, then renamed)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_file(path, json.dumps(constants.as_dict(), indent=1) + "\n", "calibration cache")


def check_quiet(background: float, cores: int, when: str) -> None:
    """Refuse a calibration taken while other work kept more than
    `MAX_BACKGROUND_FRACTION` of the machine's `cores` busy.

    >>> check_quiet(0.02, 2, "before calibrating")
    >>> check_quiet(1.93, 2, "at S = 0.001")
    Traceback (most recent call last):
    ...
    topologies.errors.UserInputError: taken under load: other work kept 1.93 of 2 cores busy at S = 0.001, more than the 0.20 a calibration allows (a tenth of the cores, our choice); calibrate on a quieter machine
    """
    limit = MAX_BACKGROUND_FRACTION * cores
    if background > limit:
        raise UserInputError(
            f"taken under load: other work kept {background:.2f} of {cores} cores busy {when}, "
            f"more than the {limit:.2f} a calibration allows (a tenth of the cores, our "
            "choice); calibrate on a quieter machine"
        )


def calibration_line(constants: CostConstants, path: Path, fresh: bool) -> str:
    """Which calibration a choice used and when it was taken, for the terminal.

    >>> c = CostConstants(0.1, 0.02, 0.0, 0.0, 0.0, cores=2, taken_at="2025-01-02T03:04:05Z",
    ...                   points=({"background_cores": 0.02}, {"background_cores": 0.05}))
    >>> calibration_line(c, Path("/c/calibration-1.json"), fresh=False)
    'calibration: /c/calibration-1.json, taken 2025-01-02T03:04:05Z with other work at most 0.05 of 2 cores'
    """
    taken = constants.taken_at or "at a time it does not record"
    when = "measured just now" if fresh else f"taken {taken}"
    others = [float(p["background_cores"]) for p in constants.points
              if p.get("background_cores") is not None]  # fmt: skip
    load = (
        f"other work at most {max(others):.2f} of {constants.cores} cores"
        if others
        else "other work not recorded"
    )
    return f"calibration: {path}, {when} with {load}"


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


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


def background_cores(
    seconds: float = BACKGROUND_S, environ: Mapping[str, str] | None = None
) -> float:
    """Cores the machine is busy with over `seconds`, before anything of ours runs: what
    other users' work takes from the machine's fidelity limit. `CASSINI_BACKGROUND_CORES`
    in `environ`, when set, is the figure instead (tests inject the load this way)."""
    env = os.environ if environ is None else environ
    given = env.get(BACKGROUND_ENV)
    if given is not None:
        try:
            value = float(given)
        except ValueError:
            value = math.nan
        if not 0 <= value <= MAX_CORES:  # NaN fails too
            raise UserInputError(
                f"{BACKGROUND_ENV}: expected the cores other work keeps busy, a number in "
                f"[0, {MAX_CORES}], got {given[:40]!r}"
            )
        return value
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
    from emulation.fabric.emulated import EmulatedFabric
    from emulation.fabric.options import FabricOptions
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
    background: Callable[[], float] = background_cores,
    cores: int | None = None,
    clock: Callable[[], float] = time.time,
) -> CostConstants:
    """Measure every scale and fit the cost model; refused (`check_quiet`) when the
    machine is busy before it starts or before any run. `measure`, `background`,
    `cores` (default: the machine's) and `clock` are seams for tests."""
    check_quiet(background(), cores or os.cpu_count() or 1, "before calibrating")
    points = []
    for scale in scales:
        if say is not None:
            say(f"calibrating: S = {scale:g} ({CALIBRATION_TOPOLOGY}, {CALIBRATION_MODEL} ring)")
        point = measure(scale, iterations)
        found = int(point.get("cores") or cores or os.cpu_count() or 1)
        check_quiet(float(point.get("background_cores") or 0.0), found, f"at S = {scale:g}")
        points.append(point)
    found_cores = int(points[0]["cores"]) if points else (cores or os.cpu_count() or 1)
    constants = constants_from_points(points, found_cores, machine_identity())
    return replace(constants, taken_at=_utc(clock()))


def cached_or_calibrate(
    recalibrate: bool = False,
    say: Callable[[str], None] | None = None,
    background: Callable[[], float] = background_cores,
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
    try:
        constants = calibrate(say=say, background=background)
    except UserInputError as err:
        raise UserInputError(f"calibration refused, nothing cached: {err}") from None
    save(constants, path)
    return constants, True


def choose_scale(
    load: Load,
    recalibrate: bool = False,
    say: Callable[[str], None] | None = None,
    headroom: float = HEADROOM,
    background: Callable[[], float] = background_cores,
) -> tuple[ScaleChoice, dict[str, Any]]:
    """The largest S for `load` on this machine, and the record a report keeps of why.

    The machine's other work (`background`: sampled for `BACKGROUND_S`) counts against its CPU
    limit; when it leaves no S at all, the choice is the quiet machine's, and the
    reason says the machine-CPU witness may condemn the run whatever S it runs at
    (our choice: a busy machine is the user's to see, not a reason to refuse).
    """
    constants, fresh = cached_or_calibrate(recalibrate, say, background)
    if say is not None:
        say(calibration_line(constants, cache_path(machine_identity()), fresh))
    others = background()
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
        "taken_at": constants.taken_at,
    }
    return choice, record
