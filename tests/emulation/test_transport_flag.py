"""`--transport` on `cassini emulate` and `cassini fabric run`: tcp by default, roce
reaches the replicas' run settings, and a bad value is one line naming the flag."""

from __future__ import annotations

import pytest

from emulation.cli import build_parser, main
from emulation.cli.emulate_cmds import settings_from
from emulation.emulate.runner import run_settings
from emulation.jobs.launch import JobPlan, replica_specs
from emulation.jobs.run_settings import RunSettings
from scheduler.workloads.types import Phase, Profile

EMULATE = ["emulate", "--out", "unused"]
FABRIC_RUN = ["fabric", "run", "--schedule", "unused.json", "--out", "unused"]


def test_emulate_passes_the_transport_to_the_replicas_run_settings() -> None:
    parser = build_parser()
    assert run_settings(settings_from(parser.parse_args(EMULATE))).transport == "tcp"
    roce = settings_from(parser.parse_args([*EMULATE, "--transport", "roce"]))
    assert roce.transport == "roce" and run_settings(roce).transport == "roce"
    assert parser.parse_args([*FABRIC_RUN, "--transport", "roce"]).transport == "roce"


def test_every_replica_of_a_roce_run_is_told_its_transport_and_pfc_class() -> None:
    profile = Profile("p", "p", "data", 2, 10.0, (Phase(10.0, 0.0),))
    jobs = [JobPlan("p-0", "p", ("s01", "s02"), profile)]
    addresses = {"s01": "10.0.0.1", "s02": "10.0.0.2"}
    placed = replica_specs(jobs, addresses, "run", 1, 0.001, transport="roce", pfc_priority=5)
    for p in placed:
        argv = p.spec.argv()
        assert argv[argv.index("--transport") + 1] == "roce"
        assert argv[argv.index("--pfc-priority") + 1] == "5"
    with pytest.raises(ValueError, match="transport 'rdma': one of tcp, roce"):
        RunSettings(transport="rdma")


@pytest.mark.parametrize("command", [EMULATE, FABRIC_RUN], ids=["emulate", "fabric-run"])
def test_a_bad_transport_is_one_line_naming_the_flag(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main([*command, "--transport", "rdma"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    prog = "cassini fabric run" if command[0] == "fabric" else "cassini emulate"
    errors = [line for line in err.splitlines() if "error" in line]
    assert errors == [f"{prog}: error: argument --transport: 'rdma' is not one of tcp, roce"]
    assert "Traceback" not in err
