"""MLTCP's increase on DCQCN (`emulation/roce/mltcp.py`): hand-computed trajectories on a
fake clock, the reset at an iteration's start, and the compiled rules (`_roce.c`, the QP
state's gain) against the Python ones on the same event traces, to the bit."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulation.roce import dcqcn
from emulation.roce.dcqcn import DcqcnSettings, paper_settings, scaled
from emulation.roce.mltcp import (
    IterationBytes,
    MltcpSettings,
    aggressiveness,
    increase_scaled,
    iteration_sent,
    iteration_start,
)
from emulation.roce.native import compiled, settings_tuple

NOT_BUILT = "the compiled RoCE logic is not built: run scripts/setup.sh"
MS = 1e-3
US = 1e-6

# Rates easy to follow by hand: a CNP sets Rc = Rt = 40 Mb/s; the timer fires each 1 ms;
# F = 1 fast-recovery stage, then additive increase of R_AI x gain (no bytes counted).
HAND = DcqcnSettings(
    line_rate_bps=100e6,
    ai_rate_bps=10e6,
    hai_rate_bps=100e6,
    rate_on_first_cnp_bps=40e6,
    time_reset_s=1 * MS,
    threshold=1,
)


def test_aggressiveness_is_the_line_in_the_fraction_sent() -> None:
    m = MltcpSettings(slope=1.5, intercept=0.25)
    it = IterationBytes(total=1000.0)
    assert aggressiveness(m, it) == 0.25
    assert aggressiveness(m, iteration_sent(it, 200)) == pytest.approx(0.55)
    assert aggressiveness(m, iteration_sent(it, 800)) == pytest.approx(1.45)
    assert aggressiveness(m, iteration_sent(it, 5000)) == 1.75  # clamped at f = 1
    assert aggressiveness(m, IterationBytes()) == 1.0  # no total yet: plain DCQCN


def test_the_fraction_resets_at_each_iteration_start_and_learns_the_total() -> None:
    m = MltcpSettings()
    it = iteration_sent(IterationBytes(), 600)  # first iteration: total unknown
    assert aggressiveness(m, it) == 1.0
    it = iteration_start(it)
    assert it == IterationBytes(total=600, sent=0.0)
    assert aggressiveness(m, it) == 0.25
    it = iteration_sent(it, 600)
    assert aggressiveness(m, it) == 1.75
    assert aggressiveness(m, iteration_start(it)) == 0.25


def _after_cnp(gain: float, times: list[float]) -> list[tuple[float, float]]:
    s = increase_scaled(HAND, gain)
    state = dcqcn.rp_on_cnp(s, dcqcn.rp_start(s), 0.0)
    out = []
    for t in times:
        state = dcqcn.rp_advance(s, state, t)
        out.append((state.rc / 1e6, state.rt / 1e6))
    return out


def _flat(pairs: list[tuple[float, float]]) -> list[float]:
    return [x for pair in pairs for x in pair]


def test_the_flow_further_along_recovers_faster_after_a_cnp() -> None:
    m = MltcpSettings()
    early = aggressiveness(m, IterationBytes(total=1000, sent=200))  # f = 0.2: F = 0.55
    late = aggressiveness(m, IterationBytes(total=1000, sent=800))  # f = 0.8: F = 1.45
    times = [0.5 * MS, 1.0 * MS, 2.0 * MS, 3.0 * MS]
    # By hand: 1 ms fast recovery (Rc = (40 + 40)/2); then Rt += 10 x F, Rc = (Rt + Rc)/2.
    # F = 0.55: Rt 45.5, Rc 42.75; Rt 51, Rc 46.875.
    # F = 1.45: Rt 54.5, Rc 47.25; Rt 69, Rc 58.125.
    got_early, got_late = _after_cnp(early, times), _after_cnp(late, times)
    expected_early = [(40.0, 40.0), (40.0, 40.0), (42.75, 45.5), (46.875, 51.0)]
    expected_late = [(40.0, 40.0), (40.0, 40.0), (47.25, 54.5), (58.125, 69.0)]
    assert _flat(got_early) == pytest.approx(_flat(expected_early))
    assert _flat(got_late) == pytest.approx(_flat(expected_late))
    assert got_late[-1][0] > got_early[-1][0]


def test_hyper_increase_is_scaled_too() -> None:
    # Timer and byte counter both past F = 1: Rt += (min(T, BC) - F) x R_HAI x gain.
    s = increase_scaled(HAND, 0.5)
    state = dcqcn.rp_on_cnp(s, dcqcn.rp_start(s), 0.0)
    state = dcqcn.rp_on_sent(s, state, 2 * int(s.byte_reset), 0.1 * MS)  # BC = 2: (fast, AI)
    # BC 1: fast recovery (40, 40); BC 2: AI, Rt 45, Rc 42.5.
    assert (state.rc / 1e6, state.rt / 1e6) == pytest.approx((42.5, 45.0))
    state = dcqcn.rp_advance(s, state, 2.0 * MS)  # T 1: AI (T<=F<BC), T 2: hyper i = 1
    # T 1: Rt 50, Rc 46.25; T 2: Rt 50 + 1 x 100 x 0.5 = 100, Rc 73.125.
    assert (state.rc / 1e6, state.rt / 1e6) == pytest.approx((73.125, 100.0))


def test_gain_one_is_dcqcn() -> None:
    assert increase_scaled(HAND, 1.0) == HAND
    with pytest.raises(ValueError, match="gain 0"):
        increase_scaled(HAND, 0)
    with pytest.raises(ValueError, match="intercept"):
        MltcpSettings(intercept=0)


SETTINGS = {
    "hand": HAND,
    "nic-scaled": scaled(DcqcnSettings(line_rate_bps=50e9), 0.001),
    "paper": paper_settings(40e9),
}

# (time step, kind: 0 advance, 1 CNP, 2 bytes sent, 3 the gain changes, value)
events = st.lists(
    st.tuples(
        st.one_of(st.floats(0, 20 * US), st.floats(0, 3e-3), st.sampled_from([0.0, 4 * US])),
        st.integers(0, 3),
        st.integers(0, 3_000_000),
        st.floats(0, 1),
    ),
    max_size=80,
)


def _python(s: DcqcnSettings, trace: list[tuple[float, int, float]]) -> list[tuple]:
    state, rows, gained = dcqcn.rp_start(s), [], s
    for now, kind, value in trace:
        if kind == 0:
            state = dcqcn.rp_advance(gained, state, now)
        elif kind == 1:
            state = dcqcn.rp_on_cnp(gained, state, now)
        elif kind == 2:
            state = dcqcn.rp_on_sent(gained, state, value, now)  # type: ignore[arg-type]
        else:
            gained = increase_scaled(s, value)
        rows.append(
            (
                state.rc,
                state.rt,
                state.alpha,
                state.timer_stage,
                state.byte_stage,
                state.cuts,
                state.cut_pending,
                state.timer_at is not None,
            )
        )
    return rows


@settings(max_examples=200, deadline=None)
@given(events, st.sampled_from(sorted(SETTINGS)))
def test_compiled_mltcp_increase_matches_the_python_reference(
    steps: list[tuple[float, int, int, float]], which: str
) -> None:
    assert compiled is not None, NOT_BUILT
    s, m = SETTINGS[which], MltcpSettings()
    now, trace = 0.0, []
    for dt, kind, nbytes, fraction in steps:
        now += dt
        value = aggressiveness(m, IterationBytes(1.0, fraction)) if kind == 3 else float(nbytes)
        trace.append((now, kind, value))
    assert compiled.dcqcn_replay(settings_tuple(s), trace) == _python(s, trace)


def test_compiled_hand_case() -> None:
    assert compiled is not None, NOT_BUILT
    trace = [(0.0, 3, 1.45), (0.0, 1, 0.0)] + [(t * MS, 0, 0.0) for t in (1.0, 2.0, 3.0)]
    rows = compiled.dcqcn_replay(settings_tuple(HAND), trace)
    got = _flat([(r[0] / 1e6, r[1] / 1e6) for r in rows[2:]])
    assert got == pytest.approx([40.0, 40.0, 47.25, 54.5, 58.125, 69.0])
    with pytest.raises(ValueError, match="MLTCP gain"):
        compiled.dcqcn_replay(settings_tuple(HAND), [(0.0, 3, 0.0)])
