"""Ring AllReduce: the plan (pure) and one AllReduce over real TCP between namespaces.

The socket test uses a bare NetnsLab (four namespaces, veths to a Linux
bridge, each host's egress shaped by tbf to 40 Mbit/s) rather than the
emulated fabric: it checks the collective alone, its bytes and its time.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from emulation.fabric.netns import NetnsLab
from emulation.jobs.header import MAX_SKIP, Header
from emulation.jobs.ring import Address
from emulation.jobs.ring_plan import (
    TCP_PAYLOAD_SHARE,
    chunk_sizes,
    gradient_bytes,
    phase_bytes,
    ring_allreduce_plan,
)
from scheduler.workloads.profiles import allreduce_bytes_per_worker, build_profile
from tests.helpers.leftovers import leftovers

RATE_MBIT = 40
WORKER = """
import json, sys, time
from emulation.jobs.ring import Address, Ring
rank, total = int(sys.argv[1]), int(sys.argv[2])
peers = [Address.parse(a) for a in sys.argv[3].split(",")]
with Ring("ring-test", rank, peers, timeout_s=10.0) as ring:
    ring.connect()
    start = ring.barrier()
    time.sleep(max(0.0, start / 1e3 - time.time()))
    result = ring.allreduce(total, stop=rank == 2)  # one worker's stop wish
    print(json.dumps({"sent": result.bytes_sent, "received": result.bytes_received,
                      "ms": result.elapsed_ms, "ecn": ring.ecn_negotiated(),
                      "stop": result.stop}))
"""


@pytest.mark.parametrize("workers", [2, 3, 4, 5])
@pytest.mark.parametrize("total", [0, 1, 999, 1_000_000])
def test_every_worker_receives_2_n_minus_1_over_n_of_the_gradients(
    workers: int, total: int
) -> None:
    plans = [ring_allreduce_plan(total, workers, r) for r in range(workers)]
    sizes = chunk_sizes(total, workers)
    assert sum(sizes) == total
    for rank, plan in enumerate(plans):
        assert len(plan) == 2 * (workers - 1)
        left = plans[(rank - 1) % workers]
        # What a worker receives in step i is what its left neighbour sends in step i.
        assert [s.recv_chunk for s in plan] == [s.send_chunk for s in left]
        received = sum(s.recv_bytes for s in plan)
        # Each chunk but its own arrives twice (reduce-scatter and all-gather) ...
        assert received == 2 * total - sizes[(rank + 1) % workers] - sizes[rank]
        assert received == pytest.approx(2 * (workers - 1) / workers * total, abs=2)
        # ... and after reduce-scatter the worker owns chunk (rank + 1) mod N.
        assert plan[workers - 2].recv_chunk == (rank + 1) % workers


def test_profile_bytes_scale_with_s_and_match_the_scheduler() -> None:
    profile = build_profile("vgg19", 4)
    up = next(p for p in profile.phases if p.gbps > 0)
    per_worker = phase_bytes(up, 1.0, payload_share=1.0)
    assert gradient_bytes(per_worker, 4) * 1.5 == pytest.approx(per_worker, rel=1e-6)
    assert per_worker == pytest.approx(
        allreduce_bytes_per_worker(gradient_bytes(per_worker, 4) / 4, 4), rel=1e-6
    )
    assert phase_bytes(up, 0.001, payload_share=1.0) == pytest.approx(per_worker * 0.001, abs=1)
    # the payload share: the rest of what the link carries is headers and the reverse ACKs
    assert phase_bytes(up, 0.001) == pytest.approx(per_worker * 0.001 * TCP_PAYLOAD_SHARE, abs=1)
    assert 0.9 < TCP_PAYLOAD_SHARE < 0.95
    assert Address.parse("10.0.0.2:47001") == Address("10.0.0.2", 47001)
    with pytest.raises(ValueError, match="HOST:PORT"):
        Address.parse("10.0.0.2")


@pytest.mark.root
def test_one_allreduce_over_tcp_takes_bytes_over_rate() -> None:
    workers, total = 4, 1_000_000
    with NetnsLab() as lab:
        bridge = lab.prefix + "br"
        subprocess.run(["ip", "link", "add", bridge, "type", "bridge"], check=True)
        lab.root_links.append(bridge)  # deleted with the lab
        lab.claim().add("links", bridge)
        subprocess.run(["ip", "link", "set", bridge, "up"], check=True)
        namespaces, peers = [], []
        for i in range(workers):
            ns = lab.namespace(f"w{i}")
            host_if, br_if = lab.veth(f"h{i}", f"b{i}", ns_a=ns, ip_a=f"10.9.0.{i + 1}/24")
            subprocess.run(["ip", "link", "set", br_if, "master", bridge], check=True)
            lab.run(ns, ["tc", "qdisc", "add", "dev", host_if, "root", "tbf", "rate",
                         f"{RATE_MBIT}mbit", "burst", "16kb", "latency", "200ms"])  # fmt: skip
            lab.run(ns, ["sysctl", "-qw", "net.ipv4.tcp_ecn=1"])
            namespaces.append(ns)
            peers.append(f"10.9.0.{i + 1}:47000")
        processes = [
            lab.popen(ns, [sys.executable, "-c", WORKER, str(r), str(total), ",".join(peers)],
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for r, ns in enumerate(namespaces)
        ]  # fmt: skip
        results = []
        for process in processes:
            out, err = process.communicate(timeout=30)
            assert process.returncode == 0, err
            results.append(json.loads(out))
        prefix = lab.prefix
    assert leftovers(prefix) == []
    sizes = chunk_sizes(total, workers)
    ideal_ms = 2 * (workers - 1) / workers * total * 8 / (RATE_MBIT * 1e6) * 1e3
    for rank, result in enumerate(results):
        plan = ring_allreduce_plan(total, workers, rank)
        assert result["received"] == sum(s.recv_bytes for s in plan)
        assert result["received"] == 2 * total - sizes[rank] - sizes[(rank + 1) % workers]
        assert result["sent"] == sum(s.send_bytes for s in plan)
        assert result["ecn"] is True
        assert result["stop"] is True  # worker 2's wish reached every worker, cut through
        # Never faster than the links allow. Headers and TCP/IP framing add ~4% and
        # the six hand-offs a little more: 1.12x on an idle machine, 1.37x seen with
        # the whole suite running; the bound only catches a collective that stalls.
        assert ideal_ms < result["ms"] < 2.5 * ideal_ms, (result["ms"], ideal_ms)
    print(f"AllReduce {total} B x 4 workers at {RATE_MBIT} Mbit/s: ideal {ideal_ms:.0f} ms, "
          f"measured {[round(r['ms']) for r in results]} ms")  # fmt: skip


def test_a_header_byte_carries_the_stop_wish_and_the_largest_skip() -> None:
    for header in (Header(), Header(True), Header(False, 3), Header(True, MAX_SKIP)):
        assert Header.of(header.byte()) == header
    assert Header(skip=500).byte() >> 1 == MAX_SKIP  # clamped, never wraps into the stop bit
    assert Header(True, 1).merge(Header(False, 4)) == Header(True, 4)
    assert Header(False, 2).merge(Header()) == Header(False, 2)
