"""The compiled relay loop (`emulation/jobs/_relay.c`) against the Python loop, its reference.

One worker (rank 1 of 3) between a scripted left neighbour, which writes a
whole stream of steps, and a right neighbour that reads everything: both
loops must put the same bytes on the wire, return the same payload count and
merge the same wishes, and name the same lost peer when a neighbour closes
or goes silent.
"""

from __future__ import annotations

import socket
import threading

import pytest

from emulation.jobs import ring as ring_module
from emulation.jobs.header import Header
from emulation.jobs.ring import Address, PeerLost, Ring

PEERS = [Address("10.0.0.1", 47000), Address("10.0.0.2", 47000), Address("10.0.0.3", 47000)]
LOOPS = [pytest.param(False, id="reference"), pytest.param(True, id="compiled")]
NOT_BUILT = "the compiled relay loop is not built: run scripts/setup.sh"


def _stream(sizes: list[int], headers: list[Header]) -> bytes:
    """What a neighbour sends: per step one header byte, then zeros."""
    return b"".join(bytes([h.byte()]) + bytes(n) for n, h in zip(sizes, headers, strict=True))


def _worker(compiled: bool, timeout_s: float = 5.0) -> tuple[Ring, socket.socket, socket.socket]:
    assert not compiled or ring_module._relay is not None, NOT_BUILT
    ring = Ring("relay-test", 1, PEERS, timeout_s, compiled=compiled)
    left_far, left = socket.socketpair()
    right, right_far = socket.socketpair()
    ring.inp[0], ring.out[2] = left, right
    return ring, left_far, right_far


def _read_all(sock: socket.socket, size: int, into: list[bytes]) -> None:
    data = b""
    while len(data) < size:
        chunk = sock.recv(1 << 16)
        if not chunk:
            break
        data += chunk
    into.append(data)


def _relay(
    compiled: bool, sends: list[int], receives: list[int], left_headers: list[Header], mine: Header
) -> tuple[int, Header, bytes]:
    ring, left_far, right_far = _worker(compiled)
    got: list[bytes] = []
    reader = threading.Thread(target=_read_all, args=(right_far, len(sends) + sum(sends), got))
    writer = threading.Thread(target=left_far.sendall, args=(_stream(receives, left_headers),))
    reader.start()
    writer.start()
    try:
        received, heard = ring.relay(sends, receives, mine)
    finally:
        writer.join(10)
        reader.join(10)
        for sock in (left_far, right_far, ring.inp[0], ring.out[2]):
            sock.close()
    return received, heard, got[0]


@pytest.mark.parametrize("compiled", LOOPS)
def test_both_loops_send_the_same_bytes_and_merge_the_same_wishes(compiled: bool) -> None:
    # steps larger than the loops' 1 MiB buffers, an empty one, and uneven ones
    sends = [1_500_000, 0, 70_001, 3, 2_200_000]
    receives = [1_400_000, 5, 0, 90_000, 2_300_001]
    mine = Header(stop=True, skip=5)
    # left wishes inside mine: every header byte on the wire is mine, whatever the timing
    calm = [Header(False, 3)] * len(receives)
    received, heard, wire = _relay(compiled, sends, receives, calm, mine)
    assert received == sum(receives)
    assert heard == mine
    assert wire == _stream(sends, [mine] * len(sends))
    # a larger skip and a stop from the left: merged (the largest skip, any stop)
    louder = [Header(False, 2), Header(False, 9), Header(False, 0), Header(True, 1),
              Header(False, 4)]  # fmt: skip
    received, heard, wire = _relay(compiled, sends, receives, louder, Header(False, 5))
    assert received == sum(receives)
    assert heard == Header(True, 9)
    assert len(wire) == len(sends) + sum(sends)
    # step 0 leaves before anything is heard or after; later steps carry what was heard
    starts = [0, *(len(sends[: k + 1]) + sum(sends[: k + 1]) for k in range(len(sends) - 1))]
    assert Header.of(wire[starts[0]]).skip in (5, 9) and Header.of(wire[starts[-1]]).skip == 9
    assert wire.count(0) == len(wire) - len(sends)


def test_the_compiled_loop_is_the_default() -> None:
    assert ring_module._relay is not None, NOT_BUILT
    assert Ring("relay-test", 1, PEERS, 1.0).compiled is True
    assert Ring("relay-test", 1, PEERS, 1.0, compiled=False).compiled is False


@pytest.mark.parametrize("compiled", LOOPS)
def test_a_left_neighbour_that_closes_is_a_lost_peer(compiled: bool) -> None:
    ring, left_far, right_far = _worker(compiled)
    left_far.sendall(_stream([1000], [Header()]))
    left_far.close()  # a step of 1000 bytes, then 5000 more promised that never come
    got: list[bytes] = []
    reader = threading.Thread(target=_read_all, args=(right_far, 10_000, got))
    reader.start()
    with pytest.raises(PeerLost, match=r"lost peer worker 0 \(10.0.0.1:47000\): it closed"):
        ring.relay([1000, 1000], [1000, 5000], Header())
    ring.out[2].close()
    reader.join(10)
    right_far.close()
    ring.inp[0].close()


@pytest.mark.parametrize("compiled", LOOPS)
def test_a_silent_left_neighbour_is_a_lost_peer_after_the_timeout(compiled: bool) -> None:
    ring, left_far, right_far = _worker(compiled, timeout_s=0.6)
    with pytest.raises(PeerLost, match=r"lost peer worker 0 .*: no progress for 0.6 s"):
        ring.relay([10], [10], Header())
    for sock in (left_far, right_far, ring.inp[0], ring.out[2]):
        sock.close()
