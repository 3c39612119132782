"""Algorithm 2 end to end: candidates, evaluation, choice, and the CLI."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from emulation.cli import main
from scheduler.cassini.candidates import locality_candidates
from scheduler.cassini.holding import HOLD_TOLERANCE
from scheduler.cassini.pacing import plan_group
from scheduler.cassini.periods import pacing_options
from scheduler.cassini.plans import choose, evaluate_candidate
from scheduler.workloads.profiles import build_profile
from scheduler.workloads.traffic import JobRouter as Router
from scheduler.workloads.types import Job, Phase, Profile
from topologies.errors import UserInputError
from topologies.library import load_topology
from topologies.model import DirectedLink


def half(name: str) -> Profile:
    return Profile(name, "m", "data", 2, 200.0, (Phase(100.0, 50.0), Phase(100.0, 0.0)))


class TableRouter:
    """Routing given as a table: candidate server tuples -> links (a test double for Router)."""

    def __init__(self, table: dict[tuple[str, ...], frozenset[DirectedLink]]) -> None:
        self.table = table

    def job_links(
        self, servers: Sequence[str], parallelism: str, job_name: str = ""
    ) -> frozenset[DirectedLink]:
        return self.table[tuple(servers)]


def test_inconsistent_candidate_is_discarded_and_consistent_one_chosen() -> None:
    ab, bc, ca = ("t1", "agg"), ("agg", "t2"), ("t2", "t3")
    router = TableRouter(
        {
            ("s1",): frozenset({ab, ca}),
            ("s2",): frozenset({ab, bc}),
            ("s3",): frozenset({bc, ca}),
            ("s4",): frozenset({ab}),
            ("s5",): frozenset({ab, bc}),
            ("s6",): frozenset({bc}),
        }
    )
    # Every link wants its two half-duty jobs half an iteration apart: around
    # the triangle a-b-c that puts a half an iteration from itself.
    caps = {ab: 50.0, bc: 50.0, ca: 50.0}
    profiles = {"a": half("a"), "b": half("b"), "c": half("c")}
    triangle = {"a": ("s1",), "b": ("s2",), "c": ("s3",)}
    chain = {"a": ("s4",), "b": ("s5",), "c": ("s6",)}
    decision = choose([triangle, chain], profiles, router, caps)  # type: ignore[arg-type]
    first, second = decision.candidates
    assert first.discarded is not None and "inconsistent cycle" in first.discarded
    assert first.rule == "inconsistent-cycle"
    assert second.discarded is None and second.rule == "acyclic"
    assert decision.best.index == 1 and not decision.fallback
    assert decision.schedule.shifts_ms == {"a": 0.0, "b": 100.0, "c": 0.0}
    assert decision.schedule.link_scores == {"t1->agg": 1.0, "agg->t2": 1.0}
    assert decision.schedule.periods_ms == {"a": 200.0, "b": 200.0, "c": 200.0}


def test_links_that_cannot_be_oversubscribed_do_not_constrain_shifts() -> None:
    up, down = ("t1", "agg"), ("agg", "t2")
    router = TableRouter({("s1",): frozenset({up, down}), ("s2",): frozenset({up, down})})
    # Both jobs fit the 100 Gbps downlink at any rotation; only the uplink binds.
    decision = choose(
        [{"a": ("s1",), "b": ("s2",)}],
        {"a": half("a"), "b": half("b")},
        router,  # type: ignore[arg-type]
        {up: 50.0, down: 100.0},
    )
    assert decision.best.rule == "acyclic" and decision.best.discarded is None
    assert decision.schedule.shifts_ms == {"a": 0.0, "b": 100.0}
    assert decision.schedule.link_scores == {"t1->agg": 1.0, "agg->t2": 1.0}


def test_ties_go_to_the_lower_index_and_scores_order_candidates() -> None:
    link = ("t1", "agg")
    router = TableRouter(
        {("s1",): frozenset({link}), ("s2",): frozenset({link}), ("s3",): frozenset()}
    )
    caps = {link: 50.0}
    hog = Profile("h", "m", "data", 2, 200.0, (Phase(150.0, 50.0), Phase(50.0, 0.0)))
    profiles = {"a": hog, "b": replace(hog, name="b")}
    shared = {"a": ("s1",), "b": ("s2",)}
    apart = {"a": ("s1",), "b": ("s3",)}
    # the paper's scoring (unpaced): candidates ranked by their links' scores
    decision = choose([shared, apart, apart], profiles, router, caps, precision_deg=10.0, pace=False)  # type: ignore[arg-type]
    scores = [c.score for c in decision.candidates]
    assert scores[0] == pytest.approx(0.5) and scores[1:] == [1.0, 1.0]
    assert decision.best.index == 1
    # Paced, the two hogs cannot keep a 200 ms grid (each runs 300 ms with the other's
    # Up phase): it is stretched to 300 ms, 2 x 150 ms of Up at line rate, which beats
    # running free (300 ms at best); the idle still ranks the shared placement last.
    paced = choose([shared, apart, apart], profiles, router, caps, precision_deg=10.0)  # type: ignore[arg-type]
    first = paced.candidates[0]
    assert first.score == pytest.approx(1.0)
    assert first.periods_ms["a"] == pytest.approx(300.0, rel=2e-3)
    assert first.periods_ms["a"] >= 300.0 / (1 + HOLD_TOLERANCE)
    assert paced.best.index == 1


def test_total_ranking_counts_oversubscription_not_shared_links() -> None:
    tight, roomy, spare1, spare2, spare3 = (
        ("t1", "a1"),
        ("t2", "a2"),
        ("x", "1"),
        ("x", "2"),
        ("x", "3"),
    )
    router = TableRouter(
        {
            ("s1",): frozenset({tight, spare1, spare2, spare3}),
            ("s2",): frozenset({tight, spare1, spare2, spare3}),
            ("s3",): frozenset({roomy}),
            ("s4",): frozenset({roomy}),
        }
    )
    caps = {tight: 50.0, roomy: 60.0, spare1: 200.0, spare2: 200.0, spare3: 200.0}
    hog = Profile("h", "m", "data", 2, 200.0, (Phase(150.0, 50.0), Phase(50.0, 0.0)))
    profiles = {"a": hog, "b": replace(hog, name="b")}
    spread = {"a": ("s1",), "b": ("s2",)}  # 50 Gbps link half oversubscribed + 3 idle ones
    compact = {"a": ("s3",), "b": ("s4",)}  # one 60 Gbps link, a third oversubscribed
    args = (profiles, router, caps)
    # the paper's scoring (unpaced), where the links' scores are all there is
    unpaced = {"precision_deg": 10.0, "pace": False}
    by_mean = choose([spread, compact], *args, aggregate="mean", **unpaced)  # type: ignore[arg-type]
    by_total = choose([spread, compact], *args, **unpaced)  # type: ignore[arg-type]
    first, second = by_total.candidates
    assert first.link_scores["t1->a1"] == pytest.approx(0.5)
    assert second.link_scores["t2->a2"] == pytest.approx(1 - 0.5 * (100 - 60) / 60)
    assert first.score == pytest.approx(0.875)  # the paper's mean prefers spread
    assert first.score > second.score
    assert by_mean.best.index == 0
    assert by_total.best.index == 1  # less oversubscription in total


@pytest.fixture(scope="module")
def testbed_jobs() -> tuple:
    topo = load_topology("cassini-testbed")
    spec = [
        ("vgg16", 3),
        ("resnet50", 3),
        ("bert", 3),
        ("gpt2", 3),
        ("wideresnet101", 3),
        ("vgg19", 3),
        ("dlrm", 2),
        ("roberta", 2),
        ("xlm", 2),
    ]
    jobs = [
        Job(f"{m}-{i}", replace(build_profile(m, w), name=f"{m}-{i}"), w)
        for i, (m, w) in enumerate(spec)
    ]
    return topo, jobs


def test_locality_candidates_are_distinct_and_respect_counts(testbed_jobs: tuple) -> None:
    topo, jobs = testbed_jobs
    cands = locality_candidates(topo, jobs, n=10, seed=3)
    assert len(cands) == 10
    keys = {tuple(sorted((j, tuple(sorted(s))) for j, s in c.items())) for c in cands}
    assert len(keys) == 10
    gpus = {s.name: s.gpus for s in topo.servers}
    for c in cands:
        assert {j.name: len(c[j.name]) for j in jobs} == {j.name: j.workers for j in jobs}
        assert all(
            n <= gpus[s] for s, n in Counter(s for servers in c.values() for s in servers).items()
        )
    with pytest.raises(UserInputError, match="need 25 GPUs"):
        locality_candidates(topo, [*jobs, Job("extra", jobs[0].profile, 1)])


def test_two_gpu_servers_hold_two_workers() -> None:
    topo = load_topology("cassini-testbed-2gpu")
    prof = build_profile("vgg16", 4)
    jobs = [Job(f"j{i}", prof, 4) for i in range(3)]
    for c in locality_candidates(topo, jobs, n=5):
        counts = Counter(s for servers in c.values() for s in servers)
        assert max(counts.values()) <= 2 and sum(counts.values()) == 12


def test_testbed_choice_is_deterministic_and_parallel_matches_serial(testbed_jobs: tuple) -> None:
    topo, jobs = testbed_jobs
    cands = locality_candidates(topo, jobs, n=10, seed=0)
    profiles = {j.name: j.profile for j in jobs}
    router, caps = Router(topo), topo.capacity_gbps()
    serial = choose(cands, profiles, router, caps)
    parallel = choose(cands, profiles, router, caps, workers=2)
    assert serial == parallel
    assert any(c.link_scores for c in serial.candidates)  # the snapshot does share links
    valid = [c for c in serial.candidates if c.discarded is None]
    assert serial.best.value == max(c.value for c in valid)
    for c in serial.candidates:
        assert 0.0 <= c.score <= 1.0
        assert all(0.0 <= s <= 1.0 for s in c.link_scores.values())
        assert all("->" in link for link in c.link_scores)


def test_identical_links_are_solved_once(testbed_jobs: tuple) -> None:
    topo, jobs = testbed_jobs
    router = Router(topo)
    a, b = jobs[0], jobs[5]  # vgg16 and vgg19, 3 workers each, across two racks
    placement = {a.name: ("s01", "s02", "s05"), b.name: ("s03", "s06", "s07")}
    cache: dict = {}
    res = evaluate_candidate(
        placement, {a.name: a.profile, b.name: b.profile}, router, topo.capacity_gbps(), cache=cache
    )
    assert len(res.link_scores) >= 2
    options = pacing_options(
        {a.name: a.profile.iteration_ms, b.name: b.profile.iteration_ms}, [(a.name, b.name)]
    )
    # every shared link carries the same pair at 50 Gbps: as many solves as for one such
    # link (each pacing option, and each stretch `held_plan` tried), not one per link
    single: dict = {}
    one = ("x", "y")
    profiles = {a.name: a.profile, b.name: b.profile}
    plan_group({one: (a.name, b.name)}, profiles, {one: 50.0}, 5.0, "auto", single, pace=True)
    assert len(cache) == len(single) >= len(options) > 1
    assert res.rule == "consistent-cycle"
    assert res.shifts_ms[a.name] == 0.0


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_compat_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "compat", "--jobs", "vgg16,vgg16,resnet50", "--json")
    assert code == 0
    doc = json.loads(out)
    assert {"plan_score", "best_score", "perimeter_ms", "rotations_deg", "shifts_ms", "solver",
            "elapsed_ms"} <= set(doc)  # fmt: skip
    assert "score" not in doc  # each score names what it belongs to
    assert 0.0 <= doc["plan_score"] <= doc["best_score"] <= 1.0
    assert set(doc["shifts_ms"]) == {"vgg16", "vgg16#2", "resnet50"}
    assert doc["rotations_deg"]["vgg16"] == 0.0


def test_cli_compat_paces_the_papers_perfect_pair(capsys: pytest.CaptureFixture[str]) -> None:
    """The paper: WideResNet101 and VGG16 interleave perfectly (with a 150 ms shift on
    its testbed's jobs)."""
    code, out, _ = run_cli(
        capsys, "compat", "--jobs", "wideresnet101,vgg16", "--workers", "4", "--json"
    )
    doc = json.loads(out)
    assert code == 0 and doc["plan"] == "paced"
    assert doc["plan_score"] == doc["best_score"] > 0.98 > 0.85 > doc["free_running_score"]
    assert doc["best_shifts_ms"] == doc["shifts_ms"]
    periods = doc["periods_ms"]
    assert periods["vgg16"] == periods["wideresnet101"]  # one 1:1 circle
    # On these profiles VGG16's AllReduce (125.5 ms from 100.1 ms into its iteration)
    # must sit in WideResNet101's 129.3 ms of forward pass and early backprop, so VGG16
    # starts about 100 ms before WRN's iteration does: a shift of the period - 100.
    vgg16 = build_profile("vgg16", 4)
    burst_at = vgg16.phases[0].duration_ms
    assert doc["shifts_ms"]["vgg16"] == pytest.approx(periods["vgg16"] - burst_at, abs=10.0)
    code, out, _ = run_cli(
        capsys, "compat", "--jobs", "wideresnet101,vgg16", "--workers", "4", "--json", "--no-pace"
    )
    unpaced = json.loads(out)
    assert unpaced["plan"] == "unpaced" and unpaced["approximated"]


def test_cli_compat_bad_input_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "compat", "--jobs", "vgg16,resnet50", "--solver", "exakt")
    assert code == 2 and err.count("\n") == 1 and "Did you mean 'exact'" in err


