"""What is the largest scale S this machine emulates a topology and its jobs at, trustworthily?

A cost model of the emulation, linear in the emulated traffic (our choice;
the benchmarks' figures are per Gbit/s and per packet/s at every S they
were measured at):

- the software switch: `switch_base_cores` + `switch_cores_per_kpps` per
  thousand frame passes a second. A pass is one frame through the pipeline
  of one logical switch, so a frame that crosses leaf, spine and leaf costs
  three; passes = S x (each flow's mean Gbit/s x the switches on its path)
  / (8 x `MTU_FRAME_BYTES`). The acknowledgements and pause frames a data
  frame causes are folded into its cost by the calibration, which fits the
  switch's CPU against the data frames the replicas sent.
- the replicas: `replica_base_cores` per replica (its agent's wake-ups,
  whatever it sends) + `replica_cores_per_gbps` per emulated Gbit/s sent.
- the rest of the run (the switch's gRPC service, the counter poller, the
  supervisor): `harness_cores`, measured as the machine's busy cores the
  switch and the replicas do not account for.

A job's traffic is its profile's mean over an iteration (each worker sends
`sum(duration x gbps) / iteration_ms` to each ring neighbour, split as
`scheduler.workloads.traffic.nic_shares` splits it), routed by `topologies.routing`
as the switch routes it. Every rate scales with S, so each cost is
`base + slope x S` and the largest S is the smallest of three constraints
solved for S, each kept under `HEADROOM` of its limit: the fidelity
monitor's own (`emulation.emulate.fidelity.FidelityLimits`) for the
switch's mean share of one core and the machine's busy fraction of all
cores (less the machine's other work, when the caller measured it), and a
whole core (`BURST_CORES`) for the switch while every job is in its busiest
phase at once, each link capped at its capacity (the frame-lateness
witness fails on bursts the mean hides). The replicas have no limit of
their own in the monitor; they count in the machine's. The model predicts
CPU, not lateness: the host witnesses (replicas woken late) depend on the
machine's other work too, which only the machine's limit reflects.

The switch's CPU is a cost only when the calibration saw it grow with the
work (a positive slope). Its packet loop polls, and on a machine with idle
cycles it takes what is free: one calibration measured it flat at 0.62-0.66
of a core from 6,700 to 21,800 passes/s, and a flat line's intercept
charged as a fixed cost refused every fabric. So (our choice) the switch's
own lateness at the calibration points is a ceiling too
(`lateness_ceiling`): the passes/s of the largest calibrated point whose
frame and loop lateness stayed within the monitor's limits, below the first
point that did not; when every point stayed within them and the slope is
not positive, one calibration step (`EXTRAPOLATION_STEP`) past the top
point, no further, since nothing measured says more. With a flat or
negative slope the switch's CPU bounds nothing and is left out of the
machine's fixed cost (what a poll takes is what others leave; whether the
loop kept up is what its lateness says); with a positive slope the CPU
bounds stay as they were and lateness only caps S below a measured failure.

>>> c = CostConstants(switch_base_cores=0.1, switch_cores_per_kpps=0.02,
...                   replica_base_cores=0.01, replica_cores_per_gbps=2.0,
...                   harness_cores=0.1, cores=2)
>>> load = Load(passes_per_s=4e6, gbps=20.0, replicas=4)   # at S = 1
>>> choice = largest_scale(c, load, headroom=1.0)
>>> round(choice.scale, 6), choice.bound_by
(0.01, 'switch CPU')
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from emulation.emulate.fidelity import FidelityLimits
from emulation.fabric.scaling import MTU_FRAME_BYTES
from scheduler.simulator.decisions import Decision
from scheduler.workloads.profiles import ModelSpec, build_profile
from scheduler.workloads.traces import FOUR_JOBS
from scheduler.workloads.traffic import JobRouter, nic_shares
from scheduler.workloads.types import Profile
from topologies.errors import UserInputError
from topologies.model import Topology
from topologies.names import shown

# (our choice) Predicted CPU stays under 80% of each fidelity limit: the
# calibration's own spread on a shared machine was of that order, and a
# burst (jobs' Up phases in step) is above the mean the model predicts.
HEADROOM = 0.8
# (our choice) S is rounded down to two significant digits, so a report's S
# reads as a number someone would type.
SIGNIFICANT_DIGITS = 2
# (our choice) While every job is in its busiest phase at once (each link
# capped at its capacity), the switch may use a whole core, no more: the
# mean stays under the monitor's `switch_cpu`, but frames queued behind a
# burst the loop cannot carry leave late (a run at S = 0.013 chosen by the
# mean alone: switch at 0.37 of a core, 11% of frames more than 1 ms late).
BURST_CORES = 1.0
# (our choice) Below this S a 50 Gbit/s link is 50 kbit/s: a 1500-byte frame
# takes 0.24 s, longer than a whole iteration's Up phase at the paper's sizes.
MIN_SCALE = 1e-6
# (our choice) The calibration's scales are an octave apart: with lateness the only
# measure of the switch's work, S goes at most one such step past the top point.
EXTRAPOLATION_STEP = 2.0


Job = tuple[Sequence[str], Profile]  # a job's servers and its profile


@dataclass(frozen=True)
class CostConstants:
    """One machine's emulation costs, from `emulation.capacity.calibration`."""

    switch_base_cores: float
    switch_cores_per_kpps: float  # per 1000 data-frame passes a second
    replica_base_cores: float  # per replica
    replica_cores_per_gbps: float  # per emulated Gbit/s the replicas send
    harness_cores: float  # the rest of the run's processes
    cores: int  # the machine's
    machine: Mapping[str, str] = field(default_factory=dict)  # whose constants these are
    points: tuple[Mapping[str, Any], ...] = ()  # the calibration's measurements
    taken_at: str = ""  # when it was measured (UTC, ISO 8601); "" if not recorded

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["machine"] = dict(self.machine)
        out["points"] = [dict(p) for p in self.points]
        return out

    @staticmethod
    def from_dict(raw: Any, where: str = "calibration") -> CostConstants:
        """The constants of a cache file's object; a missing, non-finite, negative or
        absurd value is one line naming `where` and the field (a NaN constant chose
        S = 1 with "predicted switch nan")."""
        if not isinstance(raw, Mapping):
            raise UserInputError(f"{where}: expected a JSON object of cost constants")
        cores = _cache_number(raw, "cores", f"{where}: field 'cores'", 1, MAX_CORES)
        if cores != int(cores):
            raise UserInputError(f"{where}: field 'cores' must be a whole number, got {cores:g}")
        machine, points = raw.get("machine", {}), raw.get("points", [])
        if not isinstance(machine, Mapping) or not all(
            isinstance(v, str) for v in machine.values()
        ):
            raise UserInputError(f"{where}: field 'machine' must be an object of strings")
        if not isinstance(points, list) or len(points) > MAX_POINTS:
            raise UserInputError(
                f"{where}: field 'points' must be a list of at most {MAX_POINTS} points"
            )
        for i, point in enumerate(points):
            _check_point(point, where, i)
        taken_at = raw.get("taken_at", "")
        return CostConstants(
            **{
                name: _cache_number(raw, name, f"{where}: field '{name}'", 0.0, MAX_CORES)
                for name in _CORE_FIELDS
            },
            cores=int(cores),
            machine={str(k): v for k, v in machine.items()},
            points=tuple(dict(p) for p in points),
            taken_at=taken_at[:40] if isinstance(taken_at, str) else "",
        )


