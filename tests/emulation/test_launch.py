"""A schedule becomes replica specs: the scheduler's own values as they are, what
`cassini schedule --json` prints as it is, and every bad field of a file is refused
with the file, field and job named."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from emulation.jobs.launch import (
    BASE_PORT,
    JobPlan,
    parse_schedule,
    plan_jobs,
    read_schedule,
    replica_specs,
)
from emulation.jobs.replica import parse_args
from scheduler.cassini.schedule import schedule_trace
from scheduler.simulator.decisions import Decision
from scheduler.workloads.profiles import build_profile
from scheduler.workloads.traces import four_jobs_trace
from scheduler.workloads.types import Profile
from topologies.errors import UserInputError
from topologies.library import load_topology

TOPO = load_topology("cassini-testbed")


def plan(
    doc: dict[str, object], profiles: dict[str, Profile] | None = None, where: str = "schedule"
) -> tuple[JobPlan, ...]:
    """A schedule file's object planned as `cassini fabric run` plans it."""
    return plan_jobs(parse_schedule(doc, where), TOPO, profiles, where=where)


def test_cassini_schedule_json_is_planned_as_it_is(tmp_path: Path) -> None:
    result = schedule_trace(four_jobs_trace(), TOPO, "four-jobs", candidates=3)
    path = tmp_path / "schedule.json"
    path.write_text(json.dumps(result.to_json(1.0)))
    doc = read_schedule(path)
    jobs = plan(doc, where=str(path))
    assert [j.name for j in jobs] == list(doc["placement"])
    for job in jobs:
        assert job.model == job.name.rsplit("-", 1)[0]
        assert list(job.servers) == doc["placement"][job.name]
        assert job.shift_ms == pytest.approx(doc["shifts_ms"].get(job.name, 0.0))
        assert job.period_ms == doc["periods_ms"].get(job.name)
        assert job.profile == build_profile(job.model, job.workers, nic_gbps=TOPO.nic_gbps())


def test_a_trace_whose_job_names_are_not_models_round_trips_through_schedule_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `schedule --trace FILE --json` once wrote no models: a job named `my-resnet` could
    # not be fed back to `fabric run --schedule`.
    from emulation.cli import main

    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,model,workers,iterations,name\n0,resnet50,4,100,my-resnet\n"
                     "0,vgg16,4,100,the.other_one\n")  # fmt: skip
    assert main(["schedule", "--trace", str(trace), "--json", "--candidates", "2"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["models"] == {"my-resnet": "resnet50", "the.other_one": "vgg16"}
    jobs = plan(doc, where="schedule.json")
    assert {j.name: j.model for j in jobs} == doc["models"]


@pytest.mark.parametrize(
    ("placement", "message"),
    [
        ({"../../../tmp/x/escaped": ["s01"]}, r"s.json: field 'placement': job name '../../"),
        ({"a/b": ["s01"]}, r"job name 'a/b' is not a safe name"),
    ],
)
def test_a_job_or_server_name_that_is_not_a_safe_name_is_refused_before_a_fabric(
    placement: dict[str, list[str]], message: str
) -> None:
    with pytest.raises(UserInputError, match=message):
        parse_schedule({"placement": placement, "models": {k: "vgg16" for k in placement}}, "s.json")


def test_a_hand_written_file_with_models_and_no_shifts() -> None:
    doc = {"placement": {"mine": ["s01", "s05"]}, "models": {"mine": "resnet50"}}
    (job,) = plan(doc)
    assert (job.model, job.shift_ms, job.period_ms) == ("resnet50", 0.0, None)
    assert job.profile.phases == build_profile("resnet50", 2).phases


def test_a_schedulers_decision_is_planned_with_its_own_values() -> None:
    # No file in between: shifts and periods arrive unrounded, models by name.
    decision = Decision(
        12.0, "arrival", {"mine": ("s01", "s05"), "other": ("s02", "s06")},
        {"mine": "resnet50", "other": "vgg19", "gone": "vgg16"},
        {"mine": 12.3456789, "gone": 1.0}, {"mine": 98.7654321}, True,
    )  # fmt: skip
    mine, other = plan_jobs(decision.as_schedule(), TOPO)
    assert (mine.model, mine.shift_ms, mine.period_ms) == ("resnet50", 12.3456789, 98.7654321)
    assert (other.model, other.shift_ms, other.period_ms) == ("vgg19", 0.0, None)


def test_a_jobs_file_profile_wins_over_the_model() -> None:
    own = replace(build_profile("vgg19", 2), name="vgg19-0", iteration_ms=99.0)
    (job,) = plan({"placement": {"vgg19-0": ["s01", "s02"]}}, {"vgg19-0": own})
    assert job.profile is own
    with pytest.raises(UserInputError, match="placed on 3 servers but its profile 'vgg19-0'"):
        plan({"placement": {"vgg19-0": ["s01", "s02", "s03"]}}, {"vgg19-0": own})


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({}, "f.json: field 'placement' must be a non-empty object"),
        ({"placement": {"vgg19-0": "s01"}}, "field 'placement' of job 'vgg19-0' must be a non"),
        (
            {"placement": {"vgg19-0": ["s01", "s99"]}},
            "f.json: field 'placement' of job 'vgg19-0': server 's99' is not in topology "
            "'cassini-testbed'",
        ),
        (
            {"placement": {"nosuchmodel-0": ["s01"]}},
            "f.json: job 'nosuchmodel-0' has no profile: model 'nosuchmodel' (from its name)",
        ),
        (
            {"placement": {"a": ["s01"]}, "models": {"a": "vgg91"}},
            "job 'a' has no profile: model 'vgg91' (from its 'models' entry)",
        ),
        (
            {"placement": {"vgg19-0": ["s01"]}, "shifts_ms": {"vgg19-1": 3}},
            "field 'shifts_ms' names job 'vgg19-1', which 'placement' does not place",
        ),
        (
            {"placement": {"vgg19-0": ["s01"]}, "shifts_ms": {"vgg19-0": "soon"}},
            "field 'shifts_ms' of job 'vgg19-0': 'soon' is not a number >= 0",
        ),
        (
            {"placement": {"vgg19-0": ["s01"]}, "periods_ms": {"vgg19-0": 0}},
            "field 'periods_ms' of job 'vgg19-0': 0 is not a number > 0",
        ),
    ],
)
def test_bad_fields_are_named(doc: dict[str, object], message: str) -> None:
    with pytest.raises(UserInputError) as err:
        plan(doc, where="f.json")
    assert message in str(err.value)


