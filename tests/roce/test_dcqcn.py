"""DCQCN on a fake clock against hand-computed cases from the paper's equations
(Zhu et al., SIGCOMM 2015, section 3) and ConnectX's documented rules."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulation.roce.dcqcn import (
    DcqcnSettings,
    Increase,
    NpFlow,
    RpState,
    np_on_packet,
    paper_settings,
    rp_advance,
    rp_on_cnp,
    rp_on_sent,
    rp_start,
    scaled,
)

G = 1e9
US = 1e-6
PAPER = paper_settings(40 * G)  # g = 1/256, K = T = 55 us, F = 5, R_AI = 40 Mb/s
NIC = DcqcnSettings(line_rate_bps=50 * G)


def test_one_cnp_then_fast_recovery_by_hand() -> None:
    st0 = rp_on_cnp(PAPER, rp_start(PAPER), 0.0)
    # Rt <- Rc = 40; Rc <- 40 (1 - 1/2) = 20; alpha <- (1 - 1/256) 1 + 1/256 = 1
    assert (st0.rt, st0.rc, st0.alpha) == (40 * G, 20 * G, 1.0)
    # Each 55 us timer event halves the gap to Rt (fast recovery, T = 1..5), and alpha
    # decays once per 55 us without a CNP.
    expected_rc = [30.0, 35.0, 37.5, 38.75, 39.375]
    for k, rc in enumerate(expected_rc, start=1):
        s = rp_advance(PAPER, st0, k * 55 * US + 1 * US)
        assert s.rc == pytest.approx(rc * G, rel=1e-12), k
        assert s.rt == 40 * G
        assert s.timer_stage == k and s.byte_stage == 0
        assert s.alpha == pytest.approx((255 / 256) ** k, rel=1e-12)
    # T = 6 > F: additive increase; Rt = min(40, 40.04) = 40, Rc = (40 + 39.375)/2
    s6 = rp_advance(PAPER, st0, 6 * 55 * US + 1 * US)
    assert s6.rc == pytest.approx(39.6875 * G, rel=1e-12)
    assert s6.last_increase is Increase.TIMER


def test_second_cnp_cuts_with_the_decayed_alpha_by_hand() -> None:
    st0 = rp_on_cnp(PAPER, rp_start(PAPER), 0.0)
    s = rp_on_cnp(PAPER, st0, 500 * US)
    # 9 timer events (55..495 us): 5 fast recovery, then 4 additive with Rt capped at 40.
    rc_before = 39.9609375 * G  # 39.375 -> 39.6875 -> 39.84375 -> 39.921875 -> 39.9609375
    alpha_before = (255 / 256) ** 9  # decays at 55, 110, ..., 495 us
    assert s.rt == pytest.approx(rc_before, rel=1e-12)  # the paper: Rt <- Rc on every CNP
    assert s.rc == pytest.approx(rc_before * (1 - alpha_before / 2), rel=1e-12)
    assert s.alpha == pytest.approx((255 / 256) * alpha_before + 1 / 256, rel=1e-12)
    assert (s.timer_stage, s.byte_stage, s.cuts) == (0, 0, 2)


def test_alpha_decays_once_per_period_without_cnps() -> None:
    st0 = rp_on_cnp(PAPER, rp_start(PAPER), 0.0)
    # Deadlines at 55 k us; by 1 ms: k = 1..18.
    assert rp_advance(PAPER, st0, 1e-3).alpha == pytest.approx((255 / 256) ** 18, rel=1e-12)
    # ConnectX: g = 5/1024 every 1 us; by 300.5 us, 300 decays from alpha after the CNP.
    n0 = rp_on_cnp(NIC, rp_start(NIC), 0.0)
    assert n0.alpha == pytest.approx((1019 / 1024) * (1023 / 1024) + 5 / 1024, rel=1e-12)
    n = rp_advance(NIC, n0, 300.5 * US)
    assert n.alpha == pytest.approx(n0.alpha * (1019 / 1024) ** 300, rel=1e-9)


def test_recovery_to_line_rate_without_cnps_by_hand() -> None:
    # Two CNPs 10 us apart: Rt <- 20, Rc <- 10 (alpha still 1). Timer only, no bytes.
    s = rp_on_cnp(PAPER, rp_on_cnp(PAPER, rp_start(PAPER), 0.0), 10 * US)
    assert (s.rt, s.rc) == (20 * G, 10 * G)
    # Events at 10 + 55 k us. k = 1..5 fast recovery: 15, 17.5, 18.75, 19.375, 19.6875.
    # Then additive increase j = k - 5: Rt = 20 + 0.04 j, and the gap d = Rt - Rc follows
    # d_j = (d_{j-1} + 0.04)/2 from d_0 = 0.3125, so d_j = 0.04 + 0.2725 / 2^j.
    # Rc >= 39.62 first when 20 + 0.04 j - 0.04 >= 39.62: j = 492 (j = 491 gives 39.60),
    # i.e. event k = 497 at 10 + 497 * 55 us = 27.345 ms.
    first = _first_event_at_or_above(s, 39.62 * G, start=10 * US)
    assert first == pytest.approx(10 * US + 497 * 55 * US)
    # Line rate exactly: Rt reaches 40 at j = 500 (d = 0.04); then the gap halves each
    # event until it is within a millionth of the line rate (40 kb/s, our choice):
    # 0.04 G / 2^10 = 39 kb/s at j = 510, k = 515.
    at_line = _first_event_at_or_above(s, 40 * G, start=10 * US)
    assert at_line == pytest.approx(10 * US + 515 * 55 * US)
    done = rp_advance(PAPER, s, at_line + 1 * US)
    assert done.timer_at is None  # nothing left to increase: the timer stops


def _first_event_at_or_above(s: RpState, rate: float, start: float) -> float:
    for k in range(1, 2000):
        t = start + k * 55 * US
        s = rp_advance(PAPER, s, t + 1 * US)
        if s.rc >= rate:
            return t
    raise AssertionError("never recovered")


def test_byte_counter_and_hyper_increase_by_hand() -> None:
    s = DcqcnSettings(
        line_rate_bps=10 * G,
        g=1 / 256,
        alpha_period_s=1.0,
        initial_alpha=1.0,
        min_dec_fac=0.0,
        rate_reduce_monitor_period_s=0.0,
        clamp_tgt_rate=True,
        time_reset_s=100 * US,
        byte_reset=1000,
        threshold=1,
        ai_rate_bps=0.1 * G,
        hai_rate_bps=1 * G,
    )
    st0 = rp_on_cnp(s, rp_on_cnp(s, rp_start(s), 0.0), 1 * US)
    assert (st0.rt, st0.rc) == (5 * G, 2.5 * G)
    steps = [
        ("bytes", 2 * US, 1000, 5.0, 3.75),  # BC=1, T=0: fast recovery
        ("bytes", 3 * US, 1000, 5.1, 4.425),  # BC=2 > F, T=0: additive
        ("timer", 101.5 * US, 0, 5.2, 4.8125),  # T=1, BC=2: additive
        ("timer", 201.5 * US, 0, 6.2, 5.50625),  # T=2, BC=2: hyper, i = 2 - 1
        ("bytes", 202 * US, 1000, 7.2, 6.353125),  # BC=3: hyper, i = min(2, 3) - 1
        ("timer", 301.5 * US, 0, 9.2, 7.7765625),  # T=3: hyper, i = 2
        ("bytes", 302 * US, 2000, 10.0, 9.444140625),  # BC=4, 5: i = 2, Rt capped at 10
    ]
    state = st0
    for kind, t, nbytes, rt, rc in steps:
        state = rp_on_sent(s, state, nbytes, t) if kind == "bytes" else rp_advance(s, state, t)
        assert state.rt == pytest.approx(rt * G, rel=1e-12), (kind, t)
        assert state.rc == pytest.approx(rc * G, rel=1e-12), (kind, t)


def test_connectx_first_cnp_and_cut_within_the_monitor_period() -> None:
    a0 = 1023 / 1024
    s1 = rp_on_cnp(NIC, rp_start(NIC), 0.0)
    # rpg_gd = 11: Rc (1 - alpha/2) with alpha = initial_alpha_value; Rt keeps 50 (no clamp).
    assert s1.rc == pytest.approx(50 * G * (1 - a0 / 2), rel=1e-12)
    assert s1.rt == 50 * G
    # A CNP 2.5 us later is inside the 4 us monitor period: alpha rises now, the cut waits.
    s2 = rp_on_cnp(NIC, s1, 2.5 * US)
    assert s2.cut_pending and s2.rc == s1.rc
    alpha2 = (1019 / 1024) * (s1.alpha * (1019 / 1024) ** 2) + 5 / 1024  # decays at 1, 2 us
    assert s2.alpha == pytest.approx(alpha2, rel=1e-12)
    s3 = rp_advance(NIC, s2, 4.2 * US)
    alpha3 = alpha2 * (1019 / 1024)  # its decay at 3.5 us comes before the cut at 4 us
    assert not s3.cut_pending and s3.cuts == 2
    assert s3.rc == pytest.approx(s1.rc * (1 - alpha3 / 2), rel=1e-12)
    assert s3.rt == 50 * G  # no increase between the cuts: Rt stays
    assert s3.last_cut_at == pytest.approx(4 * US)


@pytest.mark.parametrize(("after_time_inc", "rt_becomes_rc"), [(True, True), (False, False)])
def test_connectx_clamps_the_target_after_a_timer_increase(
    after_time_inc: bool, rt_becomes_rc: bool
) -> None:
    nic = DcqcnSettings(line_rate_bps=50 * G, clamp_tgt_rate_after_time_inc=after_time_inc)
    s = rp_advance(nic, rp_on_cnp(nic, rp_start(nic), 0.0), 301 * US)
    assert s.last_increase is Increase.TIMER and s.timer_stage == 1
    # F = 1: one fast-recovery step, Rc = (50 + Rc)/2
    assert s.rc == pytest.approx((50 * G + 50 * G * (1 - (1023 / 1024) / 2)) / 2, rel=1e-12)
    cut = rp_on_cnp(nic, s, 302 * US)
    assert cut.rt == (s.rc if rt_becomes_rc else 50 * G)


def test_min_dec_fac_and_min_rate_bound_a_cut() -> None:
    bounded = DcqcnSettings(line_rate_bps=10 * G, rpg_gd=10, min_dec_fac=0.75, min_rate_bps=8 * G)
    # alpha/2^(10-10) = ~1 would cut to ~0; min_dec_fac keeps 75 %, min_rate 8 G
    s = rp_on_cnp(bounded, rp_start(bounded), 0.0)
    assert s.rc == 8 * G
    loose = DcqcnSettings(line_rate_bps=10 * G, rpg_gd=10, min_dec_fac=0.75)
    assert rp_on_cnp(loose, rp_start(loose), 0.0).rc == pytest.approx(7.5 * G)


def test_rate_on_first_cnp() -> None:
    s = DcqcnSettings(line_rate_bps=50 * G, rate_on_first_cnp_bps=10 * G)
    first = rp_on_cnp(s, rp_start(s), 0.0)
    assert (first.rc, first.rt) == (10 * G, 10 * G)


def test_notification_point_coalesces_per_flow() -> None:
    flows = {"a": NpFlow(), "b": NpFlow()}
    sent = []
    # (flow, time us, CE): N = 50 us in the paper's settings
    trace = [
        ("a", 0, True),
        ("b", 10, True),
        ("a", 10, True),
        ("a", 30, False),
        ("a", 49.9, True),
        ("a", 50.5, True),
        ("b", 55, True),
        ("a", 120, True),
    ]
    for flow, t, ce in trace:
        flows[flow], cnp = np_on_packet(PAPER, flows[flow], ce, t * US)
        if cnp:
            sent.append((flow, t))
    assert sent == [("a", 0), ("b", 10), ("a", 50.5), ("a", 120)]
    assert (flows["a"].marked, flows["a"].cnps) == (5, 3)
    assert (flows["b"].marked, flows["b"].cnps) == (2, 1)
    # ConnectX's 4 us interval: marks 5 us apart each get their CNP.
    f, n = NpFlow(), 0
    for t in range(0, 50, 5):
        f, cnp = np_on_packet(NIC, f, True, t * US)
        n += cnp
    assert n == 10 == f.cnps == f.marked


def test_scaling_keeps_what_its_docstring_says() -> None:
    scale = 0.001
    keep_timers = scaled(NIC, scale, "timers")
    keep_packets = scaled(NIC, scale, "packets")
    assert keep_timers.line_rate_bps == pytest.approx(50e6)
    assert keep_timers.time_reset_s == NIC.time_reset_s
    assert keep_timers.byte_reset == pytest.approx(NIC.byte_reset * scale)
    assert keep_packets.time_reset_s == pytest.approx(NIC.time_reset_s / scale)
    assert keep_packets.min_time_between_cnps_s == pytest.approx(4e-3)
    assert keep_packets.byte_reset == NIC.byte_reset
    # The same CNPs at the same wall times and the same bytes x S: "timers" gives the same
    # rate as a share of the line rate at every instant.
    # (Off the 1 us alpha deadlines, where rounding of t and t / S could differ.)
    events = [(0.0, "cnp", 0), (40.5 * US, "bytes", 300_000), (700.5 * US, "cnp", 0)]
    events += [((t + 0.5) * US, "bytes", 65_534) for t in range(710, 2000, 50)]
    full = _run(NIC, events, time_factor=1.0, byte_factor=1.0)
    small = _run(keep_timers, events, time_factor=1.0, byte_factor=scale)
    assert [r / NIC.line_rate_bps for r in full] == pytest.approx(
        [r / keep_timers.line_rate_bps for r in small], rel=1e-9
    )
    # "packets": the same bytes at times / S give the same shares, 1/S later.
    slow = _run(keep_packets, events, time_factor=1 / scale, byte_factor=1.0)
    assert [r / NIC.line_rate_bps for r in full] == pytest.approx(
        [r / keep_packets.line_rate_bps for r in slow], rel=1e-6
    )
    with pytest.raises(ValueError, match="keep='both'"):
        scaled(NIC, scale, "both")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="scale 0"):
        scaled(NIC, 0)


def _run(
    s: DcqcnSettings, events: list[tuple[float, str, int]], time_factor: float, byte_factor: float
) -> list[float]:
    state, rates = rp_start(s), []
    for t, kind, n in events:
        now = t * time_factor
        if kind == "cnp":
            state = rp_on_cnp(s, state, now)
        else:
            state = rp_on_sent(s, state, n * byte_factor, now)  # type: ignore[arg-type]
        rates.append(state.rc)
    return rates


def test_settings_reject_bad_values_naming_them() -> None:
    with pytest.raises(ValueError, match="line_rate_bps=0"):
        DcqcnSettings(line_rate_bps=0)
    with pytest.raises(ValueError, match="min_rate_bps=2"):
        DcqcnSettings(line_rate_bps=1, min_rate_bps=2)
    with pytest.raises(ValueError, match="g=0"):
        DcqcnSettings(line_rate_bps=1e9, g=0)


events = st.lists(
    st.tuples(
        st.floats(0, 2e-3),  # time since the previous event
        st.sampled_from(["cnp", "bytes", "tick"]),
        st.integers(0, 200_000),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(events, st.sampled_from(["nic", "paper"]))
def test_rate_stays_within_min_and_line_rate(
    trace: list[tuple[float, str, int]], which: str
) -> None:
    s = NIC if which == "nic" else paper_settings(50 * G)
    state, now = rp_start(s), 0.0
    for dt, kind, n in trace:
        now += dt
        before = rp_advance(s, state, now)
        if kind == "cnp":
            state = rp_on_cnp(s, state, now)
            assert state.rc <= before.rc  # a CNP never raises the rate
        elif kind == "bytes":
            state = rp_on_sent(s, state, n, now)
            assert state.rc >= before.rc  # sending never lowers it
        else:
            state = before
        assert s.min_rate_bps <= state.rc <= state.rt <= s.line_rate_bps
        assert 0 < state.alpha <= 1 or math.isclose(state.alpha, 1)
