"""Go-back-N over 24-bit PSNs on a fake clock: a gap, a timeout, wraparound."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulation.roce.psn import (
    DEFAULT_RTO_S,
    Receiver,
    Reply,
    Sender,
    psn_add,
    psn_diff,
    rx_packet,
    tx_next,
    tx_on_ack,
    tx_on_nak,
    tx_on_timer,
    tx_start,
)


def _send(tx: Sender, n: int, now: float) -> tuple[Sender, list[int]]:
    sent = []
    for _ in range(n):
        tx, psn = tx_next(tx, now)
        assert psn is not None
        sent.append(psn)
    return tx, sent


def test_receiver_accepts_in_order_and_naks_a_gap_once() -> None:
    rx = Receiver(expected=10)
    replies = []
    for psn in [10, 11, 13, 14, 15, 12, 13, 14]:
        r = rx_packet(rx, psn)
        rx = r.receiver
        replies.append((psn, r.accept, r.reply, r.reply_psn))
    assert replies == [
        (10, True, Reply.NONE, 10),
        (11, True, Reply.NONE, 11),
        (13, False, Reply.NAK, 12),  # the gap: one NAK carrying the expected PSN
        (14, False, Reply.NONE, 12),  # same gap: dropped, silent
        (15, False, Reply.NONE, 12),
        (12, True, Reply.NONE, 12),  # the resent packet closes the gap
        (13, True, Reply.NONE, 13),
        (14, True, Reply.NONE, 14),
    ]
    assert (rx.expected, rx.accepted, rx.dropped, rx.naks) == (15, 5, 3, 1)
    # A new gap after the first closed gets its own NAK.
    r = rx_packet(rx, 17)
    assert (r.reply, r.reply_psn, r.receiver.naks) == (Reply.NAK, 15, 2)


def test_duplicate_is_dropped_and_acked_with_the_last_in_order_psn() -> None:
    r = rx_packet(Receiver(expected=20), 18)
    assert (r.accept, r.reply, r.reply_psn) == (False, Reply.ACK, 19)
    assert rx_packet(Receiver(expected=20), 20, ack_request=True).reply is Reply.ACK


def test_go_back_n_on_a_nak() -> None:
    tx, sent = _send(tx_start(100, 8), 6, now=0.0)  # 100..105 out
    assert sent == list(range(100, 106)) and tx.outstanding == 6
    rx = Receiver(expected=100)
    naks = []
    for psn in sent:
        if psn == 102:
            continue  # lost in the fabric
        r = rx_packet(rx, psn)
        rx = r.receiver
        if r.reply is Reply.NAK:
            naks.append(r.reply_psn)
    assert naks == [102]
    tx = tx_on_nak(tx, 102, now=1e-4)
    # 100 and 101 are acknowledged by the NAK; sending resumes at 102.
    assert (tx.base, tx.next, tx.retransmits, tx.timer_from) == (102, 102, 4, 1e-4)
    tx, resent = _send(tx, 6, now=2e-4)
    assert resent == [102, 103, 104, 105, 106, 107]
    for psn in resent:
        rx = rx_packet(rx, psn).receiver
    assert rx.expected == 108
    tx = tx_on_ack(tx, 107, now=3e-4)
    assert tx.done and tx.timer_from is None and tx_next(tx, 4e-4)[1] is None


def test_go_back_n_on_a_timeout() -> None:
    tx, _ = _send(tx_start(0, 4), 4, now=1.0)
    tx = tx_on_ack(tx, 1, now=1.001)  # 0 and 1 arrived; the timer restarts at 1.001
    assert (tx.base, tx.timer_from) == (2, 1.001)
    assert tx_on_timer(tx, 1.001 + DEFAULT_RTO_S / 2) == tx  # not yet
    late = tx_on_timer(tx, 1.001 + DEFAULT_RTO_S + 1e-9)
    assert (late.base, late.next, late.timeouts, late.retransmits) == (2, 2, 1, 2)
    assert late.timer_from == pytest.approx(1.001 + DEFAULT_RTO_S)
    assert pytest.approx(4.096e-6 * 2**14) == DEFAULT_RTO_S  # 67.1 ms


def test_stale_and_bogus_acks_change_nothing() -> None:
    tx, _ = _send(tx_start(50, 10), 5, now=0.0)
    tx = tx_on_ack(tx, 52, now=1.0)
    assert tx_on_ack(tx, 51, now=2.0) == tx  # older than base
    assert tx_on_ack(tx, 80, now=2.0) == tx  # beyond what was sent
    assert tx_on_nak(tx, 90, now=2.0) == tx


def test_psn_wraps_at_24_bits() -> None:
    assert psn_add(0xFFFFFF, 1) == 0
    assert psn_diff(0, 0xFFFFFF) == 1 and psn_diff(0xFFFFFF, 0) == -1
    tx, sent = _send(tx_start(0xFFFFFE, 5), 5, now=0.0)
    assert sent == [0xFFFFFE, 0xFFFFFF, 0, 1, 2] and tx.outstanding == 5
    rx = Receiver(expected=0xFFFFFE)
    for psn in sent:
        r = rx_packet(rx, psn)
        assert r.accept
        rx = r.receiver
    assert rx.expected == 3
    # A gap across the wrap: 0xFFFFFF lost, NAK carries it; 0xFFFFFE is a duplicate.
    r = rx_packet(Receiver(expected=0xFFFFFF), 1)
    assert (r.reply, r.reply_psn) == (Reply.NAK, 0xFFFFFF)
    dup = rx_packet(Receiver(expected=0), 0xFFFFFE)
    assert (dup.reply, dup.reply_psn) == (Reply.ACK, 0xFFFFFF)
    tx = tx_on_nak(tx, 0xFFFFFF, now=1.0)
    assert (tx.base, tx.next, tx.retransmits) == (0xFFFFFF, 0xFFFFFF, 4)
    assert tx_on_ack(tx, 2, now=2.0) == tx  # 2 is not out again yet: ignored
    tx, resent = _send(tx, 4, now=2.0)
    assert resent == [0xFFFFFF, 0, 1, 2]
    assert tx_on_ack(tx, 2, now=3.0).done


def test_start_rejects_a_window_beyond_half_the_psn_space() -> None:
    with pytest.raises(ValueError, match="packets=8388608"):
        tx_start(0, 1 << 23)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 0xFFFFFF),
    st.integers(1, 40),
    st.lists(st.booleans(), max_size=300),
)
def test_lossy_link_delivers_everything_in_order(
    first: int, packets: int, losses: list[bool]
) -> None:
    """Go-back-N over a link that loses any data packets and replies (the n-th packet on
    the link is lost if losses[n]; the link is lossless after the list) delivers each
    PSN once, in order (timeouts recover lost NAKs and ACKs)."""
    tx, rx = tx_start(first, packets, rto_s=1.0), Receiver(expected=first)
    delivered: list[int] = []
    now, i = 0.0, 0

    def lost() -> bool:
        nonlocal i
        i += 1
        return i <= len(losses) and losses[i - 1]

    for _ in range(5_000):
        if tx.done:
            break
        tx, psn = tx_next(tx, now)
        if psn is None:
            now += 1.0
            tx = tx_on_timer(tx, now)
            continue
        if lost():
            continue
        r = rx_packet(rx, psn, ack_request=True)
        rx = r.receiver
        if r.accept:
            delivered.append(psn)
        if r.reply is Reply.NONE or lost():
            continue
        tx = (tx_on_ack if r.reply is Reply.ACK else tx_on_nak)(tx, r.reply_psn, now)
    assert tx.done
    assert delivered == [psn_add(first, k) for k in range(packets)]