# (our choice) Bounds of a cache file's values: no machine has 100,000 cores, so no
# cost is more cores than that; a calibration is a handful of points, not 100.
MAX_CORES = 100_000
MAX_POINTS = 100
_CORE_FIELDS = (
    "switch_base_cores", "switch_cores_per_kpps", "replica_base_cores",
    "replica_cores_per_gbps", "harness_cores",
)  # fmt: skip
# a point's figures `largest_scale` reads: (field, lowest, highest, may be null)
_POINT_FIELDS = (
    ("passes_per_s", 0.0, 1e12, False),
    ("late_frame_fraction", 0.0, 1.0, True),
    ("late_loop_fraction", 0.0, 1.0, True),
    ("background_cores", 0.0, MAX_CORES, True),
    ("scale", 0.0, 1.0, True),
)


def _cache_number(raw: Mapping[str, Any], name: str, label: str, low: float, high: float) -> float:
    """`raw[name]` as a float if it is a number in [low, high]; else one line naming
    `label` (the file and the field's path)."""
    value = raw.get(name)
    if isinstance(value, int | float) and not isinstance(value, bool) and low <= value <= high:
        return float(value)  # NaN and inf fail the range
    got = "nothing" if name not in raw else shown(value)
    raise UserInputError(f"{label} must be a number in [{low:g}, {high:g}], got {got}")


