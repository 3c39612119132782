"""What the report computes from the 10 ms telemetry, against cases worked by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from emulation.emulate.runner import link_rates
from emulation.emulate.telemetry_series import (
    JobStarts,
    Queues,
    Telemetry,
    TelemetryFileError,
    cdf_points,
    choose_window,
    downsample,
    iteration_marks,
    job_starts,
    link_utilisation,
    queue_depth,
    read_queues,
    read_telemetry,
    sample_interval,
    shared_range,
)
from emulation.jobs.records import IterationRecord
from topologies.library import load_topology


def _starts(job: str, starts: list[float], ends: list[float], model: str = "vgg19") -> JobStarts:
    return JobStarts(job, model, np.array(starts), np.array(ends))


def test_utilisation_uses_the_topologys_scaled_rate_and_splits_the_link_by_job() -> None:
    # tor1->agg1 is 50 Gbit/s in the testbed; at S = 0.001 it carries 0.05 Gbit/s, so a
    # 10 ms sample holds at most 0.01 * 0.05e9 / 8 = 62,500 bytes.
    capacity = link_rates(load_topology("cassini-testbed"), 0.001)["tor1->agg1"]
    assert capacity == pytest.approx(0.05)
    tel = Telemetry.of([
        (10.01, "tor1->agg1", "a", 62_500, 42, 0),   # a alone, full
        (10.02, "tor1->agg1", "a", 15_625, 11, 0),   # a quarter, b three quarters
        (10.02, "tor1->agg1", "b", 46_875, 32, 3),
        (10.02, "tor1->agg2", "b", 62_500, 42, 0),   # another link: not counted
        (10.04, "tor1->agg1", "other", 6_250, 4, 0),  # 10.03 idle: no row at all
        (10.05, "tor1->agg1", "b", 1, 1, 0),          # outside the window
    ])  # fmt: skip
    u = link_utilisation(tel, "tor1->agg1", capacity, (10.0, 10.04), 0.01)
    assert u.jobs == ("a", "b", "other")  # traffic of no job last
    assert u.times_s.tolist() == [10.01, 10.02, 10.03, 10.04]
    np.testing.assert_allclose(
        u.share, [[1.0, 0.25, 0.0, 0.0], [0.0, 0.75, 0.0, 0.0], [0.0, 0.0, 0.0, 0.1]]
    )


def test_samples_off_the_nominal_period_are_each_their_own_point() -> None:
    # a period of 10.1 ms against a nominal 10 ms: 100 samples later a fixed grid would be
    # a whole sample off and put two samples in one slot
    times = [round(0.0101 * k, 6) for k in range(1, 201)]
    tel = Telemetry.of([(t, "l", "a", 625, 1, 0) for t in times])
    u = link_utilisation(tel, "l", 1e-3, (0.0, 2.1), 0.01)
    assert u.times_s.tolist() == times
    np.testing.assert_allclose(u.share, [[0.5] * 200])


def test_a_gap_without_samples_reads_as_zero_one_period_before_the_next() -> None:
    tel = Telemetry.of([(0.01, "l", "a", 1250, 1, 0), (0.02, "l", "a", 625, 1, 0),
                        (0.06, "l", "a", 1250, 1, 0), (0.07, "m", "b", 1, 1, 0)])  # fmt: skip
    u = link_utilisation(tel, "l", 1e-3, (0.0, 0.1), 0.01)
    assert u.times_s.tolist() == [0.01, 0.02, 0.05, 0.06, 0.07]
    np.testing.assert_allclose(u.share, [[1.0, 0.5, 0.0, 1.0, 0.0]])


def test_a_link_without_a_rate_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="link l: capacity 0"):
        link_utilisation(Telemetry.of([]), "l", 0.0, (0.0, 1.0), 0.01)


def test_window_covers_a_few_iterations_of_the_slowest_job_where_both_run() -> None:
    # a: 400 ms iterations from 0 s to 8 s; b: 200 ms from 2 s to 10 s. Both run 2-8 s,
    # middle 5 s; four of a's iterations are 1.6 s: 4.2-5.8 s.
    a = _starts("a", list(np.arange(0, 8, 0.4)), list(np.arange(0.4, 8.4, 0.4)))
    b = _starts("b", list(np.arange(2, 10, 0.2)), list(np.arange(2.2, 10.2, 0.2)))
    assert choose_window({"a": a, "b": b}, 0.0, 12.0, iterations=4) == pytest.approx((4.2, 5.8))
    # samples end at 5 s: the window slides back to end there
    assert choose_window({"a": a, "b": b}, 0.0, 5.0, iterations=4) == pytest.approx((3.4, 5.0))


def test_window_of_jobs_that_barely_overlap_sits_in_the_middle_of_the_run() -> None:
    a = _starts("a", [0.0, 1.0, 2.0], [1.0, 2.0, 3.0])
    b = _starts("b", [2.5, 3.5, 4.5], [3.5, 4.5, 5.5])
    # they overlap 2.5-3.0 s, less than 2 iterations of 1 s: the middle of 0-5.5 s
    assert choose_window({"a": a, "b": b}, 0.0, 6.0, iterations=2) == pytest.approx((1.75, 3.75))


def test_window_without_iterations_is_the_first_two_seconds_of_samples() -> None:
    one = _starts("a", [0.5], [0.8])
    assert choose_window({"a": one}, 3.0, 60.0) == (3.0, 5.0)
    assert choose_window({}, 3.0, 4.0) == (3.0, 4.0)


def test_iteration_starts_are_the_jobs_first_worker_on_the_runs_clock_in_seconds() -> None:
    recs = [
        IterationRecord("a", "vgg19", 0, 0, 1_000.0, 1_300.0, 1, 0.0, 0.0, False),
        IterationRecord("a", "vgg19", 1, 0, 1_002.0, 1_305.0, 1, 0.0, 0.0, False),
        IterationRecord("a", "vgg19", 1, 1, 1_310.0, 1_600.0, 1, 0.0, 0.0, False),
        IterationRecord("b", "bert", 0, 0, 1_100.0, 1_200.0, 1, 0.0, 0.0, False),
    ]
    s = job_starts(recs)
    assert s["a"].starts_s.tolist() == [1.0, 1.31]
    assert s["a"].ends_s.tolist() == [1.305, 1.6]
    assert (s["b"].model, s["b"].starts_s.tolist()) == ("bert", [1.1])


def test_marks_per_iteration_go_by_the_samples_middle_and_skip_other_jobs() -> None:
    s = _starts("a", [1.0, 1.3], [1.3, 1.6])
    tel = Telemetry.of([
        (1.00, "l", "a", 1, 1, 100),  # middle 0.995: before the first iteration
        (1.01, "l", "a", 1, 1, 1),
        (1.30, "l", "a", 1, 1, 2),    # middle 1.295: still iteration 0
        (1.30, "m", "a", 1, 1, 4),    # another link of the same job counts too
        (1.31, "l", "a", 1, 1, 8),    # middle 1.305: iteration 1
        (1.31, "l", "b", 1, 1, 16),   # another job
        (1.61, "l", "a", 1, 1, 32),   # middle 1.605: after the last end
    ])  # fmt: skip
    assert iteration_marks(tel, s, 0.01).tolist() == [7.0, 8.0]
    assert iteration_marks(tel, _starts("a", [], []), 0.01).size == 0


def test_cdf_points_and_one_colour_range_for_every_scheduler() -> None:
    x, y = cdf_points(np.array([4.0, 0.0, 4.0, 1.0]))
    assert (x.tolist(), y.tolist()) == ([0.0, 1.0, 4.0, 4.0], [0.25, 0.5, 0.75, 1.0])
    themis, cassini = np.array([[0.0, 50.0], [3.0, 1.0]]), np.array([[0.0, 5.0]])
    assert shared_range([themis, cassini]) == (0.0, 50.0)
    assert shared_range([themis + 2, cassini + 2], floor=None) == (2.0, 52.0)


def test_downsample_keeps_every_spike_and_the_order_of_x() -> None:
    x = np.arange(10_000.0)
    y = np.zeros(10_000)
    y[[17, 5_003, 9_998]] = [5.0, 9.0, 7.0]
    dx, dy = downsample(x, y, 100)
    assert dx.size <= 100
    assert np.all(np.diff(dx) > 0)
    assert {17.0, 5_003.0, 9_998.0} <= set(dx.tolist())
    assert sorted(dy.tolist())[-3:] == [5.0, 7.0, 9.0]
    same = downsample(x[:5], y[:5], 100)
    assert same[0].tolist() == x[:5].tolist()


def test_sample_interval_is_the_common_step_when_idle_samples_have_no_row() -> None:
    t = np.array([0.01, 0.02, 0.03, 0.5, 0.51, 0.52, 0.52, 2.0])
    assert sample_interval(t) == 0.01


def test_queue_depth_per_sample_zero_where_no_row() -> None:
    q = Queues.of([(1.02, "l", 7), (1.01, "l", 4), (1.01, "m", 99), (0.99, "l", 1),
                   (1.03, "m", 5), (1.05, "l", 3), (1.05, "l", 2), (1.09, "l", 8)])  # fmt: skip
    t, d = queue_depth(q, "l", (1.0, 1.06), 0.01)
    # 1.03: a sample without a row for l (zero); 1.04 none at all (zero before 1.05);
    # two rows at 1.05: the deeper one
    assert t.tolist() == [1.01, 1.02, 1.03, 1.04, 1.05]
    assert d.tolist() == [4, 7, 0, 0, 3]


def test_files_read_by_column_name_and_a_missing_column_is_named(tmp_path: Path) -> None:
    good = tmp_path / "telemetry.csv"
    good.write_text(
        "time_s,link,job,bytes,packets,ce_marks\n1.01,tor1->agg1,a,1500,1,0\n"
        "1.02,tor1->agg1,other,3000,2,1\n"
    )
    seg = tmp_path / "seg.csv"
    seg.write_text("link,time_s,job,bytes,packets,ce_marks\ntor1->agg1,2.5,b,9,1,1\n")
    tel = read_telemetry([good, seg])
    assert tel.time_s.tolist() == [1.01, 1.02, 2.5]
    assert tel.job.tolist() == ["a", "other", "b"]
    assert tel.bytes.tolist() == [1500, 3000, 9]
    queues = tmp_path / "queues.csv"
    queues.write_text("time_s,link,max_depth_cells\n1.01,tor1->agg1,12\n")
    assert read_queues([queues]).max_depth_cells.tolist() == [12]
    bad = tmp_path / "old.csv"
    bad.write_text("time_s,link,bytes\n1.0,l,5\n")
    with pytest.raises(TelemetryFileError, match=r"old.csv: no column job, packets, ce_marks"):
        read_telemetry([bad])
