"""Traces: generators, file round trips, and errors that name line and field."""

from __future__ import annotations

import json

import numpy as np
import pytest

from scheduler.workloads.profiles import model_names
from scheduler.workloads.traces import (
    dynamic_trace,
    load_trace,
    poisson_trace,
    snapshot_trace,
    write_trace,
)
from topologies.errors import UserInputError


def test_poisson_trace_fields_and_determinism() -> None:
    a = poisson_trace(200, 24, load=0.9, seed=3)
    b = poisson_trace(200, 24, load=0.9, seed=3)
    c = poisson_trace(200, 24, load=0.9, seed=4)
    assert a == b and a != c
    assert all(1 <= j.workers <= 12 for j in a)
    assert all(200 <= j.iterations <= 1000 for j in a)
    assert {j.model for j in a} <= set(model_names())
    assert len({j.model for j in a}) == 13  # all 13 models show up in 200 draws
    arrivals = np.array([j.arrival_s for j in a])
    assert arrivals[0] == 0.0 and np.all(np.diff(arrivals) >= 0)


def test_poisson_load_sets_arrival_rate() -> None:
    light = poisson_trace(300, 24, load=0.5, seed=1)
    heavy = poisson_trace(300, 24, load=1.0, seed=1)
    # same jobs, gaps scale with 1/load
    assert light[-1].arrival_s == pytest.approx(2 * heavy[-1].arrival_s, rel=1e-6)


def test_snapshot_and_dynamic() -> None:
    snap = snapshot_trace(10, 24, seed=0)
    assert all(j.arrival_s == 0.0 for j in snap)
    dyn = dynamic_trace(24, seed=0)
    late = [j for j in dyn if j.arrival_s > 0]
    assert sorted(j.model for j in late) == ["dlrm", "resnet50"]
    # busy: the background takes every GPU the newcomers will not
    for gpus in (24, 48):
        busy = dynamic_trace(gpus, seed=0)
        assert sum(j.workers for j in busy) == gpus
        assert all(j.iterations >= 900 for j in busy if j.arrival_s == 0)


def test_dynamic_with_chosen_background() -> None:
    dyn = dynamic_trace(24, seed=3, background_models=["ResNet-50", "gpt_2", "vgg19"])
    background = [j for j in dyn if j.arrival_s == 0]
    assert [j.model for j in background] == ["resnet50", "gpt2", "vgg19"]
    assert all(j.workers == 6 for j in background)
    with pytest.raises(UserInputError, match="background model named 'resnet5'.*resnet50"):
        dynamic_trace(24, seed=3, background_models=["resnet5"])


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_round_trip(tmp_path, suffix: str) -> None:
    jobs = poisson_trace(20, 24, seed=2)
    path = write_trace(jobs, tmp_path / f"t{suffix}")
    assert load_trace(path) == tuple(sorted(jobs, key=lambda j: (j.arrival_s, j.name)))


def test_csv_error_names_line_and_field(tmp_path) -> None:
    path = tmp_path / "trace.csv"
    path.write_text("arrival_s,model,workers,iterations\n0,vgg16,4,500\n1.5,bert,x,300\n")
    with pytest.raises(
        UserInputError, match=r"trace.csv:3: workers: expected a positive integer up to 100000, got 'x'"
    ):
        load_trace(path)


def test_csv_unknown_model_suggests(tmp_path) -> None:
    path = tmp_path / "trace.csv"
    path.write_text("arrival_s,model,workers,iterations\n0,resnt50,4,500\n")
    with pytest.raises(UserInputError, match=r"trace.csv:2: model: .*Did you mean 'resnet50'"):
        load_trace(path)