def _check_point(point: Any, where: str, index: int) -> None:
    """One calibration point's figures `largest_scale` reads, bounded."""
    if not isinstance(point, Mapping):
        raise UserInputError(f"{where}: field 'points[{index}]' must be an object")
    for name, low, high, nullable in _POINT_FIELDS:
        if not (nullable and point.get(name) is None):
            _cache_number(point, name, f"{where}: field 'points[{index}].{name}'", low, high)


@dataclass(frozen=True)
class Load:
    """What the jobs ask of the emulator at S = 1 (multiply the rates by S)."""

    passes_per_s: float  # data frames x logical switches each crosses, per second
    gbps: float  # Gbit/s the replicas send, summed over flows
    replicas: int
    # every job in its busiest phase at once, each link capped at its capacity
    peak_passes_per_s: float = 0.0

    def at(self, scale: float) -> Load:
        return Load(
            self.passes_per_s * scale, self.gbps * scale, self.replicas,
            self.peak_passes_per_s * scale,
        )  # fmt: skip


@dataclass(frozen=True)
class Prediction:
    """Predicted CPU of one run (cores)."""

    switch_cores: float
    replica_cores: float
    machine_cores: float  # switch + replicas + harness

    def as_dict(self) -> dict[str, float]:
        return {k: round(v, 4) for k, v in asdict(self).items()}


@dataclass(frozen=True)
class ScaleChoice:
    """The largest S, the limit that bound it, and what is predicted at it."""

    scale: float | None  # None: not even MIN_SCALE fits
    bound_by: str  # "switch CPU", "switch bursts", "machine CPU", "switch lateness", "S <= 1"
    reason: str  # one line for the terminal and the report
    prediction: Prediction | None
    load_at_1: Load
    headroom: float
    limits: Mapping[str, float]

    def as_dict(self) -> dict[str, Any]:
        return {
            "scale": self.scale,
            "bound_by": self.bound_by,
            "reason": self.reason,
            "predicted_cpu": None if self.prediction is None else self.prediction.as_dict(),
            "load_at_scale_1": asdict(self.load_at_1),
            "headroom": self.headroom,
            "limits": dict(self.limits),
        }


def mean_gbps(profile: Profile) -> float:
    """A worker's demand averaged over one iteration (Gbit/s at S = 1).

    >>> from scheduler.workloads.types import Phase
    >>> mean_gbps(Profile("j", "m", "data", 2, 100.0, (Phase(75.0, 0.0), Phase(25.0, 40.0))))
    10.0
    """
    if profile.iteration_ms <= 0:
        return 0.0
    return sum(p.duration_ms * p.gbps for p in profile.phases) / profile.iteration_ms


