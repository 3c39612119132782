"""How much more aggressively may a RoCE flow raise its rate, given how far into its iteration it is?

MLTCP (Rajasekaran, Narang, Zabreyko, Ghobadi, "MLTCP: A Distributed
Technique to Approximate Centralized Flow Scheduling For Machine Learning",
HotNets 2024): a training job's flows scale their congestion control's
increase step by a function F of `bytes_ratio`, the fraction of the current
iteration's bytes they have already sent (section 3). A flow further into its
iteration grabs bandwidth back faster after a cut, finishes first, and the
jobs' communication phases slide apart iteration by iteration until they take
turns; the paper describes it as a gradient-descent step per iteration
towards less contention. The same rule is stated for window-based TCP and for
rate-based DCQCN.

Here, on DCQCN (`dcqcn.py`):
- F is linear, F(f) = intercept + slope x f with f clamped to [0, 1]
  (the paper's aggressiveness function is a line in bytes_ratio). The values
  slope = 1.5 and intercept = 0.25 are (our choice): F runs from 0.25 at an
  iteration's start to 1.75 at its end and averages 1 over an iteration sent
  at an even pace, so a job's mean aggressiveness is DCQCN's own.
- F scales both of DCQCN's increase steps, R_AI and R_HAI (our choice: fast
  recovery moves Rc towards Rt and has no step to scale; the cut is DCQCN's).
- f resets to 0 at each iteration's start. The iteration's total bytes are
  learned as the previous iteration's bytes (our choice: a job's iterations
  repeat the same collectives); before a total is known F = 1 (plain DCQCN).
- F in force at an event is the one at the last byte count the caller
  passed (a timer event between sends uses the F of the last send).

Pure: `aggressiveness` and `increase_scaled` give the DCQCN settings a flow's
next events use, so `dcqcn.rp_*` with them is the reference the compiled data
path (`_roce.c`, the QP state's gain) is checked against.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .dcqcn import DcqcnSettings


@dataclass(frozen=True)
class MltcpSettings:
    """F(f) = intercept + slope x f (see the module docstring for the values' source)."""

    slope: float = 1.5
    intercept: float = 0.25

    def __post_init__(self) -> None:
        if not self.intercept > 0 or self.slope < 0:
            raise ValueError(
                f"MLTCP intercept={self.intercept} must be > 0 and slope={self.slope} >= 0"
            )


@dataclass(frozen=True)
class IterationBytes:
    """A flow's bytes in its current iteration, and the total it learned for one."""

    total: float = 0.0  # 0: not known yet (no iteration finished)
    sent: float = 0.0


def aggressiveness(m: MltcpSettings, it: IterationBytes) -> float:
    """F of the fraction of the iteration's bytes sent; 1 while no total is known.

    >>> m = MltcpSettings()
    >>> aggressiveness(m, IterationBytes(total=100, sent=0)), aggressiveness(m, IterationBytes(100, 50))
    (0.25, 1.0)
    >>> aggressiveness(m, IterationBytes(100, 250)), aggressiveness(m, IterationBytes(0, 10))
    (1.75, 1.0)
    """
    if it.total <= 0:
        return 1.0
    f = min(max(it.sent / it.total, 0.0), 1.0)
    return m.intercept + m.slope * f


def iteration_start(it: IterationBytes) -> IterationBytes:
    """A new iteration: nothing sent yet; the total is what the last one sent.

    >>> iteration_start(IterationBytes(total=0, sent=300))
    IterationBytes(total=300, sent=0.0)
    >>> iteration_start(IterationBytes(total=300, sent=0))
    IterationBytes(total=300, sent=0.0)
    """
    return IterationBytes(total=it.sent if it.sent > 0 else it.total, sent=0.0)


def iteration_sent(it: IterationBytes, nbytes: float) -> IterationBytes:
    """`nbytes` more of this iteration left."""
    return replace(it, sent=it.sent + nbytes)


def increase_scaled(settings: DcqcnSettings, gain: float) -> DcqcnSettings:
    """DCQCN's settings with both increase steps (R_AI, R_HAI) times `gain`.

    >>> s = increase_scaled(DcqcnSettings(line_rate_bps=50e9), 1.75)
    >>> s.ai_rate_bps / 1e6, s.hai_rate_bps / 1e6
    (8.75, 87.5)
    """
    if not gain > 0:
        raise ValueError(f"MLTCP gain {gain} must be > 0")
    return replace(
        settings,
        ai_rate_bps=settings.ai_rate_bps * gain,
        hai_rate_bps=settings.hai_rate_bps * gain,
    )