def test_cli_models_old_name_still_works_with_a_note(capsys: pytest.CaptureFixture[str]) -> None:
    """`cassini profiles` was one letter from `cassini profile`: now `cassini models`,
    the old name kept for a release with a one-line note on stderr."""
    code, new_out, new_err = run_cli(capsys, "models", "--workers", "2", "--json")
    assert code == 0 and new_err == ""
    code, old_out, old_err = run_cli(capsys, "profiles", "--workers", "2", "--json")
    assert code == 0 and old_out == new_out
    assert old_err == "cassini: note: `profiles` is now `cassini models`\n"
    from emulation.cli import build_parser

    listed = build_parser().format_help().split("COMMAND", 2)[-1]
    assert "    models " in listed and "\n    profiles " not in listed


def test_cli_profiles_json_loads_back(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = run_cli(capsys, "models", "--workers", "2", "--json")
    assert code == 0
    doc = json.loads(out)
    assert len(doc) == 13 and all(d["workers"] == 2 for d in doc)
    f = tmp_path / "p.json"
    f.write_text(json.dumps(doc[:2]))
    code, out, _ = run_cli(capsys, "compat", "--jobs-file", str(f), "--json")
    assert code == 0 and set(json.loads(out)["shifts_ms"]) == {doc[0]["name"], doc[1]["name"]}


def test_cli_schedule_json_on_default_testbed(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "schedule", "--json")
    assert code == 0
    doc = json.loads(out)
    topo = load_topology("cassini-testbed")
    servers = set(topo.server_names())
    from scheduler.workloads.traces import FOUR_JOBS

    assert len(doc["placement"]) == len(FOUR_JOBS)
    for (model, workers), (job, placed) in zip(FOUR_JOBS, doc["placement"].items(), strict=True):
        assert job.startswith(model) and len(placed) == workers and set(placed) <= servers
    used = Counter(s for placed in doc["placement"].values() for s in placed)
    assert max(used.values()) == 1
    assert set(doc["shifts_ms"]) == set(doc["placement"])
    assert len(doc["candidates"]) == 10
    valid = [c for c in doc["candidates"] if c["discarded"] is None]
    chosen = next(c for c in valid if c["index"] == doc["chosen"])
    assert chosen["value"] == max(c["value"] for c in valid)
    assert doc["score"] == chosen["score"]


def test_cli_schedule_paces_the_two_vggs_of_the_papers_snapshot_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Snapshot 2: VGG19 and VGG16 on 10 GPUs each share a ToR uplink, and take turns on
    one circle; ResNet50 on 4 GPUs (one rack) shares nothing and runs free."""
    code, out, _ = run_cli(capsys, "schedule", "--trace", "snapshot2", "--json")
    assert code == 0
    doc = json.loads(out)
    assert {j: len(s) for j, s in doc["placement"].items()} == {
        "vgg19-0": 10, "vgg16-1": 10, "resnet50-2": 4
    }  # fmt: skip
    periods, ratios = doc["periods_ms"], doc["ratios"]
    assert set(periods) == {"vgg19-0", "vgg16-1"} == set(ratios)
    assert periods["vgg19-0"] == periods["vgg16-1"] and ratios == {"vgg19-0": 1, "vgg16-1": 1}
    period = periods["vgg19-0"]
    vgg19, vgg16 = build_profile("vgg19", 10), build_profile("vgg16", 10)
    assert period >= max(vgg19.iteration_ms, vgg16.iteration_ms)
    # the two AllReduces take turns: one job's shift parks its burst past the other's
    gap = abs(doc["shifts_ms"]["vgg19-0"] - doc["shifts_ms"]["vgg16-1"]) % period
    up19 = vgg19.up_fraction() * vgg19.iteration_ms
    assert up19 - 10.0 <= gap <= period - up19 + 10.0, (gap, up19, period)
    assert doc["score"] > 0.95


def test_cli_schedule_reads_a_trace_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    f = tmp_path / "trace.csv"
    f.write_text("arrival_s,model,workers,iterations\n0,vgg16,3,500\n1,vgg19,3,500\n2,bert,4,300\n")
    code, out, _ = run_cli(capsys, "schedule", "--trace", str(f), "--candidates", "4", "--json")
    assert code == 0
    doc = json.loads(out)
    assert sorted(len(v) for v in doc["placement"].values()) == [3, 3, 4]


def test_cli_compat_free_plan_applies_no_shift(capsys: pytest.CaptureFixture[str]) -> None:
    """XLM and BERT run free: no circle they hold beats running unaligned, and the
    plan shifts nothing. (BERT and VGG19, the README's free pair before each job got
    a circle of its own, are now paced on one 1:1 circle: see the README's Pacing.)

    The old code printed the best rotation (vgg19 by 24.5 ms) next to `plan: free`.
    """
    code, out, _ = run_cli(capsys, "compat", "--jobs", "xlm,bert", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["plan"] == "free"
    assert set(doc["shifts_ms"].values()) == {0.0} and set(doc["rotations_deg"].values()) == {0.0}
    # The score printed beside those zeros is the plan's (running unaligned); the
    # best shift's score goes with the best shifts, which the plan declines.
    assert doc["plan_score"] == doc["free_running_score"] < doc["best_score"]
    assert any(v != 0.0 for v in doc["best_shifts_ms"].values())
    code, out, _ = run_cli(capsys, "compat", "--jobs", "xlm,bert")
    bert = next(line for line in out.splitlines() if line.startswith("bert"))
    assert bert.split()[-2:] == ["0.0", "0.0"]


def test_cli_schedule_refuses_a_job_bigger_than_the_cluster(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """As `simulate` does: such a job can never run, it is not a full cluster.

    The old code said "not placed (cluster full): big" and placed the rest.
    """
    f = tmp_path / "trace.csv"
    f.write_text("arrival_s,model,workers,iterations,name\n0,vgg19,30,100,big\n0,bert,4,100,\n")
    code, out, err = run_cli(capsys, "schedule", "--trace", str(f))
    assert code == 2 and out == ""
    refusal = f"cassini: error: {f}: job big: workers: asks for 30 GPUs, the cluster has 24\n"
    assert err == refusal
    code, _, err = run_cli(capsys, "simulate", "--trace", str(f), "--out", str(tmp_path / "o"))
    assert code == 2 and err == refusal


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["schedule", "--processes", "0"], "argument --processes: must be >= 1, got 0"),
        (["schedule", "--candidates", "-2"], "argument --candidates: must be >= 1, got -2"),
        (["schedule", "--precision-deg", "0"], "argument --precision-deg: must be > 0, got 0"),
        (["schedule", "--seed", "-1"], "argument --seed: must be >= 0, got -1"),
        (["simulate", "--drift", "-1", "--out", "x"], "argument --drift: must be >= 0, got -1"),
        (["simulate", "--jobs", "0", "--out", "x"], "argument --jobs: must be >= 1, got 0"),
        (["simulate", "--load", "nan", "--out", "x"], "argument --load: must be a finite number"),
        (["simulate", "--candidates", "2.5", "--out", "x"], "must be an integer, got '2.5'"),
        (["trace", "generate", "--load", "-0.5", "--out", "x"], "argument --load: must be > 0"),
        (["compat", "--jobs", "bert", "--capacity-gbps", "0"], "argument --capacity-gbps: must"),
        (["compat", "--jobs", "bert", "--workers", "0"], "argument --workers: must be >= 1"),
        (["models", "--nic-gbps", "-50"], "argument --nic-gbps: must be > 0, got -50"),
    ],
)
def test_numeric_flags_are_refused_in_one_line_naming_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The old code accepted --processes 0 and --drift -1 (and crashed or ran on the others)."""
    with pytest.raises(SystemExit) as stop:
        main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "Traceback" not in err
    last = err.splitlines()[-1]
    assert last.startswith(f"cassini {argv[0]}") and message in last


def test_four_jobs_is_one_name_for_one_example(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`four-jobs` means the same 4 jobs in `schedule`, `trace generate` and `simulate`;
    `schedule --trace snapshot` (its old name) still works and says what it became,
    and 'snapshot' everywhere else is the generated trace."""
    from scheduler.workloads.traces import FOUR_JOBS, load_trace

    code, default, _ = run_cli(capsys, "schedule", "--json")
    code2, named, _ = run_cli(capsys, "schedule", "--trace", "four-jobs", "--json")
    code3, old, err = run_cli(capsys, "schedule", "--trace", "snapshot", "--json")
    assert code == code2 == code3 == 0
    placement = json.loads(default)["placement"]
    assert json.loads(named)["placement"] == placement == json.loads(old)["placement"]
    assert "'schedule --trace snapshot' is now '--trace four-jobs'" in err
    f = tmp_path / "four.csv"
    assert main(["trace", "generate", "--kind", "four-jobs", "--out", str(f)]) == 0
    written = {j.name: (j.model, j.workers) for j in load_trace(f)}
    assert sorted(written) == sorted(placement)
    assert sorted(written.values()) == sorted(FOUR_JOBS)
    g = tmp_path / "snap.csv"
    assert main(["trace", "generate", "--kind", "snapshot", "--jobs", "9", "--out", str(g)]) == 0
    assert len(load_trace(g)) == 9


def test_paper_cycle_rule_discards_even_consistent_cycles(testbed_jobs: tuple) -> None:
    topo, jobs = testbed_jobs
    a, b = jobs[0], jobs[5]
    profiles = {a.name: a.profile, b.name: b.profile}
    cycle = {a.name: ("s01", "s02", "s05"), b.name: ("s03", "s06", "s07")}
    apart = {a.name: ("s01", "s02", "s03"), b.name: ("s05", "s06", "s07")}
    router, caps = Router(topo), topo.capacity_gbps()
    kept = choose([cycle, apart], profiles, router, caps)
    assert kept.candidates[0].discarded is None and kept.candidates[0].rule == "consistent-cycle"
    strict = choose([cycle, apart], profiles, router, caps, cycles="paper")
    assert (
        strict.candidates[0].discarded is not None
        and "paper rule" in strict.candidates[0].discarded
    )
    assert strict.best.index == 1
    with pytest.raises(UserInputError, match="cycle rule"):
        choose([cycle], profiles, router, caps, cycles="strict")
