"""The compiled DCQCN and go-back-N (`emulation/roce/_roce.c`) against the Python
modules, their reference: the same event traces on a fake clock give the same rates,
alpha, stages, CNPs and PSNs, to the bit."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from emulation.roce import dcqcn, psn
from emulation.roce.dcqcn import DcqcnSettings, paper_settings, scaled
from emulation.roce.native import compiled, settings_tuple

NOT_BUILT = "the compiled RoCE logic is not built: run scripts/setup.sh"
US = 1e-6

SETTINGS = {
    "nic": DcqcnSettings(line_rate_bps=50e9),
    "paper": paper_settings(40e9),
    "nic-scaled": scaled(DcqcnSettings(line_rate_bps=50e9), 0.001),
    "nic-packets": scaled(DcqcnSettings(line_rate_bps=50e9), 0.001, "packets"),
    "first-cnp": DcqcnSettings(
        line_rate_bps=25e9, rate_on_first_cnp_bps=5e9, clamp_tgt_rate_after_time_inc=False
    ),
}

# (time step, kind: 0 advance, 1 CNP, 2 bytes sent, bytes)
rp_events = st.lists(
    st.tuples(
        st.one_of(st.floats(0, 20 * US), st.floats(0, 3e-3), st.sampled_from([0.0, 4 * US])),
        st.integers(0, 2),
        st.integers(0, 3_000_000),
    ),
    max_size=80,
)


def _python_rp(s: DcqcnSettings, events: list[tuple[float, int, float]]) -> list[tuple]:
    state, rows = dcqcn.rp_start(s), []
    for now, kind, nbytes in events:
        if kind == 0:
            state = dcqcn.rp_advance(s, state, now)
        elif kind == 1:
            state = dcqcn.rp_on_cnp(s, state, now)
        else:
            state = dcqcn.rp_on_sent(s, state, nbytes, now)  # type: ignore[arg-type]
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


def _timeline(steps: list[tuple[float, int, int]]) -> list[tuple[float, int, float]]:
    now, events = 0.0, []
    for dt, kind, nbytes in steps:
        now += dt
        events.append((now, kind, float(nbytes)))
    return events


@settings(max_examples=200, deadline=None)
@given(rp_events, st.sampled_from(sorted(SETTINGS)))
def test_reaction_point_matches_the_python_reference(
    steps: list[tuple[float, int, int]], which: str
) -> None:
    assert compiled is not None, NOT_BUILT
    s = SETTINGS[which]
    events = _timeline(steps)
    assert compiled.dcqcn_replay(settings_tuple(s), events) == _python_rp(s, events)


def test_reaction_point_hand_case_is_the_same_in_c() -> None:
    # The paper's one-CNP trajectory (tests/roce/test_dcqcn.py): 20, then 30, 35, ... Gb/s.
    assert compiled is not None, NOT_BUILT
    s = paper_settings(40e9)
    events = [(0.0, 1, 0.0)] + [(k * 55 * US + US, 0, 0.0) for k in range(1, 7)]
    rc = [row[0] / 1e9 for row in compiled.dcqcn_replay(settings_tuple(s), events)]
    assert rc == [20.0, 30.0, 35.0, 37.5, 38.75, 39.375, 39.6875]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 100 * US), st.booleans()), max_size=60))
def test_notification_point_matches(steps: list[tuple[float, bool]]) -> None:
    assert compiled is not None, NOT_BUILT
    s = paper_settings(40e9)
    now, events, flow, expected = 0.0, [], dcqcn.NpFlow(), []
    for dt, ce in steps:
        now += dt
        events.append((now, ce))
        flow, cnp = dcqcn.np_on_packet(s, flow, ce, now)
        expected.append(cnp)
    assert compiled.np_replay(s.min_time_between_cnps_s, events) == expected


psns = st.integers(0, 0xFFFFFF)


@settings(max_examples=100, deadline=None)
@given(psns, st.lists(st.tuples(st.integers(-5, 12), st.booleans()), max_size=60))
def test_responder_matches(expected: int, offsets: list[tuple[int, bool]]) -> None:
    assert compiled is not None, NOT_BUILT
    rx, rows, events = psn.Receiver(expected=expected), [], []
    for offset, ack_request in offsets:
        p = psn.psn_add(rx.expected, offset)
        events.append((p, ack_request))
        r = psn.rx_packet(rx, p, ack_request)
        rx = r.receiver
        code = {psn.Reply.NONE: 0, psn.Reply.ACK: 1, psn.Reply.NAK: 2}[r.reply]
        rows.append((r.accept, code, r.reply_psn))
    assert compiled.gbn_rx_replay(expected, events) == rows


@settings(max_examples=100, deadline=None)
@given(
    psns,
    st.integers(0, 30),
    st.lists(st.tuples(st.integers(0, 3), st.floats(0, 0.05), st.integers(-3, 30)), max_size=80),
)
def test_requester_matches(first: int, packets: int, steps: list[tuple[int, float, int]]) -> None:
    assert compiled is not None, NOT_BUILT
    rto = 0.02
    tx, rows, events, now = psn.tx_start(first, packets, rto), [], [], 0.0
    for kind, dt, offset in steps:
        now += dt
        target = psn.psn_add(tx.base, offset)
        events.append((kind, now, target))
        sent = -1
        if kind == 0:
            tx, p = psn.tx_next(tx, now)
            sent = -1 if p is None else p
        elif kind == 1:
            tx = psn.tx_on_ack(tx, target, now)
        elif kind == 2:
            tx = psn.tx_on_nak(tx, target, now)
        else:
            tx = psn.tx_on_timer(tx, now)
        rows.append((sent, tx.base, tx.next, tx.retransmits, tx.timeouts))
    assert compiled.gbn_tx_replay(first, packets, rto, events) == rows
