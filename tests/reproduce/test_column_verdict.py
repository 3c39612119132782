"""A column's verdict: "not run" only when nothing ran; a column that measured figures
but none of the scenario's claims (the pairs' emulation) says so. No fabric."""

from __future__ import annotations

from emulation.reproduce.aggregate import column
from emulation.reproduce.grid import EMULATION
from emulation.reproduce.scenarios import SCENARIOS
from emulation.reproduce.verdicts import FIGURES_ONLY, NOT_RUN

PAIRS = next(s for s in SCENARIOS if s.name == "pairs")
TWO = next(s for s in SCENARIOS if s.name == "two-vgg19")


def test_figures_without_a_claim_are_not_not_run() -> None:
    runs = [{"figures": {"wideresnet101+vgg16.p90_ratio": r}, "trustworthy": True}
            for r in (0.80, 0.81, 0.79)]  # fmt: skip
    col = column(PAIRS, EMULATION, 3, runs, 0)
    assert col.verdict == FIGURES_ONLY and col.used == 3
    assert column(PAIRS, EMULATION, 3, [], 0).verdict == NOT_RUN


def test_a_measured_claim_keeps_its_verdict() -> None:
    runs = [{"figures": {"vgg19+vgg19.p90_ratio": r}, "trustworthy": True} for r in (0.83, 0.84)]
    assert column(TWO, EMULATION, 2, runs, 0).verdict == "not reproduced"