def test_an_unknown_server_gets_the_closest_names() -> None:
    with pytest.raises(UserInputError, match="s09"):
        plan({"placement": {"vgg19-0": ["s0 9"]}})
    # Server names are the topology's (checked when it is read): any other is unknown.
    with pytest.raises(UserInputError, match="no server named '../s02'"):
        plan({"placement": {"vgg19-0": ["s01", "../s02"]}})


def test_unreadable_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match=r"nope.json: no such schedule file"):
        read_schedule(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{placement: 1")
    with pytest.raises(UserInputError, match=r"bad.json:1:2: invalid JSON: .*cassini schedule"):
        read_schedule(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(UserInputError, match="expected a JSON object"):
        read_schedule(bad)


def test_a_schedule_file_goes_through_the_capped_reader(tmp_path: Path) -> None:
    """`fabric run --schedule /dev/zero` read without end (23.5 GB in 8 s); a deeply
    nested file was a RecursionError; a UTF-16 one a UnicodeDecodeError."""
    from topologies.datafile import MAX_FILE_BYTES

    huge = tmp_path / "huge.json"
    with huge.open("wb") as fh:  # sparse: no disk used
        fh.truncate(MAX_FILE_BYTES + 1)
    cases = {
        huge: "larger than 64 MiB",
        tmp_path / "deep.json": "nested too deeply",
        tmp_path / "utf16.json": "UTF-16 text",
    }
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "utf16.json").write_bytes('{"placement": {}}'.encode("utf-16"))
    for path, says in cases.items():
        with pytest.raises(UserInputError) as err:
            read_schedule(path)
        message = str(err.value)
        assert str(path) in message and says in message and "\n" not in message


def test_specs_give_every_worker_its_own_port_and_the_job_one_ring() -> None:
    doc = {
        "placement": {"vgg19-0": ["s01", "s02", "s05", "s06"], "vgg19-1": ["s03", "s04", "s01"]},
        "shifts_ms": {"vgg19-1": 126.5},
        "periods_ms": {"vgg19-0": 253.0, "vgg19-1": 253.0},
    }
    jobs = plan(doc)
    ips = {s.name: s.ip for s in TOPO.servers}
    placed = replica_specs(jobs, ips, "out", 40, 0.001, epoch_ms=5000.0, deadline_ms=9e12)
    assert [p.server for p in placed] == doc["placement"]["vgg19-0"] + doc["placement"]["vgg19-1"]
    ports = [p.spec.peers[p.spec.worker].port for p in placed]
    assert ports == list(range(BASE_PORT, BASE_PORT + 7))
    for p in placed:
        assert str(p.spec.peers[p.spec.worker]).startswith(ips[p.server] + ":")
        assert p.spec.peers == next(q.spec.peers for q in placed if q.spec.job == p.spec.job)
        assert (p.spec.epoch_ms, p.spec.deadline_ms, p.spec.iterations) == (5000.0, 9e12, 40)
        assert parse_args(p.spec.argv()[3:]) == p.spec
    second = [p.spec for p in placed if p.spec.job == "vgg19-1"]
    assert {s.shift_ms for s in second} == {126.5} and {s.period_ms for s in second} == {253.0}
    assert second[2].out == str(Path("out") / "vgg19-1-w2.jsonl")
    assert {p.spec.parallelism for p in placed} == {"data"} and placed[0].spec.nic_gbps == 50.0
    pipeline = plan({"placement": {"gpt2-0": ["s01", "s02", "s03", "s04"]}})
    (first, *_) = replica_specs(pipeline, ips, "out", 1, 0.001, nic_gbps=None)
    assert (first.spec.parallelism, first.spec.nic_gbps) == ("pipeline", None)
    with pytest.raises(UserInputError, match="no host for server"):
        replica_specs(jobs, {"s01": "10.0.0.1"}, "out", 1, 0.001)


@pytest.mark.parametrize("value", [float("inf"), float("nan"), 1e300, -1.0, True, "5"])
def test_a_shift_that_is_not_a_finite_bounded_number_is_refused(value: object) -> None:
    doc = {"placement": {"j": ["s01"]}, "models": {"j": "vgg16"}, "shifts_ms": {"j": value}}
    with pytest.raises(UserInputError, match=r"s.json: field 'shifts_ms' of job 'j': .* at most"):
        parse_schedule(doc, "s.json")
