"""`cassini fabric run` and the runner on real fabrics: a killed replica stops its
job with the lost-peer error, Ctrl-C leaves the records so far, and nothing of a
run is left afterwards (processes, namespaces, interfaces)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from emulation.cli import main
from emulation.fabric.emulated import EmulatedFabric
from emulation.fabric.options import FabricOptions
from emulation.jobs.launch import parse_schedule, plan_jobs
from emulation.jobs.run_settings import RunSettings
from emulation.jobs.supervisor import run_schedule
from tests.helpers import CASSINI
from tests.helpers.leftovers import leftovers
from tests.helpers.waiting import wait_for
from topologies.library import load_topology

TOPOLOGY = "leaf-spine:2:1:2"
SCHEDULE = {
    "placement": {"vgg19-0": ["s01", "s02", "s03", "s04"]},
    "periods_ms": {"vgg19-0": 260.0},
}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"


def test_a_bad_schedule_is_refused_before_anything_is_built(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "s.json"
    bad.write_text(json.dumps({"placement": {"vgg19-0": ["s01", "s44"]}}))
    assert (
        main(
            ["fabric", "run", "--schedule", str(bad), "-t", TOPOLOGY, "--out", str(tmp_path / "o")]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert f"{bad}: field 'placement' of job 'vgg19-0': server 's44' is not in topology" in err
    assert not (tmp_path / "o").exists()
    bad.write_text(json.dumps({"placement": {"nomodel-0": ["s01"]}}))
    assert (
        main(
            ["fabric", "run", "--schedule", str(bad), "-t", TOPOLOGY, "--out", str(tmp_path / "o")]
        )
        == 2
    )
    assert "job 'nomodel-0' has no profile" in capsys.readouterr().err


@pytest.mark.root
def test_a_killed_replica_stops_its_job_with_the_lost_peer_error(
    prefix: str, tmp_path: Path
) -> None:
    topo = load_topology(TOPOLOGY)
    jobs = plan_jobs(parse_schedule(SCHEDULE), topo)
    pids: list[int] = []
    with EmulatedFabric(topo, FabricOptions(scale=0.001, prefix=prefix)) as fabric:
        victim_out = tmp_path / "replicas" / "vgg19-0-w1.jsonl"

        def kill_worker_1() -> None:
            wait_for(lambda: victim_out.exists() and victim_out.read_text().count("\n") >= 2, 60)
            for process in fabric.lab.processes:
                if "emulation.jobs.replica" in process.args and "vgg19-0-w1.jsonl" in " ".join(
                    process.args
                ):
                    process.send_signal(signal.SIGKILL)

        killer = threading.Thread(target=kill_worker_1)
        killer.start()
        settings = RunSettings(iterations=200, socket_timeout_s=3.0, gnmi=False)
        began = time.monotonic()
        result = run_schedule(fabric, jobs, settings, tmp_path)
        killer.join()
        took = time.monotonic() - began
        pids = [p.pid for p in fabric.lab.processes]
        assert result.error is not None
        assert result.error.startswith(
            "job vgg19-0 failed: job vgg19-0: worker 1 (s02) was killed by SIGKILL"
        )
        peer = re.compile(
            r"job vgg19-0: worker [023] lost peer worker \d \(10\.\d+\.\d+\.\d+:\d+\)"
        )
        assert peer.search(result.error), result.error
        assert "lost peer worker 1" in result.error
        # Every replica has ended, within the socket timeout of the kill, not at the deadline.
        done = [r for r in result.records if r.worker != 1]
        assert 2 <= result.summaries[0].iterations < 200 and done
        assert took < 60, took
    assert leftovers(prefix) == []
    assert [pid for pid in pids if _alive(pid)] == []


@pytest.mark.root
def test_ctrl_c_tears_down_and_keeps_the_records_so_far(tmp_path: Path) -> None:
    schedule = tmp_path / "schedule.json"
    schedule.write_text(json.dumps(SCHEDULE))
    out = tmp_path / "run"
    argv = [CASSINI, "fabric", "run", "--schedule", str(schedule), "-t", TOPOLOGY,
            "--iterations", "500", "--out", str(out)]  # fmt: skip
    process = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stderr is not None
    fabric_prefix = None
    try:
        for line in process.stderr:
            match = re.match(r"fabric (cas\w+) up", line)
            fabric_prefix = fabric_prefix or (match.group(1) if match else None)
            found = re.search(r"iterations (\d+)/", line)
            if found and int(found.group(1)) >= 8:
                break
        assert fabric_prefix is not None
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] == "SIGINT"
    rows = (out / "iterations.csv").read_text().splitlines()
    assert len(rows) - 1 >= 8 and rows[0].startswith("job,model,worker,iteration")
    assert summary["jobs"]["vgg19-0"]["iterations"] >= 2
    assert (out / "ecn.csv").exists() and (out / "schedule.json").exists()
    assert leftovers(fabric_prefix) == []


@pytest.mark.root
def test_a_run_into_a_used_folder_keeps_only_its_own_records(prefix: str, tmp_path: Path) -> None:
    """Replicas append to their records file: a second run into the same folder (a
    benchmark's --out given twice, a rerun after a stopped one) must not count the first
    run's iterations (it did: a rerun's summary counted both runs' CE marks)."""
    topo = load_topology(TOPOLOGY)
    jobs = plan_jobs(parse_schedule(SCHEDULE), topo)
    stale = tmp_path / "replicas" / "vgg19-0-w0.jsonl"
    stale.parent.mkdir(parents=True)
    stale.write_text('{"job": "vgg19-0", "model": "vgg19", "worker": 0, "iteration": 0, '
                     '"start_ms": 1.0, "end_ms": 2.0, "bytes": 1, "comm_ms": 0.5, '
                     '"wait_ms": 0.0, "adjusted": false, "ce_marks": 999}\n')  # fmt: skip
    with EmulatedFabric(topo, FabricOptions(scale=0.001, prefix=prefix)) as fabric:
        result = run_schedule(fabric, jobs, RunSettings(iterations=3, gnmi=False), tmp_path)
    assert result.error is None
    assert sorted((r.worker, r.iteration) for r in result.records) == [
        (w, k) for w in range(4) for k in range(3)
    ]
    assert all(r.start_ms > 2.0 for r in result.records)
    assert leftovers(prefix) == []
