"""A job's collectives over RoCE QPs (`jobs.roce_links.RoceLinks`) on loopback: a ring
AllReduce relayed cut through and a pipeline-like exchange deliver every byte and every
header byte, PSNs stay in step across calls, and data sent CE-marked is answered with
CNPs that cut the sender's rate (at most one CNP per marked packet)."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable
from typing import TypeVar

import pytest

from emulation.jobs.header import Header
from emulation.jobs.patterns import neighbours, phase_plan, ring_steps
from emulation.jobs.ring import Address, Ring
from emulation.jobs.ring_plan import ring_allreduce_plan
from emulation.jobs.roce_links import PAYLOAD, ROCE_PAYLOAD_SHARE, RoceLinks, packets

T = TypeVar("T")
NIC_GBPS, SCALE = 50.0, 0.002  # 100 Mbit/s


def free_ports(n: int) -> list[int]:
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def run_workers(
    n: int, body: Callable[[Ring, RoceLinks], T], parallelism: str = "data", **links: object
) -> list[T]:
    """`body` on every worker of an n-worker job on loopback, each in a thread, with
    the QPs of the job's pattern (`patterns.neighbours`)."""
    peers = [Address("127.0.0.1", p) for p in free_ports(n)]
    results: list[T | BaseException | None] = [None] * n

    def worker(rank: int) -> None:
        try:
            sends_to, receives_from = neighbours(parallelism, n, rank)
            with Ring(
                "roce-test", rank, peers, 5.0, sends_to=sends_to, receives_from=receives_from
            ) as ring:
                ring.connect()
                roce = RoceLinks(ring, NIC_GBPS, SCALE, **links)  # type: ignore[arg-type]
                try:
                    ring.barrier(margin_ms=0.0)
                    results[rank] = body(ring, roce)
                finally:
                    roce.close()
        except BaseException as err:  # noqa: BLE001 - reported below
            results[rank] = err

    threads = [threading.Thread(target=worker, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results  # type: ignore[return-value]


def test_packets_per_call_hand_counted() -> None:
    # a header byte in front of each step: 1 B, 1024 B and 1025 B -> 1 + 1 + 2 packets
    assert packets([0, 1023, 1024]) == 4
    assert packets([PAYLOAD * 3 - 1]) == 3
    # 1024 of 1106 wire bytes per packet, less an ACK's 86 every 16 packets
    assert pytest.approx(1024 / (1106 + 86 / 16)) == ROCE_PAYLOAD_SHARE


def test_ring_allreduce_relayed_over_roce_delivers_every_byte_and_wish() -> None:
    total = 300_001

    def body(ring: Ring, roce: RoceLinks) -> tuple[int, int, Header, Header]:
        out = []
        for k in range(3):  # PSNs must stay in step across calls
            plan = ring_allreduce_plan(total + k, ring.n, ring.rank)
            mine = Header(stop=ring.rank == 1 and k == 2, skip=ring.rank + k)
            got, heard = roce.relay(
                [s.send_bytes for s in plan], [s.recv_bytes for s in plan], mine
            )
            out.append((got, sum(s.recv_bytes for s in plan), heard))
        return out[-1][0], out[-1][1], out[0][2], out[-1][2]

    for got, want, first, last in run_workers(3, body):
        assert got == want
        assert first == Header(False, 2)  # every worker's wish went round: the largest skip
        assert last == Header(True, 4)


def test_exchange_and_agree_over_roce() -> None:
    def body(ring: Ring, roce: RoceLinks) -> tuple[int, Header]:
        sends = {ring.right_rank: 5000 + ring.rank}
        receives = {ring.left_rank: 5000 + ring.left_rank}
        got, heard = roce.exchange(sends, receives, Header(skip=ring.rank))
        agreed = roce.agree(Header(stop=ring.rank == 0))
        return got, heard.merge(agreed)

    results = run_workers(3, body)
    assert [g for g, _ in results] == [5002, 5000, 5001]
    assert all(h.stop for _, h in results)


@pytest.mark.parametrize("parallelism", ["pipeline", "hybrid"])
def test_every_pattern_moves_its_plan_over_roce(parallelism: str) -> None:
    """What the replica does with a phase's plan: the ring's steps relayed, or each
    step of another pattern exchanged with several QPs at once."""
    n, size = 3, 40_000

    def body(ring: Ring, roce: RoceLinks) -> tuple[int, int]:
        plan = phase_plan(parallelism, n, size)
        relayed = ring_steps(plan, n, ring.rank)
        if relayed is not None:
            got, _ = roce.relay(*relayed)
            return got, sum(relayed[1])
        got = want = 0
        for step in plan:
            receives = step.receives(ring.rank)
            moved, _ = roce.exchange(step.sends(ring.rank), receives)
            got, want = got + moved, want + sum(receives.values())
        return got, want

    for got, want in run_workers(n, body, parallelism):
        assert got == want > 0


def test_ce_marked_data_is_answered_with_cnps_that_cut_the_rate() -> None:
    def body(ring: Ring, roce: RoceLinks) -> tuple[int, int, int, int, float]:
        for sock in roce.send.values():  # as if the fabric had marked every data packet
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, 0x6B)
        sends = [200_000]
        roce.relay(sends, sends)
        c = roce.take()
        return c.marked, c.cnps_sent, c.cnps_received, c.cuts, c.min_rate_bps

    results = run_workers(2, body)
    sent_packets = packets([200_000])
    for marked, cnps_sent, cnps_received, cuts, min_rate in results:
        assert marked >= sent_packets  # every packet (and any resend) was CE
        assert 0 < cnps_sent <= marked  # at most one CNP per marked packet
        assert 0 < cuts <= cnps_received
        assert min_rate < NIC_GBPS * 1e9 * SCALE * 0.6  # cut well below the line rate
    # each worker's CNPs went to the other's sender; the last may come after it finished
    sent, received = sum(r[1] for r in results), sum(r[2] for r in results)
    assert sent - 4 <= received <= sent


def test_summary_json_counts_cnps_per_job_and_pauses_and_drops_per_run() -> None:
    from dataclasses import replace

    from controlplane.telemetry import PortDelta
    from emulation.jobs.launch import JobPlan
    from emulation.jobs.records import IterationRecord
    from emulation.jobs.run_result import RunResult, summarize_job
    from emulation.jobs.run_settings import RunSettings
    from scheduler.workloads.types import Phase, Profile

    profile = Profile("p", "p", "data", 2, 10.0, (Phase(10.0, 0.0),))
    jobs = (
        JobPlan("a-0", "p", ("s01", "s02"), profile),
        JobPlan("b-0", "p", ("s03", "s04"), profile),
    )

    def rec(job: str, worker: int, cnps: int | None, frames: int | None) -> IterationRecord:
        paused = None if frames is None else 1.5 * frames
        return IterationRecord(job, "p", worker, 0, 0.0, 10.0, 100, 5.0, 0.0, False, cnps,
                               cnps=cnps, pfc_pause_frames=frames, pfc_paused_ms=paused)  # fmt: skip

    records = (rec("a-0", 0, 3, 2), rec("a-0", 1, 4, 0), rec("b-0", 0, None, None))
    result = RunResult(
        jobs=jobs, summaries=tuple(summarize_job(j, records) for j in jobs), records=records,
        ports=(), links=(), settings=RunSettings(iterations=1, transport="roce"), scale=0.001,
        emulation_profile="", duration_s=1.0,
    )  # fmt: skip
    summary = result.summary()
    assert summary["jobs"]["a-0"]["cnps"] == 7
    assert summary["jobs"]["b-0"]["cnps"] is None  # a TCP-like job counts none
    assert (summary["pfc_pause_frames"], summary["pfc_paused_ms"], summary["drops"]) == (2, 3.0, 0)
    assert summary["settings"]["transport"] == "roce"
    assert summary["switch_pfc_pauses"] is summary["switch_pfc_paused_ms"] is None  # no gNMI
    # the switch's own pause frames (gNMI pfc-pauses-sent), summed over its ports' rows
    rows = (PortDelta(time_s=0.5, interval_s=0.5, port=1, pfc_pauses_sent=5, pfc_paused_us=1500),
            PortDelta(time_s=1.0, interval_s=0.5, port=1, pfc_pauses_sent=2, pfc_paused_us=250),
            PortDelta(time_s=1.0, interval_s=0.5, port=2))  # fmt: skip
    with_switch = replace(result, ports=rows).summary()
    assert (with_switch["switch_pfc_pauses"], with_switch["pfc_pause_frames"]) == (7, 2)
    assert with_switch["switch_pfc_paused_ms"] == 1.75


def test_back_to_back_calls_lose_no_packet_to_the_call_before() -> None:
    """A neighbour's next call starts while this worker still waits for its last ACK:
    its packets wait in the kernel for this worker's next call (held, not read early),
    so nothing needs go-back-N's 100 ms timeout."""

    def body(ring: Ring, roce: RoceLinks) -> tuple[int, int, int]:
        for _ in range(30):
            roce.relay([3000, 3000], [3000, 3000])
        c = roce.take()
        return c.early, c.timeouts, c.retransmits

    for early, timeouts, retransmits in run_workers(3, body):
        assert (early, timeouts, retransmits) == (0, 0, 0)


def test_mltcp_counts_the_iterations_bytes_and_hands_the_qps_its_gain() -> None:
    """With MLTCP each QP's increase steps take F of the iteration's share sent
    (`roce.mltcp`): F = 1 while no iteration has finished, then 0.25 + 1.5 f, reset at
    each iteration's start. The gain is read from the QP's state (the double after
    rp_t's counters in `_roce.c`, offset 128)."""
    from emulation.roce.mltcp import IterationBytes, MltcpSettings

    half = 60_000

    def gain(roce: RoceLinks) -> float:
        (state,) = roce.state.values()
        return float(struct.unpack_from("d", state, 128)[0])

    def body(ring: Ring, roce: RoceLinks) -> list[object]:
        out: list[object] = []
        roce.start_iteration()
        roce.relay([half, half], [half, half])  # first iteration: total unknown
        out += [roce.iteration, gain(roce)]
        roce.start_iteration()
        roce.relay([half], [half])  # half of the learned total
        out.append(gain(roce))
        roce.relay([half], [half])
        out += [roce.iteration, gain(roce)]
        roce.start_iteration()
        out.append(roce.iteration)
        return out

    for first, g1, g_half, second, g_end, third in run_workers(
        2, body, mltcp=MltcpSettings(slope=1.5, intercept=0.25)
    ):
        assert first == IterationBytes(total=0.0, sent=2 * half)
        assert g1 == 1.0
        assert g_half == pytest.approx(0.25 + 1.5 * 0.5, abs=1e-3)  # header bytes: ~1e-5
        assert second == IterationBytes(total=2 * half, sent=2 * half)
        assert g_end == 1.75
        assert third == IterationBytes(total=2 * half, sent=0.0)
