"""How does a worker run one step of any pattern over its job's connections?

Patterns other than the ring AllReduce (pipeline: `patterns`) send to and
receive from several ranks at once: a worker opens a connection to every
rank it sends to and accepts one from every rank it receives from
(`ring.Ring.connect`), and `exchange` runs one step over them: each send
and each receive starts with the step's header byte (`header.Header`).
`agree` passes the wishes the whole way round the ring for patterns whose
own steps do not carry them that far.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import time
from collections.abc import Mapping

from .header import Header
from .ring import NAP_S, SCRATCH_BYTES, Ring


def exchange(
    ring: Ring,
    sends: Mapping[int, int],
    receives: Mapping[int, int],
    header: Header | None = None,
) -> tuple[int, Header]:
    """One step: send one header byte (`header`: this worker's wishes so far) and
    `sends[r]` bytes to each rank r while receiving one header byte and
    `receives[r]` bytes from each; returns (payload bytes received, the senders'
    wishes merged). No progress for the ring's timeout_s is a lost peer."""
    mine = (header or Header()).byte()
    outgoing: dict[socket.socket, memoryview] = {}
    wanted: dict[socket.socket, int] = {}
    rank_of: dict[socket.socket, int] = {}
    for other, size in sends.items():
        sock = ring.outgoing(other)
        out = ring.zeros(size + 1)
        out[0] = mine
        outgoing[sock], rank_of[sock] = memoryview(out), other
    for other, size in receives.items():
        sock = ring.incoming(other)
        wanted[sock], rank_of[sock] = size + 1, other
    got: dict[socket.socket, int] = dict.fromkeys(wanted, 0)
    by_fd = {sock.fileno(): sock for sock in rank_of}
    heard = Header()
    selector = selectors.DefaultSelector()
    with ring.non_blocking(rank_of), contextlib.closing(selector):
        for sock in wanted:
            selector.register(sock, selectors.EVENT_READ)
        for sock in outgoing:
            selector.register(sock, selectors.EVENT_WRITE)
        pending = len(wanted) + len(outgoing)
        last_progress = time.monotonic()
        while pending:
            events = selector.select(timeout=0.5)
            if not events and time.monotonic() - last_progress > ring.timeout_s:
                late = [s for s in wanted if got[s] < wanted[s]] or list(outgoing)
                raise ring.lost(rank_of[late[0]], f"no progress for {ring.timeout_s:g} s")
            for key, mask in events:
                sock = by_fd[key.fd]
                if mask & selectors.EVENT_READ:
                    want = wanted[sock] - got[sock]
                    n = ring.recv_some(sock, min(want, SCRATCH_BYTES), rank_of[sock])
                    if got[sock] == 0 and n > 0:
                        heard = heard.merge(Header.of(ring.scratch[0]))
                    got[sock] += n
                    if got[sock] >= wanted[sock]:
                        selector.unregister(sock)
                        pending -= 1
                else:
                    try:
                        n = sock.send(outgoing[sock])
                    except BlockingIOError:
                        continue
                    except OSError as err:
                        raise ring.lost(rank_of[sock], err) from None
                    outgoing[sock] = outgoing[sock][n:]
                    if not outgoing[sock]:
                        selector.unregister(sock)
                        pending -= 1
                last_progress = time.monotonic()
            if ring.nap_bytes and _all_far(wanted, got, 2 * ring.nap_bytes):
                time.sleep(NAP_S)
    return sum(got.values()) - len(got), heard


def agree(ring: Ring, header: Header) -> Header:
    """Everyone's wishes: N-1 header-only steps around the ring, for patterns
    whose own steps do not carry them that far."""
    for _ in range(ring.n - 1):
        _, heard = exchange(ring, {ring.right_rank: 0}, {ring.left_rank: 0}, header)
        header = header.merge(heard)
    return header


def _all_far(
    wanted: Mapping[socket.socket, int], got: Mapping[socket.socket, int], by: int
) -> bool:
    """Whether every receive still open has more than `by` bytes to come."""
    open_ = [wanted[s] - got[s] for s in wanted if got[s] < wanted[s]]
    return bool(open_) and min(open_) > by
