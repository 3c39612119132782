"""The 10 ms sample ring: both switch programs write the same samples, a reader gets the
samples since its last read as deltas whose sums equal the counters, and a slow reader
is told how many samples it lost (the writer never waits for it)."""

from __future__ import annotations

import random
import time

import numpy as np
import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether

from controlplane.entries import TableEntry, Update, UpdateType
from controlplane.job_classes import JobSockets, job_class_entries
from controlplane.p4info import load_p4info
from controlplane.p4names import COUNTERS, JOB_ECN_MARKED, JOB_TX, PORT_TX
from controlplane.session import P4RuntimeSession
from emulation.fabric.netns import NetnsLab
from emulation.softswitch.fast_pipeline import FastSwitchProgram
from emulation.softswitch.reference_program import ReferenceSwitchProgram
from emulation.softswitch.sample_ring import SampleReader, SampleRing, Samples, ring_words
from emulation.softswitch.shared_counters import SharedCounters
from emulation.softswitch.state import JOB_CLASSES, DataplaneState
from emulation.softswitch.switch import SoftwareSwitch
from emulation.softswitch.switch_program import SwitchProgram
from emulation.softswitch.tm_config import TmConfig
from tests.helpers.hosts import make_hosts
from tests.helpers.waiting import wait_for
from tests.softswitch.test_fast_pipeline import config, frame, state

INTERVAL = 0.01


def drive(
    program: SwitchProgram, seed: int, reader: SampleReader, read_every: int
) -> list[Samples]:
    """Seeded traffic for 0.6 s of virtual time, a sample every 10 ms, a read every
    `read_every` samples; returns what the reads returned."""
    rng = random.Random(seed)
    tm = program.tm
    reads = []
    now, next_sample, taken = 0.0, INTERVAL, 0
    while now < 0.6:
        for _ in range(rng.randrange(0, 12)):
            program.receive(rng.choice((1, 1, 3, 3, 2)), frame(rng), now - rng.random() * 2e-4)
        now += rng.expovariate(1 / 3e-4)
        program.advance(now)
        tm.transmitted.clear()
        tm.transmitted_due.clear()
        tm.control.clear()
        if now >= next_sample:
            program.sample(now, 1000.0 + now)
            next_sample += INTERVAL
            taken += 1
            if taken % read_every == 0:
                reads.append(reader.read())
    reads.append(reader.read())
    return reads


def programs(slots: int) -> tuple[list[SwitchProgram], list[SharedCounters], list[DataplaneState]]:
    made, blocks, states = [], [], []
    for kind in (ReferenceSwitchProgram, FastSwitchProgram):
        s = state()
        program = kind(s, config(True), [1, 2, 3], seed=5)
        shared = SharedCounters.create(COUNTERS, program.ports)
        shared.close()  # only its ring is used here; a ring of our own instead:
        ring = SampleRing(
            np.zeros(ring_words(len(program.ports), slots), np.int64), program.ports, slots
        )
        program.start_sampling(ring, INTERVAL)
        made.append(program)
        blocks.append(shared)
        states.append(s)
    return made, blocks, states


def test_both_programs_sample_alike_and_the_sums_equal_the_counters() -> None:
    (reference, fast), _, (ref_state, fast_state) = programs(slots=256)
    got = []
    for program in (reference, fast):
        assert program.sample_ring is not None
        reads = drive(program, 3, SampleReader(program.sample_ring, from_start=True), 7)
        program.flush_counters()
        got.append([s for r in reads for s in r.samples])
        assert sum(r.lost for r in reads) == 0
    ref_samples, fast_samples = got
    assert len(ref_samples) == len(fast_samples) >= 55
    for a, b in zip(ref_samples, fast_samples, strict=True):
        assert (a.number, a.time_s, a.wall_s, a.intervals) == (b.number, b.time_s, b.wall_s, 1)
        for field in ("packets", "bytes", "ce_marks", "max_depth_cells"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)
    ports = list(reference.ports)
    for samples, s in ((ref_samples, ref_state), (fast_samples, fast_state)):
        job_tx = s.counters[JOB_TX].reshape(-1, JOB_CLASSES, 2)[ports]
        marked = s.counters[JOB_ECN_MARKED].reshape(-1, JOB_CLASSES, 2)[ports]
        # Nothing was left unsampled: the last sample came after the last departure.
        np.testing.assert_array_equal(sum(x.packets for x in samples), job_tx[:, :, 0])
        np.testing.assert_array_equal(sum(x.bytes for x in samples), job_tx[:, :, 1])
        np.testing.assert_array_equal(sum(x.ce_marks for x in samples), marked[:, :, 0])
        assert sum(x.ce_marks for x in samples).sum() > 0
        # Queues built up on the slow port and its deepest queue was sampled per interval.
        slow = ports.index(10)
        depths = [int(x.max_depth_cells[slow]) for x in samples]
        assert max(depths) > 40 and min(depths) < max(depths)


