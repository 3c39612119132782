"""What does a column say about a claim? Cells' figures pooled into intervals and verdicts.

Per scenario and column: every figure's mean and 95% interval over the
cells that finished (seeds, or emulation runs), the check outcomes, and the
counts a reader needs to trust them: cells used, cells failed, emulation
runs the fidelity monitor did not trust (left out of the figures) and runs
it could not judge (kept, counted).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .grid import EMULATION
from .scenarios import Scenario
from .stats import Interval, interval
from .verdicts import FIGURES_ONLY, NOT_RUN, Outcome, judge_all, overall


@dataclass(frozen=True)
class Column:
    """One column (simulator or emulation) of one scenario."""

    column: str
    planned: int  # cells this invocation asked for
    used: int  # cells whose figures are in the intervals
    failed: int
    left_out: int = 0  # emulation runs the fidelity monitor flagged
    unknown: int = 0  # emulation runs it could not judge (kept)
    figures: Mapping[str, Interval] = field(default_factory=dict)
    outcomes: Mapping[str, Outcome] = field(default_factory=dict)
    verdict: str = NOT_RUN
    flags: tuple[str, ...] = ()
    transport: str | None = None
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "column": self.column, "planned": self.planned, "used": self.used,
            "failed": self.failed, "left_out": self.left_out, "unknown": self.unknown,
            "verdict": self.verdict, "transport": self.transport, "note": self.note,
            "flags": list(self.flags),
            "figures": {k: v.as_dict() for k, v in sorted(self.figures.items())},
            "checks": {k: {"verdict": o.verdict, "reason": o.reason} for k, o in self.outcomes.items()},
        }  # fmt: skip


def column(
    scenario: Scenario,
    name: str,
    planned: int,
    records: Sequence[Mapping[str, Any]],
    failed: int,
    note: str = "",
) -> Column:
    """Pool `records` (this scenario's cells of this column) into a `Column`.

    An emulation record whose run the monitor did not trust (`trustworthy`
    False) is counted in `left_out` and its figures are not pooled.
    """
    kept = [r for r in records if r.get("trustworthy") is not False]
    left_out = len(records) - len(kept)
    unknown = sum(1 for r in kept if name == EMULATION and r.get("trustworthy") is None)
    values: dict[str, list[float]] = {}
    for r in kept:
        for k, v in r.get("figures", {}).items():
            values.setdefault(k, []).append(float(v))
    figures = {k: interval(v) for k, v in values.items()}
    outcomes = judge_all(scenario.checks, figures)
    flags = tuple(f for r in records if r.get("trustworthy") is False for f in r.get("flags", ()))
    transports = {str(r["transport"]) for r in records if r.get("transport")}
    return Column(
        column=name, planned=planned, used=len(kept), failed=failed, left_out=left_out,
        unknown=unknown, figures=figures, outcomes=outcomes,
        verdict=_verdict(list(outcomes.values()), bool(kept), bool(figures)),
        flags=flags, transport=", ".join(sorted(transports)) or None, note=note,
    )  # fmt: skip


@dataclass(frozen=True)
class ScenarioResult:
    scenario: Scenario
    simulator: Column
    emulation: Column

    def as_dict(self) -> dict[str, Any]:
        s = self.scenario
        return {
            "name": s.name, "source": s.source, "claim": s.claim,
            "checks": [{"metric": c.metric, "label": c.label, "paper": c.paper, "kind": c.kind,
                        "tolerance": c.tolerance, "unit": c.unit.strip()} for c in s.checks],
            "figures": [{"metric": m, "label": label} for m, label in s.figures],
            "choices": list(s.choices), "unmeasured": list(s.unmeasured),
            "simulator": self.simulator.as_dict(), "emulation": self.emulation.as_dict(),
        }  # fmt: skip


def _verdict(outcomes: list[Outcome], ran: bool, measured: bool) -> str:
    """The column's verdict; a column that ran and measured figures but none of the
    claims (the pairs' emulation: its claims are the solver's) is not "not run"."""
    if not ran:
        return NOT_RUN
    verdict = overall(outcomes)
    return FIGURES_ONLY if verdict == NOT_RUN and measured else verdict
