"""How long should a job wait for a consolidated placement? The delay scheduler's auto-tuner.

Sharma et al. ("GPU Cluster Scheduling for Network-Sensitive Deep Learning",
arXiv:2401.16492, 2024) tune their delay timers with an "auto-tuner"; the
public abstract names it but not its rule, so the rule here is ours
(our choice, all of it):

- Jobs fall in two classes by their communication share (the time of the
  profile's Up phases over its iteration time, `Profile.up_fraction`):
  "sensitive" at or above `SENSITIVE_SHARE`, "insensitive" below it. Each
  class has one delay timer.
- Every decision, the tuner samples each running job's progress. Between two
  samples of the same placement (the restart penalty excluded), the measured
  iteration time over the profile's iteration time alone is the job's
  slowdown there, charged to its class and to "consolidated" (on as few racks
  as an empty cluster allows) or "fragmented".
- The cost of a timer is the time a job spends waiting while a fragmented
  placement for it is free (it passed that placement up): from the first
  decision that skipped it so until it starts. Waiting because no placement
  at all was free is queueing, which no timer changes, and is not counted.
  When a job starts, that wait and the time it would need alone are
  recorded for its class.
- Every `period_s` each class with evidence on both placements compares the
  benefit of consolidation for a typical started job, (fragmented slowdown -
  consolidated slowdown) x time alone, with its cost, the class's mean wait.
  Benefit above cost: the timer grows by `step` (waiting pays off); below:
  it shrinks by `step` (waiting dominates). Bounds keep it in
  [`min_s`, `max_s`]. The epoch's samples are then dropped, so the timers
  follow the trace's current mix; the last measured slowdown gap of each
  class is kept, so a class whose jobs all waited for consolidation (no
  fragmented sample this epoch) can still have its timer lowered.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# (our choice) splits the catalogue: BERT, VGG, GPT-3 above; ResNet50, GPT-2 below
SENSITIVE_SHARE = 0.5
CLASSES = ("sensitive", "insensitive")
MIN_SAMPLE_S = 5.0  # (our choice) shorter intervals are dominated by iteration granularity


def sensitivity_class(share: float, threshold: float = SENSITIVE_SHARE) -> str:
    """The timer class of a job with communication share `share`.

    >>> sensitivity_class(0.54), sensitivity_class(0.25)
    ('sensitive', 'insensitive')
    """
    return "sensitive" if share >= threshold else "insensitive"


def tune_timer(
    timer_s: float,
    benefit_s: float,
    cost_s: float,
    step: float = 1.5,
    min_s: float = 1.0,
    max_s: float = 600.0,
) -> float:
    """One auto-tuner move: up when consolidation's benefit beats the wait, down otherwise.

    >>> tune_timer(60.0, benefit_s=90.0, cost_s=30.0)   # consolidation pays: wait longer
    90.0
    >>> tune_timer(60.0, benefit_s=10.0, cost_s=30.0)   # waiting dominates: wait less
    40.0
    """
    if benefit_s > cost_s:
        return min(max_s, timer_s * step)
    if benefit_s < cost_s:
        return max(min_s, timer_s / step)
    return timer_s


@dataclass
class _Evidence:
    """One class's samples in the current epoch (time-weighted slowdowns, waits)."""

    slow_s: dict[bool, float] = field(default_factory=lambda: {True: 0.0, False: 0.0})
    weight_s: dict[bool, float] = field(default_factory=lambda: {True: 0.0, False: 0.0})
    waits_s: list[float] = field(default_factory=list)
    alone_s: list[float] = field(default_factory=list)

    def slowdown(self, consolidated: bool) -> float | None:
        w = self.weight_s[consolidated]
        return self.slow_s[consolidated] / w if w > 0 else None


@dataclass
class DelayTuner:
    """The timers and what the tuner has measured since its last move (mutable, one per run)."""

    timers: dict[str, float]
    period_s: float = 120.0
    step: float = 1.5
    min_s: float = 1.0
    max_s: float = 600.0
    enabled: bool = True
    last_tune_s: float = 0.0
    # per job: (time s, work done, servers, since_s) of its last sample
    samples: dict[str, tuple[float, float, tuple[str, ...], float]] = field(default_factory=dict)
    evidence: dict[str, _Evidence] = field(default_factory=dict)
    gap: dict[str, float] = field(default_factory=dict)  # last fragmented - consolidated slowdown
    passed_up: dict[str, float] = field(default_factory=dict)  # job -> first time it passed one up
    # (time s, class, old timer, new timer, benefit s, cost s) for every move
    history: list[tuple[float, str, float, float, float, float]] = field(default_factory=list)

    def _of(self, cls: str) -> _Evidence:
        return self.evidence.setdefault(cls, _Evidence())

    def sample(
        self,
        job: str,
        cls: str,
        now_s: float,
        work_done: float,
        servers: tuple[str, ...],
        since_s: float,
        ideal_ms: float,
        consolidated: bool,
        restart_s: float,
    ) -> None:
        """Record a running job's progress; charge its slowdown since the last sample."""
        prev = self.samples.get(job)
        self.samples[job] = (now_s, work_done, servers, since_s)
        if prev is None or prev[2] != servers or prev[3] != since_s:
            return
        t0, w0 = max(prev[0], since_s + restart_s), prev[1]
        if now_s - prev[0] < MIN_SAMPLE_S or prev[0] < since_s + restart_s or work_done <= w0:
            return
        measured_ms = (now_s - t0) * 1e3 / (work_done - w0)
        ev = self._of(cls)
        ev.slow_s[consolidated] += (measured_ms / ideal_ms) * (now_s - t0)
        ev.weight_s[consolidated] += now_s - t0

    def pass_up(self, job: str, now_s: float) -> None:
        """`job` waits for consolidation although a fragmented placement is free."""
        self.passed_up.setdefault(job, now_s)

    def started(self, job: str, cls: str, now_s: float, alone_s: float) -> None:
        """`job` of class `cls` starts at `now_s`; it would need `alone_s` alone."""
        ev = self._of(cls)
        ev.waits_s.append(now_s - self.passed_up.pop(job, now_s))
        ev.alone_s.append(alone_s)

    def forget(self, live: Mapping[str, object]) -> None:
        """Drop what is kept about jobs no longer live."""
        for name in [n for n in self.samples if n not in live]:
            del self.samples[name]
        for name in [n for n in self.passed_up if n not in live]:
            del self.passed_up[name]

    def maybe_tune(self, now_s: float) -> None:
        """Move every class's timer once per `period_s` (module docstring)."""
        if not self.enabled or now_s < self.last_tune_s + self.period_s - 1e-6:
            return
        self.last_tune_s = now_s
        for cls, ev in self.evidence.items():
            frag, cons = ev.slowdown(False), ev.slowdown(True)
            if frag is not None and cons is not None:
                self.gap[cls] = frag - cons
            if cls not in self.gap or not ev.waits_s:
                continue
            benefit = self.gap[cls] * sum(ev.alone_s) / len(ev.alone_s)
            cost = sum(ev.waits_s) / len(ev.waits_s)
            old = self.timers[cls]
            new = tune_timer(old, benefit, cost, self.step, self.min_s, self.max_s)
            if new != old:
                self.timers[cls] = new
                self.history.append((now_s, cls, old, new, benefit, cost))
        self.evidence = {}

    def next_tune_s(self) -> float:
        return self.last_tune_s + self.period_s
