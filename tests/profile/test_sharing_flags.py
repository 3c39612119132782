"""`--sharing FILE` of simulate and emulate: the simulator's shared links offer the measured
fraction; and where a staged results folder's files are recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emulation.cli import build_parser, main
from emulation.cli.emulate_cmds import settings_from
from emulation.emulate.runner import make_plan, moved_path
from topologies.library import load_topology


def _sharing_file(path: Path, two: float, three: float) -> Path:
    rows = [
        {"active": 1, "samples": 40, "utilisation": 0.8, "fairness": 1.0},
        {"active": 2, "samples": 100, "utilisation": two, "fairness": 0.97},
        {"active": 3, "samples": 50, "utilisation": three, "fairness": 0.94},
    ]
    path.write_text(json.dumps({"model": "vgg19", "runs": [{"jobs": 3, "by_active": rows}]}))
    return path


def test_emulate_predicts_shared_links_slower_and_lone_jobs_the_same(tmp_path: Path) -> None:
    sharing = _sharing_file(tmp_path / "sharing.json", 0.8, 0.8)

    def means(extra: list[str]) -> dict[str, float]:
        argv = ["emulate", "--schedulers", "themis", "--out", "x", *extra]
        settings = settings_from(build_parser().parse_args(argv))
        plan = make_plan(settings, load_topology(settings.topology))
        return dict(plan.of("themis").sim_job_mean_ms)

    ideal, shared = means([]), means(["--sharing", str(sharing)])
    assert ideal.keys() == shared.keys()
    slower = {j: shared[j] / ideal[j] for j in ideal}
    # the default run: three jobs share links under Themis, one (bert) has its own
    assert max(slower.values()) > 1.02
    assert min(slower.values()) == pytest.approx(1.0, abs=1e-9)


def test_simulate_records_the_model_and_refuses_a_bad_file_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sharing = _sharing_file(tmp_path / "sharing.json", 0.9, 0.85)
    out = tmp_path / "run"
    argv = ["simulate", "--trace", "four-jobs", "--schedulers", "themis", "--out", str(out),
            "--json", "--sharing", str(sharing)]  # fmt: skip
    assert main(argv) == 0
    meta = json.loads((out / "summary.json").read_text())
    assert meta["settings"]["sharing"]["factors"] == {"2": 0.9, "3": 0.85}
    capsys.readouterr()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"runs": [{"by_active": [{"active": 2}]}]}))
    argv[argv.index(str(sharing))] = str(bad)
    assert main([*argv, "--force"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(bad) in err and "samples" in err


def test_a_staged_file_is_recorded_at_its_final_path() -> None:
    stage, final = Path("res/.demo.partial-12-ab"), Path("res/demo")
    assert moved_path(str(stage / "profiles.json"), stage, final) == "res/demo/profiles.json"
    assert moved_path("elsewhere/profiles.json", stage, final) == "elsewhere/profiles.json"
    assert moved_path(None, stage, final) is None
