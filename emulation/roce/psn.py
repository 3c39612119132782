"""Which packets does an RC queue pair accept, acknowledge and send again?

Go-back-N as a ConnectX RC QP does it (IBA vol. 1, chapter 9): the responder expects PSN
e and accepts only e; a packet past e opens a gap: it is dropped and the
first one of the gap is answered with one NAK (PSN sequence error, carrying
e), later ones of the same gap with nothing; a packet before e is a
duplicate, dropped and answered with an ACK of e - 1 so a sender whose ACK
was lost moves on. The requester keeps the oldest unacknowledged PSN; an
ACK moves it (cumulatively), a NAK moves it to the NAK's PSN and rewinds
sending there, and so does the retransmission timer when nothing was
acknowledged for `rto_s`.

PSNs are 24 bits and wrap: `psn_diff` is the signed distance modulo 2^24,
valid while fewer than 2^23 packets are in flight (the spec's limit).

Pure functions on frozen dataclasses; the caller passes `now`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

from .bth import PSN_BITS, PSN_MASK

PSN_MODULO = 1 << PSN_BITS
HALF = 1 << (PSN_BITS - 1)
# The IB local ACK timeout is 4.096 us x 2^timeout (IBA vol. 1, chapter 9); (our choice)
# exponent 14 (67 ms), a common default of RDMA applications (NCCL sets 18-20).
LOCAL_ACK_TIMEOUT_EXPONENT = 14
DEFAULT_RTO_S = 4.096e-6 * 2**LOCAL_ACK_TIMEOUT_EXPONENT


def psn_add(psn: int, n: int) -> int:
    """`psn` + n modulo 2^24.

    >>> psn_add(0xFFFFFF, 2)
    1
    """
    return (psn + n) & PSN_MASK


def psn_diff(a: int, b: int) -> int:
    """a - b as a signed distance in [-2^23, 2^23): how far a lies after b.

    >>> psn_diff(1, 0xFFFFFF), psn_diff(0xFFFFFF, 1)
    (2, -2)
    """
    d = (a - b) & PSN_MASK
    return d - PSN_MODULO if d >= HALF else d


class Reply(Enum):
    """What the responder sends back for one packet."""

    NONE = "none"
    ACK = "ack"
    NAK = "nak"  # PSN sequence error


@dataclass(frozen=True)
class Receiver:
    """The responder: the PSN it expects, whether the current gap was NAKed, counts."""

    expected: int = 0
    nak_sent: bool = False
    accepted: int = 0
    dropped: int = 0
    naks: int = 0


@dataclass(frozen=True)
class RxResult:
    """One packet's fate: the receiver after it, accepted or not, the reply and its PSN."""

    receiver: Receiver
    accept: bool
    reply: Reply
    reply_psn: int


def rx_packet(rx: Receiver, psn: int, ack_request: bool = False) -> RxResult:
    """The responder gets a packet with `psn` (ack_request: the BTH's A bit).

    An accepted packet is ACKed when the sender asked (our choice: the
    sender sets A on the last packet of a message and every few packets;
    ConnectX also coalesces ACKs).

    >>> r = rx_packet(Receiver(expected=5), 7)   # gap: 5 and 6 are missing
    >>> r.accept, r.reply, r.reply_psn
    (False, <Reply.NAK: 'nak'>, 5)
    >>> rx_packet(r.receiver, 8).reply            # the same gap: no second NAK
    <Reply.NONE: 'none'>
    """
    d = psn_diff(psn, rx.expected)
    if d == 0:
        nxt = Receiver(
            expected=psn_add(psn, 1),
            accepted=rx.accepted + 1,
            dropped=rx.dropped,
            naks=rx.naks,
        )
        return RxResult(nxt, True, Reply.ACK if ack_request else Reply.NONE, psn)
    dropped = replace(rx, dropped=rx.dropped + 1)
    if d < 0:  # a duplicate: tell the sender how far we are
        return RxResult(dropped, False, Reply.ACK, psn_add(rx.expected, -1))
    if rx.nak_sent:
        return RxResult(dropped, False, Reply.NONE, rx.expected)
    naked = replace(dropped, nak_sent=True, naks=rx.naks + 1)
    return RxResult(naked, False, Reply.NAK, rx.expected)


@dataclass(frozen=True)
class Sender:
    """The requester: oldest unacknowledged PSN, next PSN to send, end of the data.

    `end` is the PSN after the last packet of what there is to send;
    `timer_from` is when the retransmission timer last (re)started, None
    while nothing is outstanding.
    """

    base: int = 0
    next: int = 0
    end: int = 0
    timer_from: float | None = None
    rto_s: float = DEFAULT_RTO_S
    retransmits: int = 0
    timeouts: int = 0

    @property
    def outstanding(self) -> int:
        return psn_diff(self.next, self.base)

    @property
    def done(self) -> bool:
        return self.base == self.end


def tx_start(first_psn: int, packets: int, rto_s: float = DEFAULT_RTO_S) -> Sender:
    """A requester that has `packets` to send from `first_psn` on."""
    if not 0 <= packets < HALF:
        raise ValueError(f"packets={packets} must be in [0, 2^23)")
    return Sender(base=first_psn, next=first_psn, end=psn_add(first_psn, packets), rto_s=rto_s)


def tx_next(tx: Sender, now: float) -> tuple[Sender, int | None]:
    """The PSN to send now (None: everything up to `end` is out), and the sender after it."""
    if tx.next == tx.end:
        return tx, None
    timer_from = now if tx.timer_from is None else tx.timer_from
    return replace(tx, next=psn_add(tx.next, 1), timer_from=timer_from), tx.next


def _acked_through(tx: Sender, first_unacked: int, now: float) -> Sender:
    """Everything before `first_unacked` is acknowledged (if it lies in [base, next])."""
    d = psn_diff(first_unacked, tx.base)
    if d < 0 or d > tx.outstanding:
        return tx  # stale or bogus: outside what is in flight
    if d == 0:
        return tx  # no progress: the timer keeps running
    # Progress restarts the timer; nothing left in flight stops it.
    return replace(tx, base=first_unacked, timer_from=None if first_unacked == tx.next else now)


def tx_on_ack(tx: Sender, psn: int, now: float) -> Sender:
    """An ACK of `psn`: it and everything before it arrived (cumulative)."""
    return _acked_through(tx, psn_add(psn, 1), now)


def tx_on_nak(tx: Sender, psn: int, now: float) -> Sender:
    """A NAK (sequence error) for `psn`: the responder has all before it; resend from it.

    >>> tx = tx_start(0, 10)
    >>> for _ in range(6):
    ...     tx, _psn = tx_next(tx, 0.0)
    >>> tx = tx_on_nak(tx, 3, 1e-3)
    >>> tx.base, tx.next, tx.retransmits
    (3, 3, 3)
    """
    acked = _acked_through(tx, psn, now)
    if acked.base != psn:
        return tx  # a NAK outside the window: ignore it
    return replace(
        acked, next=psn, timer_from=now, retransmits=tx.retransmits + psn_diff(tx.next, psn)
    )


def tx_on_timer(tx: Sender, now: float) -> Sender:
    """The retransmission timer at `now`: after `rto_s` without progress, go back to `base`."""
    if tx.timer_from is None or now - tx.timer_from < tx.rto_s:
        return tx
    return replace(
        tx,
        next=tx.base,
        timer_from=now,
        timeouts=tx.timeouts + 1,
        retransmits=tx.retransmits + tx.outstanding,
    )
