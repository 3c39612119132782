"""The 95% t-interval against a case worked by hand."""

from __future__ import annotations

import math

import pytest

from emulation.reproduce.stats import interval, t95


def test_interval_of_eight_values_matches_the_hand_computation() -> None:
    # mean 5; sample sd sqrt(32/7) = 2.13809; t(7) = 2.365; half = 2.365 * 2.13809 / sqrt(8)
    got = interval([2, 4, 4, 4, 5, 5, 7, 9])
    half = 2.365 * math.sqrt(32 / 7) / math.sqrt(8)
    assert got.mean == 5.0 and got.n == 8
    assert got.low == pytest.approx(5 - half, abs=1e-6) and got.low == pytest.approx(
        3.2123, abs=1e-4
    )
    assert got.high == pytest.approx(6.7877, abs=1e-4)


def test_one_value_or_an_infinite_one_has_no_interval() -> None:
    assert interval([1.3]).low is None and interval([1.3]).mean == 1.3
    inf = interval([1.0, math.inf])
    assert inf.mean == math.inf and inf.low is None and inf.n == 2
    same = interval([2.0, 2.0, 2.0])
    assert (same.low, same.high) == (2.0, 2.0)


def test_t_table_rows_and_between_rows_take_the_smaller_df() -> None:
    assert t95(1) == 12.706 and t95(9) == 2.262 and t95(45) == 2.021 and t95(500) == 1.96
    with pytest.raises(ValueError):
        t95(0)
    with pytest.raises(ValueError):
        interval([])