def test_a_slow_reader_is_told_how_many_it_lost_and_keeps_every_byte() -> None:
    (reference, fast), _, (ref_state, fast_state) = programs(slots=8)
    for program, s in ((reference, ref_state), (fast, fast_state)):
        assert program.sample_ring is not None
        reader = SampleReader(program.sample_ring, from_start=True)
        reads = drive(program, 4, reader, 20)  # 20 samples between reads, 8 slots
        program.flush_counters()
        samples = [x for r in reads for x in r.samples]
        written = program.sample_ring.written
        assert reads[0].lost == 12 and len(reads[0].samples) == 8
        assert reads[0].samples[0].number == 12 and reads[0].samples[0].intervals == 13
        assert sum(r.lost for r in reads) + len(samples) == written
        # Lost samples lose time resolution, not bytes.
        ports = list(program.ports)
        job_tx = s.counters[JOB_TX].reshape(-1, JOB_CLASSES, 2)[ports]
        np.testing.assert_array_equal(sum(x.bytes for x in samples), job_tx[:, :, 1])
        np.testing.assert_array_equal(sum(x.packets for x in samples), job_tx[:, :, 0])


def test_a_reader_started_later_sees_only_new_samples() -> None:
    ring = SampleRing(np.zeros(ring_words(2, 4), np.int64), (1, 2), 4)
    cells = 2 * JOB_CLASSES
    for k in range(3):
        ring.write(
            k,
            k,
            np.full(cells, 10 * (k + 1)),
            np.full(cells, 100 * (k + 1)),
            np.zeros(cells),
            np.array([k, 0]),
        )
    reader = SampleReader(ring)
    assert reader.read() == Samples((), 0)
    ring.write(3, 3, np.full(cells, 45), np.full(cells, 420), np.zeros(cells), np.array([7, 1]))
    (sample,), lost = reader.read().samples, reader.read().lost
    assert lost == 0 and sample.number == 3 and sample.intervals == 1
    assert sample.packets.shape == (2, JOB_CLASSES) and int(sample.packets[0, 0]) == 15
    assert int(sample.bytes[1, 5]) == 120 and sample.max_depth_cells.tolist() == [7, 1]


def test_a_ring_laid_out_for_other_ports_is_refused() -> None:
    words = np.zeros(ring_words(2, 4), np.int64)
    SampleRing(words, (1, 2), 4)
    with pytest.raises(ValueError, match="other ports"):
        SampleRing(words, (1, 3), 4)


@pytest.mark.root
@pytest.mark.parametrize("fast", [True, False], ids=["compiled", "reference"])
def test_the_running_switch_samples_every_10_ms(lab: NetnsLab, fast: bool) -> None:
    h1, h2 = make_hosts(lab, 2)
    ports = {1: h1.switch_ifname, 2: h2.switch_ifname}
    jobs = [JobSockets("a", (("10.0.0.2", 47000),))]
    with SoftwareSwitch(6, ports, "127.0.0.1:0", TmConfig(), fast=fast) as switch:
        assert switch.grpc_address is not None and switch.datapath is not None
        ring = switch.datapath.sample_ring()
        reader = SampleReader(ring, from_start=True)
        forward = TableEntry(
            "CassiniIngress.logical_forward",
            {"ingress_port": 1, "dst_mac": h2.mac.hex(":")},
            "CassiniIngress.set_egress_port",
            {"port": 2},
        )
        with P4RuntimeSession.connect(switch.grpc_address, 6) as session:
            session.set_pipeline(load_p4info())
            session.write(
                [Update(UpdateType.INSERT, e) for e in [forward, *job_class_entries(jobs)]]
            )
            head = Ether(dst=h2.mac.hex(":"), src=h1.mac.hex(":")) / IP(
                src="10.0.0.1", dst="10.0.0.2"
            )
            sent = bytes(head / TCP(sport=40000, dport=47000) / bytes(200))
            start = time.monotonic()
            for _ in range(30):
                h1.send(sent)
                time.sleep(0.005)
            assert len(h2.received(expect=30)) == 30
            assert wait_for(lambda: session.read_counters(PORT_TX, 2)[0].packets == 30)
            time.sleep(0.05)  # a sample after the last frame
            samples = reader.read()
            elapsed = time.monotonic() - start
        assert samples.lost == 0
        times = [x.time_s for x in samples.samples]
        assert len(times) >= elapsed / 0.01 * 0.8  # about one every 10 ms
        gaps = np.diff(times)
        assert np.median(gaps) == pytest.approx(0.01, abs=0.002)
        slot = ring.ports.index(2)
        assert sum(int(x.packets[slot, 1]) for x in samples.samples) == 30
        assert sum(int(x.bytes[slot, 1]) for x in samples.samples) == 30 * len(sent)
        assert sum(int(x.packets[slot, 0]) for x in samples.samples) == 0
