"""Did a column reproduce a claim? The rules, as pure functions of the measured interval.

A `Check` is one number of the paper's claim: the figure it names, the
paper's value, how it is compared (`near`: within `tolerance` of the paper,
relative; `at_least` / `at_most`: no worse than the paper less / plus the
tolerance) and, for ratios, the value of "no effect" (`neutral`, 1.0).

Rules (our choice; the paper states no tolerances):
- reproduced: the mean meets the comparison.
- partly: it does not, but the 95% interval reaches the accepted band, or
  the effect points the paper's way and the interval excludes "no effect".
- not: neither; the reason names the figure, the measured value and interval
  and the band it missed.
A scenario is reproduced when every check is, not when none is (and at least
one was measured), partly otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .stats import Interval

REPRODUCED, PARTLY, NOT, NOT_RUN = "reproduced", "partly", "not reproduced", "not run"
# A column that ran and measured figures, none of them one of the scenario's claims.
FIGURES_ONLY = "figures only (no claim here)"
KINDS = ("near", "at_least", "at_most")


@dataclass(frozen=True)
class Check:
    """One number of the paper's claim, and how close a measurement must come."""

    metric: str  # the key a cell's figures give it under
    label: str
    paper: float
    kind: str = "near"
    tolerance: float = 0.15  # relative
    neutral: float | None = 1.0  # the value that means "no effect" (None: not a ratio)
    unit: str = "x"

    def band(self) -> tuple[float, float]:
        """The accepted values."""
        if self.kind == "near":
            lo, hi = self.paper * (1 - self.tolerance), self.paper * (1 + self.tolerance)
            return (min(lo, hi), max(lo, hi))
        if self.kind == "at_least":
            return (self.paper * (1 - self.tolerance), math.inf)
        if self.kind == "at_most":
            return (-math.inf, self.paper * (1 + self.tolerance))
        raise ValueError(f"check {self.metric}: kind {self.kind!r} is not one of {KINDS}")


@dataclass(frozen=True)
class Outcome:
    """A check's verdict in one column and why."""

    verdict: str
    reason: str


def fmt(value: float | str | None, unit: str = "") -> str:
    """A figure for people; strings ("inf" from strict JSON) as they are."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    text = f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return text + unit


def describe(m: Interval, unit: str = "") -> str:
    if m.low is None or m.high is None:
        return f"{fmt(m.mean, unit)} (n={m.n})"
    return f"{fmt(m.mean, unit)} [{fmt(m.low)}, {fmt(m.high)}] (n={m.n})"


def judge(check: Check, m: Interval | None) -> Outcome:
    """The verdict of one check on one column's interval.

    >>> from emulation.reproduce.stats import Interval
    >>> c = Check("p90_ratio", "p90", 1.26)
    >>> judge(c, Interval(1.25, 1.2, 1.3, 5)).verdict
    'reproduced'
    >>> judge(c, Interval(1.05, 1.02, 1.08, 5)).verdict
    'partly'
    >>> judge(c, Interval(0.99, 0.95, 1.03, 5)).reason
    'p90 0.99x [0.95, 1.03] (n=5), outside the band 1.07-1.45 of the paper 1.26x'
    """
    if m is None or m.n == 0 or math.isnan(m.mean):
        return Outcome(NOT_RUN, f"{check.label}: not measured")
    lo, hi = check.band()
    measured = describe(m, check.unit)
    if lo <= m.mean <= hi:
        return Outcome(REPRODUCED, f"{check.label} {measured}")
    low = m.low if m.low is not None else m.mean
    high = m.high if m.high is not None else m.mean
    band = _band_text(check)
    if high >= lo and low <= hi:
        return Outcome(PARTLY, f"{check.label} {measured}: the interval reaches {band}")
    if check.neutral is not None:
        paper_side = check.paper - check.neutral
        if paper_side > 0 and low > check.neutral or paper_side < 0 and high < check.neutral:
            return Outcome(
                PARTLY,
                f"{check.label} {measured}: the paper's direction, short of {band}",
            )
    return Outcome(NOT, f"{check.label} {measured}, outside {band}")


def _band_text(check: Check) -> str:
    lo, hi = check.band()
    paper = f"the paper {fmt(check.paper, check.unit)}"
    if check.kind == "at_least":
        return f"the band >= {fmt(lo)} of {paper}"
    if check.kind == "at_most":
        return f"the band <= {fmt(hi)} of {paper}"
    return f"the band {fmt(lo)}-{fmt(hi)} of {paper}"


def overall(outcomes: Sequence[Outcome]) -> str:
    """A scenario's verdict from its checks' outcomes in one column.

    >>> overall([Outcome(REPRODUCED, ""), Outcome(NOT, "")])
    'partly'
    >>> overall([Outcome(NOT_RUN, "")])
    'not run'
    """
    measured = [o.verdict for o in outcomes if o.verdict != NOT_RUN]
    if not measured:
        return NOT_RUN
    if all(v == REPRODUCED for v in measured):
        return REPRODUCED
    if all(v == NOT for v in measured):
        return NOT
    return PARTLY


def judge_all(checks: Sequence[Check], measured: Mapping[str, Interval]) -> dict[str, Outcome]:
    """Every check's outcome on one column's figures (a missing figure is not run)."""
    return {c.metric: judge(c, measured.get(c.metric)) for c in checks}
