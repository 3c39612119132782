"""Up phases, their spread and the grid period, from utilisation series made by hand."""

from __future__ import annotations

import numpy as np
import pytest

from emulation.emulate.telemetry_series import Telemetry
from emulation.jobs.records import IterationRecord
from emulation.profile.measure import NotMeasurable, busiest_link, measure
from emulation.profile.phases import (
    Spread,
    grid_period_ms,
    per_iteration,
    up_segments,
    up_threshold,
)

DT = 0.01


def series(pattern: str) -> tuple[np.ndarray, np.ndarray]:
    """'.' is an idle sample, a digit d a utilisation of d/10, one sample each."""
    share = np.array([0.0 if c == "." else int(c) / 10 for c in pattern])
    return np.round(np.arange(1, share.size + 1) * DT, 9), share


def test_threshold_is_half_the_peak_not_one_outlier() -> None:
    # 99 samples at 0.8 and one at 1.0: the 99th percentile is 0.8, so the threshold 0.4
    share = np.array([0.8] * 99 + [1.0])
    assert up_threshold(share) == pytest.approx(0.4, abs=0.002)
    assert up_threshold(np.zeros(5)) == 0.0


def test_segments_edges_and_durations() -> None:
    # Up in samples 3-5 (ending 0.04-0.06); the edge samples at 0.3 < 0.45 are not Up
    t, u = series("..39993..")
    s = up_segments(t, u, DT)
    assert s.threshold == pytest.approx(0.45)
    assert s.starts_s.tolist() == [0.03]  # the first Up sample ends at 0.04
    assert s.durations_s.tolist() == [0.03]
    assert s.mean_share.tolist() == pytest.approx([0.9])


def test_one_sample_dip_joins_two_runs_two_do_not() -> None:
    t, u = series("99.99..99")
    s = up_segments(t, u, DT)
    assert s.starts_s.tolist() == [0.0, 0.07]
    assert s.durations_s.tolist() == [0.05, 0.02]
    strict = up_segments(t, u, DT, gap_samples=0)
    assert strict.durations_s.tolist() == [0.02, 0.02, 0.02]


def test_silent_series_has_no_up_phase() -> None:
    t, u = series("......")
    assert up_segments(t, u, DT).starts_s.size == 0


def test_per_iteration_offsets_lengths_and_missing_iterations() -> None:
    # iterations start at 0.00, 0.10, 0.20, 0.30, 0.40 (ten samples each): Up 40 ms in
    # for 30 ms in iteration 0, none in 1, 60 ms in for 30 ms in 2, 50 ms in for 40 ms in 3
    t, u = series("....999..." + ".........." + "......999." + ".....9999.")
    s = up_segments(t, u, DT)
    p = per_iteration(s, np.array([0.0, 0.1, 0.2, 0.3, 0.4]))
    assert p.iteration.tolist() == [0, 2, 3]
    assert p.up_ms.tolist() == [30.0, 30.0, 40.0]
    assert p.offset_ms.tolist() == [40.0, 60.0, 50.0]
    assert p.length_ms.tolist() == [100.0, 100.0, 100.0]


def test_spread_and_grid_period_by_hand() -> None:
    times = np.array([210.0] * 18 + [220.0, 240.0])
    s = Spread.of(times)
    assert s.mean == pytest.approx(212.0)
    assert s.p50 == 210.0
    # np.percentile, linear: p95 at rank 18.05 -> 220 + 0.05 * 20 = 221.0
    assert s.p95 == pytest.approx(221.0)
    assert grid_period_ms(times) == 221.0
    assert grid_period_ms(np.array([200.0, 200.2])) == 200.5  # rounded up to 0.5 ms
    with pytest.raises(ValueError):
        grid_period_ms(np.zeros(0))