def test_csv_unknown_column_and_negative(tmp_path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,model,wokers,iterations\n")
    with pytest.raises(UserInputError, match=r"t.csv:1: .*'workers'"):
        load_trace(path)
    path.write_text("arrival_s,model,workers,iterations\n-1,vgg16,2,5\n")
    with pytest.raises(UserInputError, match=r"t.csv:2: arrival_s"):
        load_trace(path)


def test_json_errors(tmp_path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"jobs": [{"arrival_s": 0, "model": "bert", "workers": 2}]}))
    with pytest.raises(UserInputError, match=r"jobs\[0\]: missing field 'iterations'"):
        load_trace(path)
    path.write_text(json.dumps([{"arrival_s": 0, "model": "bert", "workers": 0, "iterations": 3}]))
    with pytest.raises(UserInputError, match=r"jobs\[0\]: workers"):
        load_trace(path)


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("../../../../../tmp/x/escaped", "'../../../../../tmp/x/escaped'"),
        ("a/b", "'a/b'"),
        ("two words", "'two words'"),
        ("..", "'..'"),
        ("-rf", "'-rf'"),
        ("x" * 65, "'xxxx"),
    ],
)
def test_a_job_name_that_is_not_a_safe_path_component_is_refused_with_file_row_field(
    tmp_path, name, shown
) -> None:
    path = tmp_path / "trace.csv"
    path.write_text(f"arrival_s,model,workers,iterations,name\n0,vgg16,2,10,ok-1\n0,vgg16,2,10,{name}\n")
    with pytest.raises(UserInputError, match=r"trace.csv:3: name: job name ") as err:
        load_trace(path)
    assert shown in str(err.value) and "not a safe name" in str(err.value)
    js = tmp_path / "trace.json"
    js.write_text(json.dumps([{"arrival_s": 0, "model": "vgg16", "workers": 2, "iterations": 1, "name": name}]))
    with pytest.raises(UserInputError, match=r"trace.json: jobs\[0\]: name: job name "):
        load_trace(js)


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("arrival_s", "inf"),
        ("arrival_s", "1e300"),
        ("arrival_s", "nan"),
        ("iterations", "9200000000000000000"),
        ("batch_size", "100000000000000"),
        ("workers", "9" * 4300),
    ],
)
def test_numbers_past_their_bound_are_refused_before_anything_runs(tmp_path, column, value) -> None:
    row = {"arrival_s": "0", "model": "vgg16", "workers": "2", "iterations": "10", "batch_size": "32"}
    row[column] = value
    path = tmp_path / "trace.csv"
    path.write_text(",".join(row) + "\n" + ",".join(row.values()) + "\n")
    with pytest.raises(UserInputError, match=rf"trace.csv:2: {column}: expected .* up to ") as err:
        load_trace(path)
    assert len(str(err.value)) < 200  # a 4,300-digit number is not repeated whole


def test_a_byte_order_mark_is_read_and_a_duplicated_column_is_refused(tmp_path) -> None:
    path = tmp_path / "trace.csv"
    path.write_bytes(b"\xef\xbb\xbfarrival_s,model,workers,iterations\n0,vgg16,2,10\n")
    assert [j.model for j in load_trace(path)] == ["vgg16"]
    path.write_text("arrival_s,model,workers,iterations,workers\n0,vgg16,2,10,4\n")
    with pytest.raises(UserInputError, match=r"trace.csv:1: column 'workers' appears twice"):
        load_trace(path)


def test_files_that_are_not_text_traces_are_one_line_each(tmp_path) -> None:
    with pytest.raises(UserInputError, match=r"is a folder, not a trace file"):
        load_trace(tmp_path)
    binary = tmp_path / "b.csv"
    binary.write_bytes(b"arrival_s\0\x01\x02")
    with pytest.raises(UserInputError, match=r"b.csv: a binary file"):
        load_trace(binary)
    latin = tmp_path / "l.csv"
    latin.write_bytes("arrival_s,model,workers,iterations,name\n0,vgg16,2,10,caf\xe9\n".encode("latin-1"))
    with pytest.raises(UserInputError, match=r"l.csv:2: not UTF-8 text"):
        load_trace(latin)
    with pytest.raises(UserInputError, match=r"no such trace file"):
        load_trace(tmp_path / "missing.csv")


def test_line_ends_of_any_kind_are_read_and_a_cr_inside_a_field_is_one_line(tmp_path) -> None:
    """A lone CR (old Mac line ends) ended the csv module with its own exception."""
    cr = tmp_path / "cr.csv"
    cr.write_bytes(b"arrival_s,model,workers,iterations\r0,vgg19,2,10\r5,resnet50,4,10\r")
    jobs = load_trace(cr, model_names())
    assert [(j.model, j.workers) for j in jobs] == [("vgg19", 2), ("resnet50", 4)]
    bad = tmp_path / "bad.csv"  # a field past the csv module's limit (131,072 characters)
    bad.write_bytes(b"arrival_s,model,workers,iterations\n0,\"" + b"v" * 200_000 + b"\",2,10\n")
    with pytest.raises(UserInputError, match=r"bad\.csv:2: not CSV: field larger"):
        load_trace(bad, model_names())


def test_a_deeply_nested_json_trace_is_one_line(tmp_path) -> None:
    """It was a RecursionError traceback."""
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(UserInputError, match=r"deep.json: nested too deeply") as err:
        load_trace(deep)
    assert "\n" not in str(err.value)
    bad = tmp_path / "bad.json"
    bad.write_text('{"jobs": [}')
    with pytest.raises(UserInputError, match=r"^bad.json:1:11: invalid JSON"):
        load_trace(bad)
