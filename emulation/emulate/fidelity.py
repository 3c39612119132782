"""Did the emulator keep up, so that a run's numbers are the network's and not the machine's?

Mininet-HiFi's lesson: an emulation is worth its numbers only if every
emulated component ran when it should have. Four witnesses, each with a
documented limit (our choice, on the scale the default emulation runs at,
S = 0.001: a 1500-byte frame takes 0.24 ms on a 50 Mbit/s port):

- frame lateness: how much later than its scheduled departure the switch
  handed each frame to the wire. Past `late_frame_ms` (1 ms, four frame
  times) a frame counts as late; more than `late_frame_fraction` (1%) of
  frames late, or a p99 lateness past `late_frame_ms`, and queues and
  marks are no longer the traffic manager's.
- packet-loop lateness: how often the switch's loop woke up later than
  `late_frame_ms` after it should have; tracked as a fraction of its wake-ups.
- CPU: the machine's busy fraction and the switch's share of one core,
  sampled during the run. A saturated machine (`machine_cpu` 95%) or a
  switch at `switch_cpu` (90% of a core) cannot absorb a burst. On a virtual
  machine the hypervisor's steal time counts too: past `machine_steal` (5%
  of all cores' time) the emulator was not running when it thought it was.
- the hosts: the replicas' own lateness (`emulation.jobs.run_result.host_lateness`),
  what the switch cannot see. An iteration whose latest wake-up (the agent's
  slot, a Down phase's sleep) came more than `host_late_ms` (5 ms, twenty
  frame times; 2 ms condemned quiet runs on a 2-core machine) after it was
  due is late; more than `host_late_fraction` (5%)
  of iterations late, or a p99 wake-up lateness past `host_late_p99_ms`
  (10 ms: the agent's drift threshold, 5% of a 200 ms iteration, so a host
  that late makes the agent re-align), and the replicas were starved. An Up
  phase with nothing in its way (our choice: its job received no CE mark in
  the run, see `host_lateness`) that ran below `slow_pace` (75%) of its
  pacing rate was held back by a host; more than `slow_up_fraction`
  (10%) of them and the iteration times are the machine's. A run whose
  replicas were starved is not trustworthy, whatever the switch did.

`verdict` names every limit a run passed, so the report says why a run is
not trustworthy, not only that it is not. A run whose main witnesses, frame
and packet-loop lateness, were both not measured (bmv2 has neither) is
"unknown", not "yes": the CPU samples alone cannot say the switch kept up.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from emulation.jobs.witness_limits import HOST_LATE_MS, SLOW_PACE
from emulation.softswitch.port_stats import (
    FIDELITY_NAMES,
    LATE_BUCKET,
    LATE_THRESHOLD_S,
    LATENESS_BUCKETS,
    lateness_summary,
)


@dataclass(frozen=True)
class FidelityLimits:
    """Where the monitor stops trusting a run (see the module docstring)."""

    late_frame_ms: float = LATE_THRESHOLD_S * 1e3  # the switch's own "late" (a bucket edge)
    late_frame_fraction: float = 0.01
    late_loop_fraction: float = 0.01
    machine_cpu: float = 0.95
    machine_steal: float = 0.05
    switch_cpu: float = 0.90
    # the host witness; the first and the third are the edges its figures were counted at
    host_late_ms: float = HOST_LATE_MS
    host_late_fraction: float = 0.05
    host_late_p99_ms: float = 10.0
    slow_pace: float = SLOW_PACE
    slow_up_fraction: float = 0.10


@dataclass(frozen=True)
class FidelityFigures:
    """What was measured during one run; None when that witness was not available."""

    frames: int | None = None  # frames the switch sent
    late_frames: int | None = None  # of them, later than the limit
    frame_late_p99_ms: float | None = None
    frame_late_max_ms: float | None = None
    loop_wakeups: int | None = None
    late_wakeups: int | None = None
    machine_cpu_mean: float | None = None  # busy fraction of all cores
    machine_cpu_max: float | None = None
    machine_steal: float | None = None  # fraction of all cores' time the hypervisor took
    switch_cpu_mean: float | None = None  # fraction of one core
    switch_cpu_max: float | None = None
    host_iterations: int | None = None  # iterations whose wake-ups the replicas timed
    host_late_iterations: int | None = None  # of them, woke later than the limit
    host_late_p99_ms: float | None = None  # p99 of an iteration's latest wake-up
    up_phases: int | None = None  # Up phases of unmarked iterations, with their pace
    slow_up_phases: int | None = None  # of them, below the slow-pace limit
    extra: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# The witnesses without which no verdict can say "yes".
MAIN_WITNESSES = ("frame lateness", "packet-loop lateness")


@dataclass(frozen=True)
class Verdict:
    trustworthy: bool | None  # None: unknown, the main witnesses were not measured
    reasons: tuple[str, ...]  # every limit passed; empty when trustworthy
    unmeasured: tuple[str, ...]  # witnesses that were not available
    # The witnesses whose limit was passed, in `reasons`' order ("machine CPU", ...),
    # so a report can say which one condemned the run; empty when trustworthy.
    failed: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "trustworthy": self.trustworthy,
            "reasons": list(self.reasons),
            "unmeasured": list(self.unmeasured),
            "failed_witnesses": list(self.failed),
        }


def _share(part: int | None, whole: int | None) -> float | None:
    return part / whole if part is not None and whole else None


def verdict(figures: FidelityFigures, limits: FidelityLimits | None = None) -> Verdict:
    """Trustworthy unless a measured figure passed its limit; unknown (None) when no limit
    was passed but neither main witness (`MAIN_WITNESSES`) was measured.

    A witness that was not measured is named in `unmeasured`; one of them alone
    does not condemn the run, nor can the CPU samples alone clear it.

    >>> verdict(FidelityFigures(frames=1000, late_frames=5, machine_cpu_mean=0.5)).trustworthy
    True
    >>> print(verdict(FidelityFigures(machine_cpu_mean=0.5, switch_cpu_mean=0.4)).trustworthy)
    None
    >>> v = verdict(FidelityFigures(frames=1000, late_frames=50, frame_late_p99_ms=3.0))
    >>> v.trustworthy, v.reasons[0], v.failed
    (False, '5.0% of frames left more than 1.024 ms late (limit 1%)', ('frame lateness',))
    >>> verdict(FidelityFigures(frames=1000, late_frames=0, machine_cpu_mean=0.97)).failed
    ('machine CPU',)
    """
    lim = limits or FidelityLimits()
    late = f"{lim.late_frame_ms:g} ms"
    frames = _share(figures.late_frames, figures.frames)
    wakeups = _share(figures.late_wakeups, figures.loop_wakeups)
    woke = _share(figures.host_late_iterations, figures.host_iterations)
    slow = _share(figures.slow_up_phases, figures.up_phases)
    # (witness, its figure or None when unmeasured, its limit, what passing it means);
    # a row without a witness name is one more figure of the witness above it.
    checks: list[tuple[str, float | None, float, str]] = [
        ("frame lateness", frames, lim.late_frame_fraction,
         f"{{:.1%}} of frames left more than {late} late (limit {lim.late_frame_fraction:.0%})"),
        ("", figures.frame_late_p99_ms, lim.late_frame_ms,
         f"p99 frame lateness {{:.2f}} ms (limit {late})"),
        ("packet-loop lateness", wakeups, lim.late_loop_fraction,
         f"the packet loop woke more than {late} late {{:.1%}} of the time "
         f"(limit {lim.late_loop_fraction:.0%})"),
        ("machine CPU", figures.machine_cpu_mean, lim.machine_cpu,
         f"machine CPU {{:.0%}} busy on average (limit {lim.machine_cpu:.0%})"),
        ("", figures.machine_steal, lim.machine_steal,
         f"the hypervisor stole {{:.0%}} of the CPU time (limit {lim.machine_steal:.0%})"),
        ("switch CPU", figures.switch_cpu_mean, lim.switch_cpu,
         f"switch at {{:.0%}} of a core on average (limit {lim.switch_cpu:.0%})"),
        ("host wake-up lateness", woke, lim.host_late_fraction,
         f"replicas woke more than {lim.host_late_ms:g} ms late in {{:.0%}} of iterations "
         f"(limit {lim.host_late_fraction:.0%})"),
        ("", figures.host_late_p99_ms, lim.host_late_p99_ms,
         f"p99 replica wake-up lateness {{:.2f}} ms (limit {lim.host_late_p99_ms:g} ms)"),
        ("host pacing", slow, lim.slow_up_fraction,
         f"{{:.0%}} of unmarked Up phases ran below {lim.slow_pace:.0%} of their pacing rate "
         f"(limit {lim.slow_up_fraction:.0%})"),
    ]  # fmt: skip
    reasons: list[str] = []
    failed: list[str] = []
    witness = ""
    for name, value, limit, text in checks:
        witness = name or witness
        if value is not None and value > limit:
            reasons.append(text.format(value))
            failed += [] if witness in failed else [witness]
    unmeasured = [name for name, value, _, _ in checks if name and value is None]
    blind = all(name in unmeasured for name in MAIN_WITNESSES)
    trustworthy = False if reasons else (None if blind else True)
    return Verdict(trustworthy, tuple(reasons), tuple(unmeasured), tuple(failed))


def trust_word(trustworthy: bool | None) -> str:
    """'yes', 'NO' or 'unknown', as tables print a verdict.

    >>> [trust_word(v) for v in (True, False, None)]
    ['yes', 'NO', 'unknown']
    """
    return "unknown" if trustworthy is None else ("yes" if trustworthy else "NO")


def overall(verdicts: list[bool | None]) -> bool | None:
    """Several runs' verdicts as one: no if any is no, unknown if any is unknown, else yes.

    >>> overall([True, None]), overall([True, False, None]), overall([True, True])
    (None, False, True)
    """
    if not verdicts or any(v is False for v in verdicts):
        return False
    return None if any(v is None for v in verdicts) else True


def _buckets(leaves: Mapping[str, int]) -> list[int]:
    return [int(leaves.get(f"bucket-{i}", 0)) for i in range(LATENESS_BUCKETS)]


def switch_lateness(
    before: Mapping[str, Mapping[str, int]], after: Mapping[str, Mapping[str, int]]
) -> dict[str, Any]:
    """The `FidelityFigures` fields of one interval, from two reads of the switch's gNMI
    /fidelity (`controlplane.gnmi.GnmiReader.read_fidelity`); {} when it serves none.

    The maxima are the switch's since it started (a histogram keeps no time).

    >>> zero = {"departure-lateness": {}, "wakeup-lateness": {}}
    >>> later = {"departure-lateness": {"bucket-1": 99, "bucket-12": 1, "max-ns": 3_000_000},
    ...          "wakeup-lateness": {"bucket-2": 10}}
    >>> f = switch_lateness(zero, later)
    >>> f["frames"], f["late_frames"], f["frame_late_p99_ms"], f["loop_wakeups"], f["late_wakeups"]
    (100, 1, 0.002, 10, 0)
    """
    departure, wakeup = (name.replace("_", "-") for name in FIDELITY_NAMES)
    if departure not in after:
        return {}
    out: dict[str, Any] = {}
    for name, prefix in ((departure, "frame"), (wakeup, "loop")):
        now, then = _buckets(after.get(name, {})), _buckets(before.get(name, {}))
        delta = [max(0, a - b) for a, b in zip(now, then, strict=True)]
        largest = after.get(name, {}).get("max-ns", 0) / 1e9
        summary = lateness_summary(delta, largest)
        late = sum(delta[LATE_BUCKET:])
        if prefix == "frame":
            out.update(
                frames=summary.count,
                late_frames=late,
                frame_late_p99_ms=round(summary.p99_s * 1e3, 6),
                frame_late_max_ms=round(largest * 1e3, 6),
            )
        else:
            out.update(loop_wakeups=summary.count, late_wakeups=late)
    return out