def load_of(topo: Topology, jobs: Sequence[Job], router: JobRouter | None = None) -> Load:
    """The emulator's load at S = 1 of `jobs` (servers, profile) placed on `topo`."""
    router = router or JobRouter(topo)
    frame_bits = 8 * MTU_FRAME_BYTES
    passes = gbps = 0.0
    replicas = 0
    peak: dict[tuple[str, str], float] = {}  # Gbit/s into a switch, per directed link
    for servers, profile in jobs:
        replicas += len(servers)
        flows = router.job_flows(servers, profile.parallelism)
        per_worker = mean_gbps(profile)
        for (src, dst), share in zip(flows, nic_shares(list(flows)), strict=True):
            rate = per_worker * share
            path = router.path(src, dst)
            gbps += rate
            passes += rate * 1e9 / frame_bits * (len(path) - 2)  # less the two servers
            for link in zip(path[:-2], path[1:-1], strict=True):  # links into a switch
                peak[link] = peak.get(link, 0.0) + profile.peak_gbps * share
    caps = topo.capacity_gbps()
    peak_passes = sum(min(g, caps.get(link, g)) for link, g in peak.items()) * 1e9 / frame_bits
    return Load(passes, gbps, replicas, peak_passes)


def predict(constants: CostConstants, load: Load) -> Prediction:
    """CPU of a run with `load` (already at its S), by the cost model."""
    switch = constants.switch_base_cores + constants.switch_cores_per_kpps * load.passes_per_s / 1e3
    replicas = load.replicas * constants.replica_base_cores
    replicas += constants.replica_cores_per_gbps * load.gbps
    return Prediction(switch, replicas, switch + replicas + constants.harness_cores)


def _round_down(value: float, digits: int = SIGNIFICANT_DIGITS) -> float:
    """`value` rounded down to `digits` significant digits.

    >>> _round_down(0.0123456), _round_down(0.5), _round_down(1.0)
    (0.012, 0.5, 1.0)
    """
    if value <= 0:
        return 0.0
    step = 10 ** (math.floor(math.log10(value)) - digits + 1)
    down = math.floor(value / step * (1 + 1e-9)) * step
    return float(f"{down:.{digits}g}")  # 0.00033, not 0.00033000000000000005


_CAP_KEY = {
    "switch CPU": "switch_cpu_cores",
    "switch bursts": "switch_burst_cores",
    "machine CPU": "machine_cpu_cores",
    "switch lateness": "switch_lateness_passes_per_s",
}


def within_lateness(point: Mapping[str, Any], limits: FidelityLimits) -> bool | None:
    """Whether a calibration point's switch lateness stayed within the monitor's limits;
    None when the point has no lateness figure at all.

    >>> lim = FidelityLimits()
    >>> within_lateness({"late_frame_fraction": 0.0003, "late_loop_fraction": 0.0}, lim)
    True
    >>> within_lateness({"late_frame_fraction": 0.02}, lim), within_lateness({}, lim)
    (False, None)
    """
    checks = [
        (point.get("late_frame_fraction"), limits.late_frame_fraction),
        (point.get("late_loop_fraction"), limits.late_loop_fraction),
    ]
    known = [(value, limit) for value, limit in checks if value is not None]
    if not known:
        return None
    return all(float(value) <= limit for value, limit in known)


def lateness_ceiling(
    points: Sequence[Mapping[str, Any]], limits: FidelityLimits, extrapolate: bool
) -> float | None:
    """The most data-frame passes a second the switch carried within its lateness limits:
    the largest calibrated point's below the first that failed (0.0 when the lowest
    failed); when none failed, the top point's, times `EXTRAPOLATION_STEP` if
    `extrapolate`, else None (no ceiling). Points without lateness figures are left out;
    None also when no point has any.

    >>> pts = [{"passes_per_s": 1e4, "late_frame_fraction": 0.0},
    ...        {"passes_per_s": 2e4, "late_frame_fraction": 0.0}]
    >>> lateness_ceiling(pts, FidelityLimits(), extrapolate=True)
    40000.0
    >>> lateness_ceiling(pts[:1] + [pts[1] | {"late_frame_fraction": 0.5}], FidelityLimits(), True)
    10000.0
    """
    judged = sorted(
        ((float(p["passes_per_s"]), ok) for p in points
         if (ok := within_lateness(p, limits)) is not None),
    )  # fmt: skip
    if not judged:
        return None
    ceiling = 0.0
    for passes, ok in judged:
        if not ok:
            return ceiling
        ceiling = passes
    return ceiling * EXTRAPOLATION_STEP if extrapolate else None


