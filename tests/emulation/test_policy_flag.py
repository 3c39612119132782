"""`--policy` on `cassini emulate` and `cassini fabric run` (issue 30): mltcp with
--transport roce reaches the run settings and every replica (MLTCP on, no shift, no
period); mltcp with tcp, a policy the fabric cannot run, or a misspelt one is one line;
the simulator refuses mltcp in one line."""

from __future__ import annotations

import pytest

from emulation.cli import build_parser, main
from emulation.cli.emulate_cmds import settings_from
from emulation.cli.fabric_run_cmds import fabric_policy
from emulation.emulate.runner import run_settings
from emulation.jobs.launch import JobPlan, replica_specs
from emulation.jobs.replica import parse_args
from emulation.jobs.run_settings import RunSettings
from emulation.jobs.supervisor import with_policy
from scheduler.policies import POLICIES, make_policy
from scheduler.workloads.types import Phase, Profile
from topologies.errors import UserInputError

EMULATE = ["emulate", "--out", "unused"]
FABRIC_RUN = ["fabric", "run", "--schedule", "unused.json", "--out", "unused"]


def test_emulate_passes_mltcp_to_the_replicas_run_settings() -> None:
    parser = build_parser()
    assert run_settings(settings_from(parser.parse_args(EMULATE))).policy == "none"
    args = parser.parse_args([*EMULATE, "--transport", "roce", "--policy", "mltcp"])
    assert run_settings(settings_from(args)).policy == "mltcp"
    assert "mltcp" in POLICIES


def test_mltcp_replicas_run_mltcp_unpaced_and_others_keep_their_shifts() -> None:
    profile = Profile("p", "p", "data", 2, 10.0, (Phase(5.0, 0.0), Phase(5.0, 20.0)))
    jobs = [JobPlan("p-0", "p", ("s01", "s02"), profile, shift_ms=3.0, period_ms=12.0)]
    addresses = {"s01": "10.0.0.1", "s02": "10.0.0.2"}
    placed = replica_specs(jobs, addresses, "run", 1, 0.001, transport="roce")
    assert with_policy(placed, "none") == placed
    for p in with_policy(placed, "mltcp"):
        assert (p.spec.mltcp, p.spec.shift_ms, p.spec.period_ms) == (True, 0.0, None)
        argv = p.spec.argv()
        assert "--mltcp" in argv and "--period-ms" not in argv
        assert parse_args(argv[3:]).mltcp  # past "python -m MODULE"
    plain = parse_args(placed[0].spec.argv()[3:])
    assert not plain.mltcp and plain.period_ms == 12.0 and plain.shift_ms == 3.0
    with pytest.raises(UserInputError, match="--mltcp needs --transport roce"):
        parse_args([*placed[0].spec.argv()[3:-4], "--transport", "tcp", "--mltcp"])


def test_run_settings_refuse_mltcp_without_roce_and_unknown_policies() -> None:
    assert RunSettings(transport="roce", policy="mltcp").policy == "mltcp"
    with pytest.raises(ValueError, match="policy mltcp needs transport roce, not 'tcp'"):
        RunSettings(policy="mltcp")
    with pytest.raises(ValueError, match="policy 'echelon-rate': one of none, mltcp"):
        RunSettings(policy="echelon-rate")


@pytest.mark.parametrize("command", [EMULATE, FABRIC_RUN], ids=["emulate", "fabric-run"])
@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--policy", "mltcp"], "--policy mltcp runs in RoCE's DCQCN: add --transport roce"),
        (["--policy", "crux", "--transport", "roce"], "--policy crux sets a queue class per"),
        (["--policy", "echelon-rate"], "--policy echelon-rate sets host rates, which neither"),
        (["--policy", "mltpc"], "--policy: no policy named 'mltpc'. Did you mean 'mltcp'?"),
    ],
)
def test_a_policy_the_fabric_cannot_run_is_one_line(
    command: list[str], flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if command is FABRIC_RUN:  # checked once the schedule is read: the check itself
        with pytest.raises(UserInputError, match=message.replace("?", r"\?")):
            fabric_policy(flags[1], flags[3] if len(flags) > 2 else "tcp")
        return
    code = main([*command, *flags])
    err = capsys.readouterr().err
    assert code != 0
    errors = [line for line in err.splitlines() if "error" in line]
    assert len(errors) == 1 and message in errors[0]
    assert "Traceback" not in err


def test_the_simulator_refuses_mltcp_in_one_line() -> None:
    with pytest.raises(UserInputError, match="policy mltcp lives in the hosts' RoCE"):
        make_policy("mltcp").plan(None)  # type: ignore[arg-type]
