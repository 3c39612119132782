"""The registry holds every claim of issue 27 with the paper's numbers, and each runs small."""

from __future__ import annotations

import pytest

from emulation.reproduce.scenarios import SCENARIOS, Scenario, get_scenario, scenario_names, select
from emulation.reproduce.workloads import PairWorkload, SolverWorkload, TraceWorkload
from topologies.errors import UserInputError

ISSUE_NAMES = [
    "two-vgg19", "pairs", "poisson", "dynamic-dlrm", "model-parallel",
    "snapshots", "two-gpu", "adjustments", "precision",
]  # fmt: skip

# (scenario, check metric) -> the number issue 27 quotes from the paper
PAPER_NUMBERS = {
    ("two-vgg19", "vgg19+vgg19.p90_ratio"): 1.26,
    ("two-vgg19", "vgg19+vgg19.shift_ms"): 120.0,
    ("two-vgg19", "vgg19+vgg19.aligned_share"): 0.5,
    ("pairs", "wideresnet101+vgg16.shift_ms"): 150.0,
    ("poisson", "th+cassini.mean"): 1.4,
    ("poisson", "th+cassini.p99"): 1.5,
    ("dynamic-dlrm", "th+cassini.mean"): 1.5,
    ("dynamic-dlrm", "th+cassini.p99"): 2.2,
    ("dynamic-dlrm", "po+cassini.mean"): 1.6,
    ("dynamic-dlrm", "po+cassini.p99"): 2.5,
    ("dynamic-dlrm", "th+cassini.marks.dlrm"): 27.0,
    ("dynamic-dlrm", "po+cassini.marks.dlrm"): 33.0,
    ("model-parallel", "th+cassini.mean"): 1.2,
    ("model-parallel", "th+cassini.p99"): 1.6,
    ("model-parallel", "th+cassini.marks.max"): 29.0,
    ("two-gpu", "th+cassini.mean"): 1.4,
    ("two-gpu", "th+cassini.p99"): 1.9,
    ("adjustments", "adjustments_per_min"): 2.0,
}


def test_every_scenario_the_issue_names_is_registered_once_in_its_order() -> None:
    assert scenario_names() == ISSUE_NAMES


@pytest.mark.parametrize(("scenario", "metric"), sorted(PAPER_NUMBERS))
def test_the_paper_numbers_are_the_issues(scenario: str, metric: str) -> None:
    checks = {c.metric: c for c in get_scenario(scenario).checks}
    assert checks[metric].paper == PAPER_NUMBERS[(scenario, metric)]


def test_the_two_vgg19_and_pairs_claims_quote_the_papers_shifts() -> None:
    assert (
        "120 ms" in get_scenario("two-vgg19").claim and "1.26x" in get_scenario("two-vgg19").claim
    )
    assert "150 ms" in get_scenario("pairs").claim
    assert "5 degrees" in get_scenario("precision").claim
    assert "0.6" in get_scenario("snapshots").claim


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_each_scenario_states_its_choices_and_a_smaller_quick_size(scenario: Scenario) -> None:
    assert scenario.checks and scenario.claim
    assert all("(our choice)" in c for c in scenario.choices) and scenario.choices
    full, quick = scenario.full, scenario.quick
    assert 1 <= quick.seeds <= full.seeds
    assert type(quick.simulator) is type(full.simulator)
    sim_q, sim_f = quick.simulator, full.simulator
    if isinstance(sim_q, PairWorkload) and isinstance(sim_f, PairWorkload):
        assert sim_q.iterations < sim_f.iterations
    if isinstance(sim_q, TraceWorkload) and isinstance(sim_f, TraceWorkload):
        assert sim_q.jobs <= sim_f.jobs
    if isinstance(sim_q, SolverWorkload) and isinstance(sim_f, SolverWorkload):
        assert sim_q.mixes < sim_f.mixes
    if full.emulation is None:
        assert scenario.emulation_note, "a scenario without emulation says why"
        assert quick.emulation is None
    else:
        assert quick.emulation is not None and quick.emulation.iterations <= 40
        assert quick.emulation.iterations < full.emulation.iterations
        assert quick.emulation.transport == "tcp"
        assert quick.runs >= 2


def test_a_wrong_name_is_answered_with_the_closest_and_all_selects_every_one() -> None:
    with pytest.raises(UserInputError, match="Did you mean 'two-vgg19'"):
        get_scenario("two-vgg")
    assert [s.name for s in select(["all"])] == ISSUE_NAMES
    assert [s.name for s in select(["precision", "pairs", "pairs"])] == ["pairs", "precision"]