def largest_scale(
    constants: CostConstants,
    load: Load,
    headroom: float = HEADROOM,
    limits: FidelityLimits | None = None,
    background_cores: float = 0.0,
) -> ScaleChoice:
    """The largest S in (0, 1] whose predicted CPU stays under `headroom` x each limit;
    `background_cores`, the machine's other work, counts against the machine's limit."""
    lim = limits or FidelityLimits()
    switch_cap = headroom * lim.switch_cpu
    machine_cap = headroom * lim.machine_cpu * constants.cores - background_cores
    polling = constants.switch_cores_per_kpps <= 0  # the switch's CPU says nothing of its work
    if polling:  # its CPU neither bounds S nor counts in the machine's fixed cost
        constants = replace(constants, switch_base_cores=0.0, switch_cores_per_kpps=0.0)
    at_1 = predict(constants, load)
    fixed = predict(constants, load.at(0.0))
    burst_cap = headroom * BURST_CORES
    burst_slope = constants.switch_cores_per_kpps * load.peak_passes_per_s / 1e3
    # (name, what the limit allows, the cost at S = 0, the cost per unit of S)
    constraints = [
        ("machine CPU", machine_cap, fixed.machine_cores, at_1.machine_cores - fixed.machine_cores),
    ]
    if not polling:
        constraints[:0] = [
            ("switch CPU", switch_cap, fixed.switch_cores, at_1.switch_cores - fixed.switch_cores),
            ("switch bursts", burst_cap, fixed.switch_cores, burst_slope),
        ]
    passes_cap = lateness_ceiling(constants.points, lim, extrapolate=polling)
    if polling and passes_cap is None and constants.points:  # no lateness measured at all
        passes_cap = max(float(p["passes_per_s"]) for p in constants.points)
    if passes_cap is not None:
        constraints.append(("switch lateness", passes_cap, 0.0, load.passes_per_s))
    best, bound = 1.0, "S <= 1"
    for name, cap, base, slope in constraints:
        if base >= cap:
            best, bound = 0.0, name
            break
        if slope > 0 and (cap - base) / slope < best:
            best, bound = (cap - base) / slope, name
    caps = {
        "switch_cpu_cores": round(switch_cap, 4),
        "switch_burst_cores": round(burst_cap, 4),
        "machine_cpu_cores": round(machine_cap, 4),
        "background_cores": round(background_cores, 4),
    }
    if passes_cap is not None:
        caps["switch_lateness_passes_per_s"] = round(passes_cap, 1)
    scale = _round_down(best)
    if scale < MIN_SCALE and bound == "switch lateness":
        reason = (
            "no S fits: the switch's lateness passed the monitor's limits at every calibrated point"
            if best == 0.0
            else f"no S >= {MIN_SCALE:g} fits ({bound})"
        )
        return ScaleChoice(None, bound, reason, None, load, headroom, caps)
    if scale < MIN_SCALE:
        switch = (
            "the switch's polling CPU not priced, "
            if polling
            else f"the switch is predicted at {fixed.switch_cores:.2f} of a core and "
        )
        idle = (
            f"as the traffic goes to zero (the calibration's intercepts) {switch}the machine "
            f"at {fixed.machine_cores:.2f} cores "
            f"({load.replicas} replicas x {constants.replica_base_cores:.3f})"
        )
        reason = (
            f"no S fits: {idle}, past {headroom:.0%} of the {bound} limit "
            f"({caps[_CAP_KEY[bound]]:.2f} {'cores' if bound == 'machine CPU' else 'of a core'})"
            if best == 0.0
            else f"no S >= {MIN_SCALE:g} fits ({bound})"
        )
        return ScaleChoice(None, bound, reason, None, load, headroom, caps)
    pred = predict(constants, load.at(scale))
    reason = (
        f"S = {scale:g}: predicted switch {pred.switch_cores:.2f} of a core, replicas "
        f"{pred.replica_cores:.2f}, machine {pred.machine_cores:.2f}"
        + (f" + {background_cores:.2f} others'" if background_cores else "")
        + f" of {constants.cores} cores; "
        f"bound by {bound} (each kept under {headroom:.0%} of its limit: the monitor's switch "
        f"{lim.switch_cpu:.0%} of a core and machine {lim.machine_cpu:.0%}, a whole core in "
        "bursts)"
    )
    if polling:
        reason = reason.replace("switch 0.00 of a core, ", "switch (not priced), ") + (
            "; the calibration's switch CPU did not grow with its work (a polling loop), so "
            "the switch is bounded by its measured lateness"
            + (f": at most {passes_cap:,.0f} frame passes/s" if passes_cap is not None else "")
        )
    elif bound == "switch lateness":
        reason += (
            f"; the switch's lateness passed its limit above {passes_cap:,.0f} passes/s "
            "in the calibration"
        )
    return ScaleChoice(scale, bound, reason, pred, load, headroom, caps)


