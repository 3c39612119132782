"""Compile the programs with the real P4 compilers when they are installed and compare
their P4Info with p4src/cassini.p4info.txtpb (names, ids, widths, scopes)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from controlplane.p4info import ID_PREFIXES, P4InfoIndex, load_p4info

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.needs_tool


def _summary(index: P4InfoIndex) -> dict:
    """Everything the control plane relies on, keyed by name."""
    return {
        "tables": {
            t.name: (
                t.id,
                [(m.id, m.name, m.bitwidth, m.match_type) for m in t.match_fields],
                sorted(
                    (index.action_by_id(a).name, a in t.default_only_action_ids)
                    for a in t.action_ids
                ),
                index.action_by_id(t.const_default_action_id).name
                if t.const_default_action_id
                else None,
                t.size,
            )
            for t in index.tables
        },
        "actions": {
            a.name: (a.id, [(p.id, p.name, p.bitwidth) for p in a.params]) for a in index.actions
        },
        "counters": {c.name: (c.id, c.unit, c.size) for c in index.counters},
        **_every_other_kind(index),
    }


def _every_other_kind(index: P4InfoIndex) -> dict:
    """Every other object kind the P4Info can hold (registers, digests, value sets,
    meters, ...), by name: its id and its spec without documentation. Comparing
    only tables, actions and counters once let a register id of the wrong kind by."""
    from google.protobuf import text_format

    summary: dict = {}
    for kind in ID_PREFIXES:
        if kind in ("tables", "actions", "counters"):
            continue
        objects = {}
        for obj in getattr(index.p4info, kind):
            copy = type(obj)()
            copy.CopyFrom(obj)
            copy.preamble.ClearField("doc")
            copy.preamble.ClearField("annotations")
            objects[obj.preamble.name] = text_format.MessageToString(copy, as_one_line=True)
        summary[kind] = objects
    return summary


def _build(target: str, out: Path) -> None:
    """Compile with the project's own build script, the one recipe users run too."""
    cmd = ["bash", str(ROOT / "scripts" / "build_p4.sh"), target]
    result = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "P4_OUT": str(out)},
    )
    assert result.returncode == 0, f"{' '.join(cmd)} failed:\n{result.stdout}\n{result.stderr}"


@pytest.mark.skipif(shutil.which("p4c") is None, reason="p4c is not installed on this machine")
def test_p4c_v1model_p4info_matches_ours(tmp_path):
    _build("bmv2", tmp_path)
    assert (tmp_path / "bmv2" / "cassini.json").exists()
    compiled = load_p4info(tmp_path / "bmv2" / "cassini.p4info.txtpb")
    assert _summary(compiled) == _summary(load_p4info())


@pytest.mark.skipif(shutil.which("bf-p4c") is None, reason="bf-p4c (Tofino SDE) is not installed")
def test_bf_p4c_tna_p4info_matches_ours(tmp_path):
    _build("tofino", tmp_path)
    compiled = load_p4info(tmp_path / "tofino" / "cassini_tna.p4info.txtpb")
    assert _summary(compiled) == _summary(load_p4info())
