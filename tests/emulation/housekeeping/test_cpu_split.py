"""The packet loop's core and the hosts' receive steering (emulation/housekeeping/cpu_split.py)."""

from __future__ import annotations

import pytest

from emulation.housekeeping.cpu_split import CpuSplit, split_cpus
from emulation.softswitch.datapath import wakeup_granularity
from emulation.softswitch.tm_config import PortSettings, TmConfig
from topologies.errors import UserInputError


def test_two_cpus_give_the_loop_the_last_and_the_hosts_the_first() -> None:
    split = split_cpus({1, 0})
    assert split == CpuSplit(loop_cpu=1, host_cpus=frozenset({0}))
    assert split.rps_mask == "1"


def test_one_cpu_pins_nothing() -> None:
    assert split_cpus({3}) is None
    assert split_cpus([]) is None


def test_the_mask_has_one_hex_word_per_32_cpus_most_significant_first() -> None:
    split = split_cpus(range(40))
    assert split is not None and split.loop_cpu == 39
    assert split.rps_mask == "7f,ffffffff"  # CPUs 0-38
    assert split_cpus({2, 5, 7}).rps_mask == "24"  # type: ignore[union-attr]


def test_a_negative_cpu_is_refused_by_name() -> None:
    with pytest.raises(UserInputError, match="-1"):
        split_cpus({-1, 0})


def test_the_loop_wakes_at_most_once_per_two_fifths_of_a_frame_on_its_fastest_port() -> None:
    # 50 Mbit/s (S = 0.001): (1514 + 24) B x 8 / 50e6 = 246 us, two fifths 98.4 us.
    tm = TmConfig(default_rate_gbps=0.05)
    assert wakeup_granularity(tm, [1, 2]) == pytest.approx(98.432e-6)
    faster = TmConfig(default_rate_gbps=0.05, ports={2: PortSettings(rate_gbps=0.1)})
    assert wakeup_granularity(faster, [1, 2]) == pytest.approx(49.216e-6)
    assert wakeup_granularity(TmConfig(default_rate_gbps=1.0), [1]) == pytest.approx(20e-6)
    assert wakeup_granularity(TmConfig(default_rate_gbps=0.01), [1]) == pytest.approx(100e-6)