def fill_jobs(
    topo: Topology,
    models: Mapping[str, ModelSpec] | None = None,
    mix: Sequence[tuple[str, int]] = FOUR_JOBS,
) -> list[Job]:
    """Every server running one replica: `mix`'s models in turn, its worker counts, the
    servers taken in order (our choice: a job larger than a rack spans two, as the
    four-jobs trace's do on the testbed); the last job takes what is left.

    >>> from topologies.generators import cassini_testbed
    >>> [(len(s), p.model) for s, p in fill_jobs(cassini_testbed())]
    [(6, 'vgg19'), (6, 'vgg16'), (6, 'wideresnet101'), (6, 'bert')]
    """
    servers = [s.name for s in topo.servers]
    out: list[Job] = []
    start, index = 0, 0
    while len(servers) - start >= 2:
        model, workers = mix[index % len(mix)]
        take = servers[start : start + workers]
        if len(servers) - start - len(take) < 2:
            take = servers[start:]
        profile = build_profile(model, len(take), nic_gbps=topo.nic_gbps(), models=models)
        out.append((take, profile))
        start, index = start + len(take), index + 1
    return out


def decision_jobs(
    decision: Decision, topo: Topology, models: Mapping[str, ModelSpec] | None = None
) -> list[Job]:
    """The jobs one scheduler decision runs, with their models' profiles."""
    return [
        (servers, build_profile(decision.models[job], len(servers), nic_gbps=topo.nic_gbps(),
                                models=models))
        for job, servers in decision.placement.items()
        if job in decision.models and len(servers) > 0
    ]  # fmt: skip


def heaviest(
    topo: Topology, placements: Sequence[Sequence[Job]], router: JobRouter | None = None
) -> Load:
    """Of several placements (every scheduler's decisions), the load with the most
    switch passes: the one S must fit."""
    router = router or JobRouter(topo)
    loads = [load_of(topo, jobs, router) for jobs in placements]
    return max(loads, key=lambda ld: (ld.passes_per_s, ld.gbps), default=Load(0.0, 0.0, 0))


def plan_load(
    decisions: Sequence[Decision], topo: Topology, models: Mapping[str, ModelSpec] | None = None
) -> Load:
    """The heaviest load any of `decisions` (every scheduler's, for one trace) runs."""
    return heaviest(topo, [decision_jobs(d, topo, models) for d in decisions])
