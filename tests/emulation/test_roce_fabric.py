"""RoCE replicas on the emulated fabric (`--transport roce`): a 2:1 incast of two
2-worker ring jobs into one server moves every byte, the switch's WRED marks the
incast's packets CE, the receivers answer with CNPs and the senders cut their rates.
Host counts never exceed the switch's: every CE-marked data packet a host counts
was marked by the switch (which also marks ACKs and CNPs, which no host counts), and
a receiver sends at most one CNP per marked packet per 4 us CNP interval, timed
by the kernel's arrival stamps. A packet takes 177 us on the wire at S = 0.001, so
the interval coalesces only packets sent back to back (the pacer's catch-up after a
late wake-up): 2506 CNPs for 2518 marks in one run."""

from __future__ import annotations

from pathlib import Path

import pytest

from emulation.fabric.emulated import EmulatedFabric
from emulation.fabric.options import FabricOptions
from emulation.jobs.launch import JobPlan
from emulation.jobs.patterns import phase_plan, ring_steps
from emulation.jobs.ring_plan import phase_bytes
from emulation.jobs.roce_links import ROCE_PAYLOAD_SHARE
from emulation.jobs.run_settings import RunSettings
from emulation.jobs.supervisor import run_schedule
from scheduler.workloads.types import Phase, Profile
from tests.helpers.leftovers import leftovers
from topologies.library import load_topology

TOPOLOGY = "leaf-spine:1:1:3"  # the smallest with a 2:1 incast: three servers, one leaf
SCALE = 0.001
PHASES = (Phase(20.0, 0.0), Phase(60.0, 50.0))
ITERATIONS = 4


def incast_jobs() -> list[JobPlan]:
    profile = Profile("incast", "incast", "data", 2, 80.0, PHASES)
    return [
        JobPlan("a-0", "incast", ("s01", "s03"), profile),
        JobPlan("b-0", "incast", ("s02", "s03"), profile),
    ]


@pytest.mark.root
def test_a_roce_incast_completes_and_its_marks_become_cnps_and_rate_cuts(
    prefix: str, tmp_path: Path
) -> None:
    topo = load_topology(TOPOLOGY)
    jobs = incast_jobs()
    settings = RunSettings(
        iterations=ITERATIONS, socket_timeout_s=5.0, gnmi=False, transport="roce"
    )
    with EmulatedFabric(topo, FabricOptions(scale=SCALE, prefix=prefix)) as fabric:
        result = run_schedule(fabric, jobs, settings, tmp_path)
    assert leftovers(prefix) == []
    assert result.error is None, result.error
    assert "RoCEv2" in result.fidelity["transport"]
    size = phase_bytes(PHASES[1], SCALE, ROCE_PAYLOAD_SHARE)
    records = result.records
    assert len(records) == ITERATIONS * 4
    for r in records:  # the right bytes: the ring's steps of the phase, every iteration
        relayed = ring_steps(phase_plan("data", 2, size), 2, r.worker)
        assert relayed is not None and r.bytes == sum(relayed[0])
        assert r.cnps is not None and r.ce_marks is not None and r.rate_cuts is not None
    marks = sum(r.ce_marks or 0 for r in records)
    cnps = sum(r.cnps or 0 for r in records)
    # the senders into s03 (worker 0 of each job) were told to slow down and did
    cuts_into_s03 = sum(r.rate_cuts or 0 for r in records if r.worker == 0)
    at_s03 = sum(r.ce_marks or 0 for r in records if r.worker == 1)
    print(
        f"switch ecn_marked {result.switch_ecn_marked}, host CE marks {marks} "
        f"({at_s03} at s03), CNPs {cnps}, rate cuts into s03 {cuts_into_s03}"
    )
    assert result.switch_ecn_marked > 0
    assert at_s03 > 0 and 0 < cnps <= marks <= result.switch_ecn_marked
    assert cnps >= marks / 2  # coalesced within back-to-back pairs only
    assert 0 < cuts_into_s03 <= cnps
