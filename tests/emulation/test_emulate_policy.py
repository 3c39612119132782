"""`cassini emulate --policy crux` on the smallest fabric with a shared link: the pair of
test_emulate_small (a on s01, s03; b on s02, s04, both rings over leaf1 <-> spine1 <->
leaf2), no shift, so both rings send at once through the shared uplinks.

Crux ranks the two equal jobs by name (a first, class 7; b class 6): the run must
install one queue_class_by_flow entry per connection direction, a's in 7 and b's in 6,
remove them after, and record them in summary.json.

The switch's per-class counters are served over gNMI (openconfig-qos queues) and a class
policy's run writes them to queue_classes.csv; the witness here is the per-job
telemetry (job-class counters per link): both jobs send their bytes over the shared
links, and a, in the higher class, never waits behind b, so it gets no marks there
once the entries are in (before, the replicas' first bytes ride class 0).
Measured (20 iterations, this 2-core machine with other work running): shared-link
marks none 164 (a 75, b 89), crux 20 (a 0, b 20); a's mean 116 -> 94 ms, b's 109 -> 111.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from emulation.emulate.runner import EmulateSettings, emulate
from emulation.jobs.telemetry_rows import read_telemetry
from scheduler.workloads.profiles import build_profile
from scheduler.workloads.traces import TraceJob, write_trace

TOPOLOGY = "leaf-spine:2:1:2"
MODEL = "resnet50"
PLACEMENT = {"a": ["s01", "s03"], "b": ["s02", "s04"]}
ITERATIONS = 10


@pytest.mark.root
def test_crux_puts_the_pair_in_two_classes(tmp_path: Path, prefix: str) -> None:
    trace = write_trace(
        [TraceJob("a", MODEL, 2, 1000), TraceJob("b", MODEL, 2, 1000)], tmp_path / "t.csv"
    )
    period = build_profile(MODEL, 2).iteration_ms * 1.25
    schedule = {
        "placement": PLACEMENT,
        "shifts_ms": {"a": 0.0, "b": 0.0},
        "periods_ms": {"a": period, "b": period},
    }
    settings = EmulateSettings(topology=TOPOLOGY, trace=str(trace), schedulers=("given",),
                               iterations=ITERATIONS, schedule=schedule, prefix=prefix,
                               policy="crux")  # fmt: skip
    out = tmp_path / "run"
    report, stopped = emulate(settings, out)
    assert stopped is None
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    given = summary["schedulers"]["given"]
    assert given["error"] is None
    policy = given["network_policy"]
    assert policy["policy"] == "crux" and len(policy["segments"]) == 1
    segment = policy["segments"][0]
    assert segment["error"] is None and segment["missing"] == []
    assert segment["classes"] == {
        "a": {"s01->s03": 7, "s03->s01": 7},
        "b": {"s02->s04": 6, "s04->s02": 6},
    }
    # two connections a job (one each way round its ring), each in both directions
    assert segment["entries"] == 8
    by_class: dict[int, set[str]] = {}
    ports = {47000: "a", 47001: "a", 47002: "b", 47003: "b"}  # launch.BASE_PORT + worker
    for src, dst, queue_class in segment["connections"]:
        job = ports.get(int(dst.rsplit(":", 1)[1])) or ports[int(src.rsplit(":", 1)[1])]
        by_class.setdefault(queue_class, set()).add(job)
    assert by_class == {7: {"a"}, 6: {"b"}}
    assert given["jobs"]["a"]["iterations"] == given["jobs"]["b"]["iterations"] == ITERATIONS
    shared = set(given["shared_links"])
    sent: dict[str, list[int]] = {"a": [0, 0], "b": [0, 0]}  # bytes, CE marks on shared links
    installed_s = segment["installed_at_ms"] / 1e3 + 0.01  # the sample after the last write
    for row in read_telemetry(out / "runs" / "given" / "telemetry.csv"):
        if row.link in shared and row.job in sent and row.time_s > installed_s:
            sent[row.job][0] += row.bytes
            sent[row.job][1] += row.ce_marks
    assert min(sent["a"][0], sent["b"][0]) > 0.8 * max(sent["a"][0], sent["b"][0]) > 0, sent
    assert sent["a"][1] <= 2, sent  # class 7 never queues behind class 6
