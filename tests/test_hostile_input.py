"""Every reader of a user's file, fed malformed input: one clear line or a value, never a
traceback (issue: 65 of 470 command-line probes ended in a Python traceback).

The property: for any bytes, and for any JSON/YAML document of any shape, each
reader either returns or raises `UserInputError` whose message is one line of
bounded length naming the file. The CLI prints a `UserInputError` as that line
and exits 2 (`emulation.cli.main`); the probes below check that end to end.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controlplane.settings import load_settings
from emulation.cli import main
from emulation.jobs.launch import parse_schedule, read_schedule
from emulation.softswitch.tm_config import load_tm_config
from scheduler.sweep.config import load_sweep_config
from scheduler.workloads.profile_files import load_profiles_file
from scheduler.workloads.profiles import load_models
from scheduler.workloads.sharing_model import load_sharing_model
from scheduler.workloads.traces import load_trace
from topologies.errors import UserInputError
from topologies.io import load_topology_file


def _schedule(path: Path) -> object:
    return parse_schedule(read_schedule(path), str(path))


# reader, file name, what the file holds
READERS: list[tuple[Callable[[Path], object], str]] = [
    (load_trace, "trace.csv"),
    (load_trace, "trace.json"),
    (load_topology_file, "topo.json"),
    (load_topology_file, "topo.yaml"),
    (load_models, "models.yaml"),
    (load_profiles_file, "profiles.json"),
    (load_settings, "settings.yaml"),
    (load_tm_config, "tm.yaml"),
    (_schedule, "schedule.json"),
    (load_sweep_config, "sweep.yaml"),
    (load_sharing_model, "sharing.json"),
]
IDS = [f"{reader.__name__}-{name}" for reader, name in READERS]

# Values a hostile file holds: every JSON kind, huge and non-finite numbers,
# path-like and long strings, nested a little.
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["", "../../x", "a/b", "vgg16", "s01", "tor1", "x" * 300, "1.7", "nan"]),
    st.text(max_size=20),
)
DOCUMENTS = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.sampled_from(
                [
                    "name",
                    "servers",
                    "switches",
                    "links",
                    "models",
                    "jobs",
                    "placement",
                    "shifts_ms",
                    "models",
                    "seeds",
                    "ports",
                    "pfc",
                    "wred",
                    "phases",
                    "a",
                    "b",
                    "gbps",
                    "arrival_s",
                    "model",
                    "workers",
                    "iterations",
                    "loopback_cables",
                    "structures",
                    "parallelism",
                    "compute_ms",
                    "params_m",
                    "batch_size",
                    "runs",
                    "by_active",
                    "active",
                    "samples",
                    "utilisation",
                    "fairness",
                ]
            ),  # fmt: skip
            inner,
            max_size=5,
        ),
    ),
    max_leaves=12,
)


def _one_line(err: UserInputError, path: Path) -> None:
    message = str(err)
    assert "\n" not in message, message
    assert len(message) < len(str(path)) + 600, message[:200]


def _read(reader: Callable[[Path], object], path: Path) -> None:
    try:
        reader(path)
    except UserInputError as err:
        _one_line(err, path)


@pytest.mark.parametrize(("reader", "name"), READERS, ids=IDS)
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.binary(max_size=400))
def test_any_bytes_are_read_or_refused_in_one_line(
    tmp_path: Path, reader: Callable[[Path], object], name: str, data: bytes
) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    _read(reader, path)


@pytest.mark.parametrize(("reader", "name"), READERS, ids=IDS)
@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(doc=DOCUMENTS)
def test_any_document_is_read_or_refused_in_one_line(
    tmp_path: Path, reader: Callable[[Path], object], name: str, doc: Any
) -> None:
    path = tmp_path / name
    if name.endswith(".csv"):
        rows = doc if isinstance(doc, list) else [doc]
        path.write_text("\n".join(",".join(str(c) for c in (r if isinstance(r, list) else [r]))
                                  for r in rows))  # fmt: skip
    elif name.endswith(".json"):
        path.write_text(json.dumps(doc))
    else:
        path.write_text(yaml.safe_dump(doc))
    _read(reader, path)


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["program", "--dry-run", "--election-id", "99999999999999999999999,1"], "--election-id"),
        (["program", "--dry-run", "--device-id", "-1"], "--device-id"),
        (["program", "--dry-run", "--timeout", "-3"], "--timeout"),
        (["program", "--dry-run", "--timeout", "nan"], "--timeout"),
        (["switch", "serve", "--device-id", "-1"], "--device-id"),
        (["ecn", "watch", "--interval", "99999999999999999s"], "--interval"),
        (["compat", "--jobs", "vgg16,resnet50", "--precision-deg", "0.0001"], "precision"),
        (["simulate", "--trace", "/", "--out", "OUT"], "/"),
        (["trace", "generate", "--jobs", "99999999999", "--out", "OUT"], "--jobs"),
        (["schedule", "--candidates", "999999999"], "--candidates"),
        (["compat", "--jobs", "vgg16:99999999"], "workers must be in"),
        (["sweep", "-c", "x.yaml", "-o", "OUT", "--workers", "0"], "--workers"),
        (["topo", "show", "-t", "leaf-spine:99999:99999:99999"], "links, more than"),
        (["topo", "show", "-t", "fat-tree:1000"], "links, more than"),
    ],
)
def test_bad_flags_are_one_line_naming_the_flag(
    argv: list[str], flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [str(tmp_path / "o") if a == "OUT" else a for a in argv]
    try:
        code = main(argv)
    except SystemExit as stop:  # argparse refuses a value itself: usage, then one line
        code = stop.code
    assert code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert flag in err.strip().splitlines()[-1]
    assert not (tmp_path / "o").exists()