def _job(
    period_ms: float, offset_ms: float, up_ms: float, n: int, gbps_scaled: float
) -> tuple[list[IterationRecord], Telemetry]:
    """A job whose iterations start every `period_ms` and whose Up phase, `offset_ms` into
    each, carries `gbps_scaled` Gbit/s on link 'l' (capacity 0.05) for `up_ms`."""
    records: list[IterationRecord] = []
    rows: list[tuple[float, str, str, int, int, int]] = []
    for k in range(n):
        start = 1000.0 + k * period_ms
        for w in range(2):
            records.append(
                IterationRecord("j", "m", w, k, start, start + period_ms - 1, 1, 0.0, 0.0, False)
            )
        first = (start + offset_ms) / 1e3
        for i in range(int(up_ms / 10)):
            end = round(first + (i + 1) * DT, 9)
            rows.append((end, "l", "j", int(gbps_scaled * 1e9 / 8 * DT), 1, 0))
            rows.append((end, "x", "j", 10, 1, 0))  # a second, quieter link
    rows.append((1.0, "l", "j", 0, 0, 0))  # samples start at the run's start
    rows.sort()
    return records, Telemetry.of(rows)


def test_measure_a_made_up_job() -> None:
    records, telemetry = _job(200.0, 100.0, 80.0, 12, 0.04)
    m = measure("m", 2, records, telemetry, {"l": 0.05, "x": 0.05}, scale=0.001, job="j")
    assert m.link == "l"
    assert m.iterations == 10  # 12 starts, the first left out: 11 starts, 10 intervals
    assert m.iteration_ms.mean == pytest.approx(200.0)
    assert m.up_ms.p50 == pytest.approx(80.0)
    assert m.up_offset_ms.p50 == pytest.approx(100.0, abs=0.01)
    assert m.up_gbps == pytest.approx(40.0)  # 0.04 Gbit/s scaled back by S = 0.001
    assert m.period_ms == 200.0
    prof = m.to_profile()
    assert [(round(p.duration_ms, 3), round(p.gbps, 3)) for p in prof.phases] == [
        (100.0, 0.0),
        (80.0, 40.0),
        (20.0, 0.0),
    ]
    # every Up phase 80 ms on 10 ms samples: planned up to one sample longer
    assert prof.up_slack_ms == pytest.approx(10.0)
    entry = m.to_dict()
    assert entry["period_ms"] == 200.0 and entry["measured"]["up_ms"]["p99"] == 80.0


def test_measure_refuses_a_job_it_cannot_see() -> None:
    records, telemetry = _job(200.0, 100.0, 80.0, 12, 0.04)
    with pytest.raises(NotMeasurable, match="no telemetry"):
        busiest_link(telemetry, "other-job")
    with pytest.raises(NotMeasurable, match="iterations"):
        measure("m", 2, records[:4], telemetry, {"l": 0.05, "x": 0.05}, 0.001, job="j")


def test_a_starved_iteration_does_not_stretch_the_grid() -> None:
    from dataclasses import replace

    records, telemetry = _job(200.0, 100.0, 80.0, 12, 0.04)
    # iteration 5 runs 100 ms long (every later start moves), its replica woke 30 ms late
    shifted = [
        replace(r, start_ms=r.start_ms + (100.0 if r.iteration > 5 else 0.0),
                late_max_ms=30.0 if r.iteration == 5 else 0.2)
        for r in records
    ]  # fmt: skip
    links = {"l": 0.05, "x": 0.05}
    m = measure("m", 2, shifted, telemetry, links, 0.001, job="j", calm_grid=True)
    assert m.iteration_ms.p99 > 280.0  # the spread keeps it
    assert m.starved == 1
    assert m.period_ms == 200.0  # the calm grid does not
    full = measure("m", 2, shifted, telemetry, links, 0.001, job="j")
    assert full.period_ms == 255.0  # the default: p95 of all ten, 200 + 0.55 x 100


def test_samples_missing_in_time_still_split_phases() -> None:
    # only the Up samples have rows: two phases 100 ms apart are not one
    t = np.array([0.01, 0.02, 0.03, 0.13, 0.14])
    s = up_segments(t, np.full(5, 0.9), DT)
    assert s.starts_s.tolist() == [0.0, 0.12]
    assert s.durations_s.tolist() == [0.03, 0.02]
