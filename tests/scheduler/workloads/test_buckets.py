"""DDP's bucket timeline against hand-computed cases (scheduler/workloads/buckets.py)."""

from __future__ import annotations

import pytest

from scheduler.workloads.buckets import (
    BUCKET_CAP_BYTES,
    Bucket,
    DdpTimeline,
    Layer,
    assign_buckets,
    ddp_timeline,
    ring_ms,
    timeline_phases,
)

# Forward order: 4 MB of gradients, then 20 MB, then 1 MB (fp32); FLOPs 2 : 1 : 1.
SMALL = [Layer("in", 1e6, 2.0), Layer("mid", 5e6, 1.0), Layer("out", 0.25e6, 1.0)]


def test_buckets_fill_last_layer_first_with_a_small_first_bucket() -> None:
    # 'out' (1,000,000 B) stays under 1 MiB, so 'mid' joins it; 'in' is the rest.
    assert assign_buckets(SMALL, 4.0) == ((2, 1), (0,))
    # fp16: 'out' is 0.5 MB, 'mid' 10 MB: the same grouping, half the bytes.
    assert assign_buckets(SMALL, 2.0) == ((2, 1), (0,))
    # A bucket closes with the tensor that crosses its cap, never split (fc6: 400 MB);
    # layers without parameters join none.
    rows = [
        Layer("emb", 0.0, 0.0),
        Layer("fc6", 100e6, 1.0),
        Layer("a", 1e6, 1.0),
        Layer("b", 6e6, 1.0),
    ]
    assert assign_buckets(rows, 4.0) == ((3,), (2, 1))
    assert BUCKET_CAP_BYTES < 100e6 * 4


def test_timeline_of_a_small_model_by_hand() -> None:
    t = ddp_timeline(SMALL, compute_ms=90.0, workers=4, nic_gbps=50.0)
    assert (t.forward_ms, t.backward_ms) == pytest.approx((30.0, 60.0))
    # Backprop: 'out' ready at 30 + 15, 'mid' at 60, 'in' at 90 (FLOP shares 1/4, 1/4, 1/2).
    first, second = t.buckets
    assert first.layers == ("out", "mid") and first.grad_bytes == pytest.approx(21e6)
    assert first.ready_ms == pytest.approx(60.0) and first.start_ms == pytest.approx(60.0)
    assert first.end_ms == pytest.approx(60.0 + 1.5 * 21e6 * 8 / 50e9 * 1e3)  # 5.04 ms
    assert second.ready_ms == pytest.approx(90.0)
    assert second.end_ms == pytest.approx(90.96)
    assert t.iteration_ms == pytest.approx(90.96)
    assert t.gpu_busy == pytest.approx(90.0 / 90.96)
    phases = [(round(p.duration_ms, 6), p.gbps) for p in timeline_phases(t, 50.0)]
    assert phases == [(60.0, 0.0), (5.04, 50.0), (24.96, 0.0), (0.96, 50.0)]


def test_a_busy_ring_delays_the_next_bucket_and_the_iteration() -> None:
    # At 5 Gbit/s the first bucket takes 50.4 ms: the second waits for it, not for backprop.
    t = ddp_timeline(SMALL, compute_ms=90.0, workers=4, nic_gbps=5.0)
    first, second = t.buckets
    assert second.ready_ms == pytest.approx(90.0)
    assert second.start_ms == pytest.approx(first.end_ms) == pytest.approx(110.4)
    assert t.iteration_ms == pytest.approx(110.4 + 9.6)
    assert t.gpu_busy == pytest.approx(90.0 / 120.0)
    # One burst from 60 ms to the end: the bytes at the NIC rate, nothing idle after.
    phases = [(round(p.duration_ms, 6), p.gbps) for p in timeline_phases(t, 5.0)]
    assert phases == [(60.0, 0.0), (60.0, 5.0)]


def test_one_worker_sends_nothing_and_the_ring_formula_holds() -> None:
    t = ddp_timeline(SMALL, compute_ms=90.0, workers=1, nic_gbps=50.0)
    assert t.iteration_ms == pytest.approx(90.0) and t.gpu_busy == pytest.approx(1.0)
    assert [(p.duration_ms, p.gbps) for p in timeline_phases(t, 50.0)] == [(90.0, 0.0)]
    assert ring_ms(1e6, 2, 8.0) == pytest.approx(1.0)  # 2 x 1/2 x 1 MB at 8 Gbit/s


def test_short_gaps_close_without_sending_a_bucket_early() -> None:
    # Bursts 10-12, 12.4-13, 20-22: the 0.4 ms gap closes by starting the first burst
    # 0.4 ms later (never before its bucket is ready); the 7 ms gap stays.
    buckets = (
        Bucket(("c",), 1.0, 10.0, 10.0, 12.0),
        Bucket(("b",), 1.0, 12.4, 12.4, 13.0),
        Bucket(("a",), 1.0, 20.0, 20.0, 22.0),
    )
    t = DdpTimeline(5.0, 20.0, buckets)
    phases = [(round(p.duration_ms, 6), p.gbps) for p in timeline_phases(t, 50.0)]
    assert phases == [(10.4, 0.0), (2.6, 50.0), (7.0, 0.0), (2.0, 50.0), (3.0, 0.0)]
    # Bursts are capped: with max_bursts=1 the 7 ms gap closes too and the end stays at 22.
    one = [(round(p.duration_ms, 6), p.gbps) for p in timeline_phases(t, 50.0, max_bursts=1)]
    assert one == [(17.4, 0.0), (4.6, 50.0), (3.0, 0.0)]
    # The bytes at the NIC rate are kept in every case: 4.6 ms of bursts.
    for got in (phases, one):
        assert sum(d for d, g in got if g) == pytest.approx(4.6)
