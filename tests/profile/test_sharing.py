"""The sharing figures of jobs through one link, from samples made by hand."""

from __future__ import annotations

import numpy as np
import pytest

from emulation.emulate.telemetry_series import Telemetry
from emulation.jobs.records import IterationRecord
from emulation.profile.sharing import jain, measure_run, sharing_figures

DT = 0.01
CAP = 0.05  # Gbit/s: a sample carries 62,500 bytes


def test_jain_by_hand() -> None:
    assert jain(np.array([0.3, 0.3, 0.3])) == 1.0
    # (0.6 + 0.2)^2 / (2 x (0.36 + 0.04)) = 0.64 / 0.8
    assert jain(np.array([0.6, 0.2])) == pytest.approx(0.8)


def test_figures_split_samples_by_jobs_up_at_once() -> None:
    share = np.array([[0.9, 0.45, 0.3, 0.2], [0.0, 0.45, 0.3, 0.0], [0.0, 0.0, 0.3, 0.0]])
    figures = {f.active: f for f in sharing_figures(share)}
    assert sorted(figures) == [1, 2, 3]  # the last sample: nobody above a quarter
    assert figures[1].utilisation == pytest.approx(0.9)
    assert figures[2].utilisation == pytest.approx(0.9) and figures[2].fairness == 1.0
    assert figures[3].utilisation == pytest.approx(0.9) and figures[3].samples == 1


def test_two_jobs_stretched_to_twice_their_up_phase() -> None:
    """Alone each job's Up is 40 ms at the full link; together, aligned, each gets half the
    link for 80 ms: stretch 2, the link full, fairness 1."""
    rows, records = [], []
    for k in range(6):
        start = 10.0 + k * 0.2
        for job in ("a", "b"):
            for w in range(2):
                records.append(IterationRecord(job, "m", w, k, start * 1e3, start * 1e3 + 150,
                                               1, 0.0, 0.0, False))  # fmt: skip
            for i in range(8):  # 80 ms at half the link, 50 ms into the iteration
                end = round(start + 0.05 + (i + 1) * DT, 9)
                rows.append((end, "l", job, 31_250, 1, 0))
    rows.append((10.0, "l", "a", 0, 0, 0))
    run = measure_run(records, Telemetry.of(sorted(rows)), "l", CAP, alone_up_ms=40.0)
    assert run.jobs == 2
    assert run.up_ms == {"a": 80.0, "b": 80.0}
    assert run.stretch == pytest.approx(2.0)
    (two,) = [f for f in run.by_active if f.active == 2]
    assert two.utilisation == pytest.approx(1.0) and two.fairness == 1.0
    assert [f.active for f in run.by_active] == [2]
