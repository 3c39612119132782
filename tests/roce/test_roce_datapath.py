"""One RoCE flow through the compiled data path (`_roce.sender` / `_roce.receiver`) on
loopback UDP sockets: everything arrives once and in order, a lost packet is recovered
by a NAK, a lost last packet by the timeout, and CE marks become CNPs that cut the rate."""

from __future__ import annotations

import signal
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pytest

from emulation.roce.dcqcn import DcqcnSettings
from emulation.roce.native import compiled, settings_tuple

NOT_BUILT = "the compiled RoCE logic is not built: run scripts/setup.sh"
SETTINGS = DcqcnSettings(line_rate_bps=100e6, min_rate_bps=10e6)
OVERHEAD = 20 + 8 + 14 + 4 + 20  # IPv4, UDP, Ethernet, FCS, preamble and gap
FIRST = 0xFFFFF0  # the flow's PSNs wrap
CE = 0b11


@dataclass(frozen=True)
class Received:
    status: int
    err: int
    accepted: int
    dropped: int
    naks: int
    marked: int
    cnps: int
    lost: int


@dataclass(frozen=True)
class Sent:
    status: int
    err: int
    sent: int
    cnps: int
    cuts: int
    retransmits: int
    timeouts: int
    naks: int
    rc: float
    min_rc: float


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        rx.bind(("127.0.0.1", 0))
        tx.bind(("127.0.0.1", 0))
        tx.connect(rx.getsockname())
        yield tx, rx
    finally:
        tx.close()
        rx.close()


def _run(
    tx: socket.socket, rx: socket.socket, packets: int, drop: Sequence[int] = (), rto: float = 0.02
) -> tuple[Sent, Received]:
    assert compiled is not None, NOT_BUILT
    got: list[Received] = []
    receiver = threading.Thread(
        target=lambda: got.append(
            Received(
                *compiled.receiver(
                    rx.fileno(),
                    SETTINGS.min_time_between_cnps_s,
                    0x11,
                    FIRST,
                    packets,
                    0.05,
                    5.0,
                    list(drop),
                )
            )
        )
    )
    receiver.start()
    sent = Sent(
        *compiled.sender(
            tx.fileno(), settings_tuple(SETTINGS), 0x22, FIRST, packets, 1000, OVERHEAD, rto, 4, 5.0
        )
    )
    receiver.join(10)
    assert not receiver.is_alive() and got
    return sent, got[0]


def test_a_clean_flow_arrives_once_in_order(pair: tuple[socket.socket, socket.socket]) -> None:
    started = time.monotonic()
    sent, got = _run(*pair, packets=300)
    # Paced at the line rate: never faster, whatever the pacer's 2-packet catch-up.
    gap = (12 + 1000 + 4 + OVERHEAD) * 8 / SETTINGS.line_rate_bps
    assert time.monotonic() - started >= (300 - 1 - 2) * gap
    assert (sent.status, got.status) == (0, 0)
    assert got.accepted == 300 and got.dropped == 0 and got.naks == 0
    assert sent.sent == 300 and sent.retransmits == 0 and sent.cnps == 0
    assert sent.rc == SETTINGS.line_rate_bps


def test_a_lost_packet_is_naked_once_and_resent(pair: tuple[socket.socket, socket.socket]) -> None:
    lost = (FIRST + 50) & 0xFFFFFF
    sent, got = _run(*pair, packets=300, drop=[lost])
    assert (sent.status, got.status) == (0, 0)
    assert got.lost == 1 and got.accepted == 300
    assert got.naks == 1 == sent.naks  # one NAK for the gap, whatever followed it
    assert sent.retransmits >= 1 and sent.sent == 300 + sent.retransmits
    assert sent.timeouts == 0


def test_a_lost_last_packet_is_resent_after_the_timeout(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    last = (FIRST + 39) & 0xFFFFFF
    sent, got = _run(*pair, packets=40, drop=[last])
    assert (sent.status, got.status) == (0, 0)
    assert got.accepted == 40 and got.naks == 0  # nothing after it: no gap to see
    assert sent.timeouts >= 1 and sent.retransmits >= 1


def test_ce_marks_become_cnps_that_cut_the_rate(pair: tuple[socket.socket, socket.socket]) -> None:
    tx, rx = pair
    tx.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, CE)  # as if every packet were marked
    sent, got = _run(tx, rx, packets=40)
    assert (sent.status, got.status) == (0, 0)
    assert got.accepted == 40 and got.marked >= 40
    # Packets 87 us apart at 100 Mb/s, the CNP interval 4 us: a CNP per mark, but for
    # the pacer's catch-up (two packets back to back after a late wake-up, on a busy
    # machine), which arrive within one interval (the receiver times them by the
    # kernel's arrival stamps) and share a CNP.
    assert got.marked / 2 <= got.cnps <= got.marked
    assert sent.cnps == got.cnps and sent.cuts >= 1
    # the first cut halves the rate (alpha starts at 1); on a busy machine the timer may
    # restore some of it before the next CNP, so "about half" is what is sure
    assert SETTINGS.min_rate_bps <= sent.min_rc < SETTINGS.line_rate_bps * 0.55


class Stop(Exception):
    """What the test's signal handler raises."""


def test_a_signal_ends_a_waiting_receiver_with_its_handlers_exception(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    assert compiled is not None, NOT_BUILT

    def stop(signum: int, frame: object) -> None:
        raise Stop

    _tx, rx = pair
    previous = signal.signal(signal.SIGUSR1, stop)
    main = threading.main_thread().ident
    assert main is not None
    timer = threading.Timer(0.2, signal.pthread_kill, (main, signal.SIGUSR1))
    try:
        timer.start()
        started = time.monotonic()
        with pytest.raises(Stop):
            compiled.receiver(rx.fileno(), 4e-6, 1, 0, 10, 0.05, 30.0, [])
        assert time.monotonic() - started < 30 / 2  # not the 30 s without progress
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, previous)
