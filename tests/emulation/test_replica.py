"""Replicas end to end on a small emulated fabric (leaf-spine:2:1:2, S = 0.001):
one 4-worker job runs a few paced iterations through the software switch and
records them; killing one replica makes the others stop with a named error."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from emulation.fabric.emulated import EmulatedFabric
from emulation.fabric.options import FabricOptions
from emulation.jobs.patterns import bytes_sent, phase_plan, ring_steps
from emulation.jobs.records import csv_rows, read_records
from emulation.jobs.replica import (
    EXIT_PEER_LOST,
    ReplicaSpec,
    pace_fraction,
    pacing_ms,
    parse_args,
    sleep_until,
)
from emulation.jobs.ring import Address
from emulation.jobs.ring_plan import gradient_bytes, phase_bytes, ring_allreduce_plan
from emulation.jobs.witness_limits import MIN_JUDGED_PHASE_MS
from scheduler.workloads.types import Phase
from tests.helpers.counters import settled_deltas, snapshot
from tests.helpers.leftovers import leftovers
from topologies.errors import UserInputError
from topologies.library import load_topology

SCALE = 0.001
PHASES = (Phase(40.0, 0.0), Phase(60.0, 50.0))  # 375 kB per worker: 60 ms at 50 Mbit/s
PERIOD_MS = 160.0
SERVERS = ("s01", "s02", "s03", "s04")


@pytest.fixture(scope="module")
def fabric() -> Iterator[EmulatedFabric]:
    with EmulatedFabric(load_topology("leaf-spine:2:1:2"), FabricOptions(scale=SCALE)) as fab:
        yield fab
        prefix = fab.prefix
    assert leftovers(prefix) == []


def specs(
    fabric: EmulatedFabric, job: str, out: Path, port: int, iterations: int
) -> list[ReplicaSpec]:
    peers = tuple(Address(fabric.hosts[s].ip, port) for s in SERVERS)
    return [
        ReplicaSpec(
            job=job, model="vgg19", worker=w, peers=peers, phases=PHASES,
            out=str(out / f"{job}-w{w}.jsonl"), iterations=iterations, scale=SCALE,
            shift_ms=10.0, period_ms=PERIOD_MS, timeout_s=3.0,
        )
        for w in range(len(SERVERS))
    ]  # fmt: skip


def start(fabric: EmulatedFabric, spec: ReplicaSpec) -> subprocess.Popen[str]:
    ns = fabric.hosts[SERVERS[spec.worker]].namespace
    return fabric.lab.popen(ns, spec.argv(), stderr=subprocess.PIPE, text=True)


def test_the_command_line_round_trips() -> None:
    spec = ReplicaSpec("j", "vgg19", 1, (Address("10.0.0.1", 1), Address("10.0.0.2", 2)),
                       PHASES, "x.jsonl", period_ms=100.0, drift_fraction=None)  # fmt: skip
    assert parse_args(spec.argv()[3:]) == spec
    other = replace(spec, parallelism="pipeline", nic_gbps=None, count_ce=False,
                    congestion_control="reno")  # fmt: skip
    assert parse_args(other.argv()[3:]) == other
    with pytest.raises(UserInputError, match="this kernel offers .*cubic"):
        parse_args([*spec.argv()[3:], "--congestion-control", "dctcp"])
    with pytest.raises(UserInputError, match="parallelism"):
        parse_args([*spec.argv()[3:], "--parallelism", "pipe"])


def test_a_sleep_measures_how_late_it_woke_on_a_fake_clock() -> None:
    now = [1000.0]
    asked: list[float] = []

    def sleep(seconds: float) -> None:  # wakes 0.7 ms past the time asked
        asked.append(seconds)
        now[0] += seconds * 1e3 + 0.7

    assert sleep_until(1010.0, lambda: now[0], sleep) == pytest.approx(0.7)
    assert asked == [pytest.approx(0.010)]
    assert sleep_until(1000.0, lambda: now[0], sleep) is None  # already past: no sleep
    assert len(asked) == 1


def test_an_up_phase_is_judged_against_the_rate_the_kernel_paces_it_at() -> None:
    plan = phase_plan("data", 4, 40_000)  # the ring's steps, every one to the right
    right = ring_steps(plan, 4, 1)
    assert right is not None
    sent = sum(right[0])
    assert pacing_ms(plan, 1, {2: 1_000_000}) == pytest.approx(sent / 1e3)  # 1 MB/s: 1 B/us
    assert pacing_ms(plan, 1, {0: 1_000_000}) is None  # its connection is not paced
    assert pace_fraction(pacing_ms(plan, 1, {2: 1_000_000}), 2 * sent / 1e3) == 0.5
    # A phase paced under MIN_JUDGED_PHASE_MS (20 ms) is not judged: one allowed
    # late wake-up alone would halve a 1.3 ms phase's rate.
    short = phase_plan("data", 4, 4000)
    assert pacing_ms(short, 1, {2: 1_000_000}) < MIN_JUDGED_PHASE_MS
    assert pace_fraction(pacing_ms(short, 1, {2: 1_000_000}), 1.0) is None
    assert pace_fraction(MIN_JUDGED_PHASE_MS, 2 * MIN_JUDGED_PHASE_MS) == 0.5


@pytest.mark.root
def test_a_four_worker_job_runs_and_records_its_iterations(
    fabric: EmulatedFabric, tmp_path: Path
) -> None:
    iterations = 6
    job_specs = specs(fabric, "vgg19-0", tmp_path, 47000, iterations)
    with fabric.session() as reader:
        before = snapshot(reader)
        processes = [start(fabric, s) for s in job_specs]
        for process in processes:
            _, err = process.communicate(timeout=30)
            assert process.returncode == 0, err
        changed = settled_deltas(reader, before)
    total = gradient_bytes(phase_bytes(PHASES[1], SCALE), len(SERVERS))
    for spec in job_specs:
        records = read_records(spec.out)
        assert [r.iteration for r in records] == list(range(iterations))
        plan = ring_allreduce_plan(total, len(SERVERS), spec.worker)
        assert all(r.bytes == sum(s.send_bytes for s in plan) for r in records)
        assert all(r.comm_ms > 0 and r.end_ms > r.start_ms for r in records)
        # Paced: iteration 0 starts on grid point 0 and iteration k no sooner
        # than grid point k (later when one overran or the agent skipped a slot).
        span = records[-1].start_ms - records[0].start_ms
        assert span > (iterations - 1) * PERIOD_MS - 5, span
        assert all(b.start_ms > a.start_ms for a, b in zip(records, records[1:], strict=False))
        assert all(r.wait_ms >= 0 for r in records)
        rows = list(csv_rows(records))
        assert rows[0][:3] == ["job", "model", "worker"] and len(rows) == iterations + 1
    # The barrier gave all workers one start: iteration 0 begins together.
    firsts = [read_records(s.out)[0].start_ms for s in job_specs]
    assert max(firsts) - min(firsts) < 30, firsts
    # CE counted at the receiving hosts is what the switch's ports marked: the
    # job's flows are the only traffic, and every packet has landed by now.
    marks = [r.ce_marks for s in job_specs for r in read_records(s.out)]
    assert all(isinstance(m, int) for m in marks), marks
    switch_marked = sum(d.ecn_marked_packets for d in changed)
    assert sum(m or 0 for m in marks) == switch_marked
    print(f"CE at hosts {sum(m or 0 for m in marks)} == switch ecn_marked {switch_marked}")
    comm = sorted(r.comm_ms for s in job_specs for r in read_records(s.out))
    print(f"comm_ms median {comm[len(comm) // 2]:.1f} (profile Up phase {PHASES[1].duration_ms})")
    # The host witness: every sleep's lateness, and the one Up phase's pace fraction
    # (the rate achieved over the kernel's pacing rate: at most a little above 1).
    every = [r for s in job_specs for r in read_records(s.out)]
    assert all(r.late_ms is not None and r.late_max_ms is not None for r in every)
    assert all(0 <= (r.late_max_ms or 0) <= (r.late_ms or 0) for r in every)
    assert all(r.up_pace is not None and len(r.up_pace) == 1 for r in every)
    paces = sorted(p for r in every for p in r.up_pace or ())
    assert paces[0] > 0 and paces[-1] < 1.2, paces
    late = sorted(r.late_ms or 0.0 for r in every)
    print(f"wake-up lateness median {late[len(late) // 2]:.2f} ms, max {late[-1]:.2f} ms; "
          f"pace fraction median {paces[len(paces) // 2]:.3f}, min {paces[0]:.3f}")  # fmt: skip


@pytest.mark.root
def test_a_bucketed_profile_sends_each_burst_as_one_allreduce(
    fabric: EmulatedFabric, tmp_path: Path
) -> None:
    """A DDP profile (`scheduler.workloads.buckets`: Down, then bursts with gaps) runs
    burst by burst: each Up phase one ring AllReduce of its own bytes, each judged on
    its own (`up_pace` has one entry per burst), the gap between them slept."""
    bursts = (Phase(30.0, 0.0), Phase(30.0, 50.0), Phase(20.0, 0.0), Phase(25.0, 50.0))
    job_specs = [
        replace(s, phases=bursts, period_ms=130.0)
        for s in specs(fabric, "ddp-0", tmp_path, 47100, 4)
    ]
    processes = [start(fabric, s) for s in job_specs]
    for process in processes:
        _, err = process.communicate(timeout=30)
        assert process.returncode == 0, err
    for spec in job_specs:
        expected = sum(
            sum(step.send_bytes for step in ring_allreduce_plan(
                gradient_bytes(phase_bytes(phase, SCALE), len(SERVERS)), len(SERVERS), spec.worker))
            for phase in bursts if phase.gbps > 0
        )  # fmt: skip
        records = read_records(spec.out)
        assert [r.iteration for r in records] == [0, 1, 2, 3]
        assert all(r.bytes == expected for r in records), (expected, [r.bytes for r in records])
        assert all(r.up_pace is not None and len(r.up_pace) == 2 for r in records)
        # compute, both bursts and the gap between them: no iteration is shorter
        assert all(r.end_ms - r.start_ms >= 105.0 - 1.0 for r in records)


@pytest.mark.root
def test_a_pipeline_job_follows_its_plan_and_stops_at_a_deadline_together(
    fabric: EmulatedFabric, tmp_path: Path
) -> None:
    phases = (Phase(20.0, 0.0), Phase(30.0, 50.0), Phase(10.0, 0.0), Phase(20.0, 50.0))
    peers = tuple(Address(fabric.hosts[s].ip, 47200) for s in SERVERS)
    deadline = time.time() * 1e3 + 15000.0  # 4 Pythons start in a few s, more on a busy machine
    job_specs = [
        ReplicaSpec(
            job="gpt2-0", model="gpt2", worker=w, peers=peers, phases=phases,
            out=str(tmp_path / f"gpt2-0-w{w}.jsonl"), iterations=500, scale=SCALE,
            deadline_ms=deadline, parallelism="pipeline", timeout_s=3.0,
        )
        for w in range(len(SERVERS))
    ]  # fmt: skip
    processes = [start(fabric, s) for s in job_specs]
    for process in processes:
        _, err = process.communicate(timeout=30)
        assert process.returncode == 0, err
    n = len(SERVERS)
    counts = []
    for spec in job_specs:
        records = read_records(spec.out)
        counts.append(len(records))
        want = sum(
            bytes_sent(phase_plan("pipeline", n, phase_bytes(p, SCALE)), spec.worker)
            for p in phases
            if p.gbps > 0
        )
        assert all(r.bytes == want for r in records), (spec.worker, want, records[0].bytes)
        assert all(isinstance(r.ce_marks, int) for r in records)
        # Unpaced, the job runs back to back: each iteration lasts its phases at least.
        assert all(r.iteration_ms >= 80.0 - 1 for r in records)
    # The deadline wish reached every worker (one pipeline step per phase is
    # fewer hops than the ring needs, so the replicas agree over the ring).
    assert len(set(counts)) == 1 and counts[0] >= 3, counts
    print(f"pipeline: {counts[0]} iterations per worker until the deadline")


@pytest.mark.root
def test_a_killed_replica_stops_its_job_with_a_named_error(
    fabric: EmulatedFabric, tmp_path: Path
) -> None:
    job_specs = specs(fabric, "vgg19-1", tmp_path, 47100, iterations=500)
    processes = [start(fabric, s) for s in job_specs]
    victim = job_specs[2]
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and len(read_records_safe(victim.out)) < 2:
        time.sleep(0.1)
    processes[2].kill()
    killed_at = time.monotonic()
    errors = {}
    for w, process in enumerate(processes):
        if w == 2:
            continue
        _, err = process.communicate(timeout=60)
        assert process.returncode == EXIT_PEER_LOST, err
        assert f"job vgg19-1: worker {w} lost peer worker" in err
        errors[w] = err
    # Within a few socket timeouts (3 s) of the kill, not after the job's 500 iterations
    # of 160 ms (80 s): a quarter of that leaves room for a busy machine.
    assert time.monotonic() - killed_at < 80 / 4
    # Each names one of its ring neighbours (whichever failed first: the
    # failure spreads both ways around the ring), and the killed one is named.
    n = len(SERVERS)
    for w, err in errors.items():
        neighbours = {(w - 1) % n, (w + 1) % n}
        assert any(f"lost peer worker {p} ({victim.peers[p]})" in err for p in neighbours), err
    assert any(f"lost peer worker 2 ({victim.peers[2]})" in err for err in errors.values())
    print("".join(errors.values()))


def read_records_safe(path: str) -> list[object]:
    return list(read_records(path)) if Path(path).exists() else []
