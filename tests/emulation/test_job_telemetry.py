"""A run's jobs as the data plane knows them: each job's workers' listening sockets,
from the replicas the run places (the rest of `job_telemetry` runs in the small emulate
test, on a fabric)."""

from __future__ import annotations

from controlplane.job_classes import job_class_entries
from emulation.jobs.job_telemetry import job_sockets
from emulation.jobs.launch import JobPlan, replica_specs
from scheduler.workloads.types import Phase, Profile

PROFILE = Profile("x", "x", "data", 2, 10.0, (Phase(10.0, 0.0),))


def test_each_job_is_known_by_its_workers_sockets() -> None:
    jobs = [JobPlan("a", "x", ("s01", "s02"), PROFILE), JobPlan("b", "x", ("s01",), PROFILE)]
    addresses = {"s01": "10.0.0.1", "s02": "10.0.0.2"}
    placed = replica_specs(jobs, addresses, "run", 5, 0.001)
    found = job_sockets(placed)
    assert [(j.job, j.sockets) for j in found] == [
        ("a", (("10.0.0.1", 47000), ("10.0.0.2", 47001))),
        ("b", (("10.0.0.1", 47002),)),  # the same server as a's worker 0: told apart by port
    ]
    entries = job_class_entries(found)
    assert len(entries) == 2 * 3  # by destination and by source, per worker
    assert {e.params["job_class"] for e in entries} == {1, 2}
