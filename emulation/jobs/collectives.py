"""How do a job's workers exchange an Up phase's bytes, the way a real collective does?

Ring AllReduce (reduce-scatter, then all-gather: 2(N-1) steps, chunk =
gradient bytes / N) between the job's workers in placement order, over two
persistent TCP connections per worker: one to the right neighbour (sends),
one from the left (receives). A worker sends byte j of step k only once byte
j of step k-1 has arrived from its left (`relay`): a slow link anywhere
stretches the whole job. (our choice) The steps are cut through, the way
NCCL's ring moves a step in slices, rather than one whole step after
another: at scaled rates a frame takes 246 us per hop (50 Mbit/s), and
waiting at every step for the last frame of the previous one added that
path's latency 2(N-1) times per phase (a ResNet50 ring of 4 ran its 24.6 ms
Up phase in about 35 ms); cut through, the latency is paid once.

Other patterns (pipeline: `patterns`) add connections: a worker opens one
to every rank it sends to and accepts one from every rank it receives from;
`exchange` runs one step of any pattern over them.

Transport (`transport`): kernel TCP, cubic with ECN (`tcp_ecn=1` in the
namespace, data as ECT(0)), each connection paced at its share of the
scaled NIC rate. The namespace default would be bbr, which ignores ECN, and
DCTCP is absent from this kernel; see `transport` for what cubic does with
an ECE echo (a loss-like x 0.7 cut once per window, not a proportional one).

No reduction arithmetic is done (our choice): the payload is zeros; what
matters to the fabric is the bytes, their timing and the waiting.

Each step also carries one header byte per direction (`Header`): the running
OR of the workers' "stop after this iteration" wishes and the largest of
their agents' wishes to skip grid slots (`agent.Drift.skip`); after N-1
steps every worker holds them all, so a job stops at a deadline, and
re-aligns to its grid, in agreement.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import fcntl
import itertools
import os
import selectors
import socket
import struct
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from scheduler.types import Phase

from . import transport

try:
    from . import _relay
except ImportError:  # not built (scripts/setup.sh builds it): the Python loop runs
    _relay = None  # type: ignore[assignment, unused-ignore]

HELLO = struct.Struct("!4sI64s")  # magic, sender's worker index, job name
HELLO_MAGIC = b"CASR"
BARRIER = struct.Struct("!4sd")  # magic, agreed start (epoch ms) or 0
BARRIER_MAGIC = b"CASB"
TCPI_OPT_ECN = 8  # linux/tcp.h: tcpi_options bit set when ECN was negotiated
TCP_INFO_OPTIONS_OFFSET = 5  # u8 state, ca_state, retransmits, probes, backoff, options
SCRATCH_BYTES = 1 << 20
SIOCOUTQNSD = 0x894B  # linux/sockios.h: a socket's bytes not yet sent
MAX_SKIP = 127  # what a header byte's seven skip bits hold
# (our choice) While a step's receives are far from done, the loop naps this long between
# looks instead of waking for nearly every segment (one per 245 us at 50 Mbit/s): the
# kernel keeps receiving and ACKing meanwhile (2 ms is 12 KB at 50 Mbit/s, well inside
# the socket buffers), and the replicas' CPU, which the 24 of the testbed's jobs take
# from each other and from the hosts' stacks, drops. Near a step's end it wakes on data.
NAP_S = 0.002
# What the compiled relay loop returns besides 0 (done): see _relay.c.
RELAY_LEFT_CLOSED, RELAY_RECV_FAILED, RELAY_SEND_FAILED, RELAY_NO_PROGRESS = 1, 2, 3, 4
# (our choice) The barrier's start lies this far ahead, so every worker is
# waiting for it when it comes, not still reading the barrier's last message.
START_MARGIN_MS = 100.0
# What a link carries per full TCP segment, on the wire: payload (MSS 1448 with
# timestamps), TCP/IP headers 52, Ethernet 14, preamble, FCS and gap 24; plus
# half an ACK (66 + 24, one per two segments) of the reverse flow, which in a
# ring shares the same NIC. The profile's bytes are what the link carries in
# the phase at its rate, so a replica sends the payload share of them.
TCP_MSS = 1448
TCP_WIRE_BYTES = TCP_MSS + 52 + 14 + 24 + (66 + 24) / 2
TCP_PAYLOAD_SHARE = TCP_MSS / TCP_WIRE_BYTES


@dataclass(frozen=True)
class Address:
    """Where one worker listens: its server's IP and a port unique on that server."""

    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Address:
        """'10.0.0.1:47000' -> Address('10.0.0.1', 47000)."""
        host, sep, port = text.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"peer address {text!r} is not HOST:PORT like 10.0.0.1:47000")
        return cls(host, int(port))

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class RingStep:
    """One step of the ring for one worker: which chunk goes right, which comes from the left."""

    stage: str  # "reduce-scatter" or "all-gather"
    step: int
    send_chunk: int
    send_bytes: int
    recv_chunk: int
    recv_bytes: int


@dataclass(frozen=True)
class Header:
    """One step's header byte: bit 0 the stop wish, bits 1-7 the slots to skip (our
    choice: at most 127, far more than a drift ever asks for)."""

    stop: bool = False
    skip: int = 0

    def byte(self) -> int:
        return (min(self.skip, MAX_SKIP) << 1) | int(self.stop)

    @classmethod
    def of(cls, byte: int) -> Header:
        return cls(bool(byte & 1), byte >> 1)

    def merge(self, other: Header) -> Header:
        """Everyone's wishes so far: any stop, the largest skip."""
        return Header(self.stop or other.stop, max(self.skip, other.skip))


@dataclass(frozen=True)
class CollectiveResult:
    """What one AllReduce did for one worker."""

    bytes_sent: int
    bytes_received: int
    elapsed_ms: float
    stop: bool  # some worker asked to stop after this iteration


class PeerLost(RuntimeError):
    """A ring neighbour closed, reset or went silent: the job cannot go on."""

    def __init__(self, job: str, worker: int, peer: int, address: Address, reason: str) -> None:
        super().__init__(
            f"job {job}: worker {worker} lost peer worker {peer} ({address}): {reason}"
        )
        self.job, self.worker, self.peer, self.reason = job, worker, peer, reason


def chunk_sizes(total_bytes: int, workers: int) -> tuple[int, ...]:
    """The N chunks of a ring AllReduce; the remainder goes to the first chunks.

    >>> chunk_sizes(10, 4)
    (3, 3, 2, 2)
    """
    if workers < 1 or total_bytes < 0:
        raise ValueError(f"need workers >= 1 and bytes >= 0, got {workers}, {total_bytes}")
    base, extra = divmod(total_bytes, workers)
    return tuple(base + (1 if i < extra else 0) for i in range(workers))


def ring_allreduce_plan(total_bytes: int, workers: int, rank: int) -> tuple[RingStep, ...]:
    """Worker `rank`'s 2(N-1) steps: in reduce-scatter step s it sends chunk
    (rank - s) mod N and receives chunk (rank - s - 1) mod N; all-gather then
    circulates the reduced chunks, starting with chunk (rank + 1) mod N.

    >>> [(s.send_chunk, s.recv_chunk) for s in ring_allreduce_plan(300, 3, 0)]
    [(0, 2), (2, 1), (1, 0), (0, 2)]
    """
    sizes = chunk_sizes(total_bytes, workers)
    steps = []
    for s in range(workers - 1):
        send, recv = (rank - s) % workers, (rank - s - 1) % workers
        steps.append(RingStep("reduce-scatter", s, send, sizes[send], recv, sizes[recv]))
    for s in range(workers - 1):
        send, recv = (rank - s + 1) % workers, (rank - s) % workers
        steps.append(RingStep("all-gather", s, send, sizes[send], recv, sizes[recv]))
    return tuple(steps)


def phase_bytes(phase: Phase, scale: float, payload_share: float = TCP_PAYLOAD_SHARE) -> int:
    """The payload bytes one worker sends in an Up phase, times the emulation scale S.

    The phase's bytes at its rate are what the link carries on the wire;
    `payload_share` of them is TCP payload (`TCP_PAYLOAD_SHARE`), so at the
    scaled port rate the phase lasts as long as on the testbed.

    >>> phase_bytes(Phase(100.0, 50.0), 0.001, payload_share=1.0)
    625000
    >>> phase_bytes(Phase(100.0, 50.0), 0.001)
    571699
    """
    return round(phase.duration_ms * 1e-3 * phase.gbps * 1e9 / 8 * scale * payload_share)


def gradient_bytes(bytes_per_worker: int, workers: int) -> int:
    """The S of a ring AllReduce in which each worker sends `bytes_per_worker`
    (the inverse of `scheduler.profiles.allreduce_bytes_per_worker`).

    >>> gradient_bytes(1_500_000, 4)
    1000000
    """
    if workers < 2:
        return 0
    return round(bytes_per_worker * workers / (2 * (workers - 1)))


class Ring:
    """One worker's persistent connections: `connect`, `barrier`, `allreduce`,
    `exchange`, `agree`, `close`.

    By default the two of a ring (to the right neighbour, from the left one);
    a pattern with more flows (`patterns.neighbours`) names the ranks this
    worker sends to and receives from, which always include the ring's. Each
    connection to a rank in `pace_gbps` is paced at that rate (`transport.pace`).
    """

    def __init__(
        self,
        job: str,
        rank: int,
        peers: Sequence[Address],
        timeout_s: float = 10.0,
        sends_to: Sequence[int] = (),
        receives_from: Sequence[int] = (),
        pace_gbps: Mapping[int, float] | None = None,
        congestion: str = transport.CONGESTION_CONTROL,
        compiled: bool | None = None,
    ) -> None:
        if not 0 <= rank < len(peers) or len(peers) < 2:
            raise ValueError(f"worker {rank} of {len(peers)}: a ring needs 2+ workers")
        self.job, self.rank, self.peers, self.timeout_s = job, rank, tuple(peers), timeout_s
        self.n = len(peers)
        self.left_rank, self.right_rank = (rank - 1) % self.n, (rank + 1) % self.n
        self.sends_to = tuple(dict.fromkeys([self.right_rank, *sends_to]))
        self.receives_from = tuple(dict.fromkeys([self.left_rank, *receives_from]))
        for other in (*self.sends_to, *self.receives_from):
            if not 0 <= other < self.n or other == rank:
                raise ValueError(f"worker {rank} of {self.n} cannot talk to worker {other}")
        self.pace_gbps = dict(pace_gbps or {})
        # What may arrive during one nap of the exchange loop (see NAP_S); 0: no naps.
        fastest = max(self.pace_gbps.values(), default=0.0)
        self._nap_bytes = int(NAP_S * fastest * 1e9 / 8)
        self.congestion = congestion
        self.out: dict[int, socket.socket] = {}  # rank -> the connection we opened to it
        self.inp: dict[int, socket.socket] = {}  # rank -> the connection it opened to us
        self._listener: socket.socket | None = None
        self._zeros = memoryview(bytes(0))
        # relay's loop compiled (`_relay.c`) when it is built; False runs the Python loop.
        self.compiled = _relay is not None if compiled is None else compiled
        if self.compiled and _relay is None:
            raise RuntimeError("the compiled relay loop is not built (scripts/setup.sh builds it)")
        self._scratch = memoryview(bytearray(SCRATCH_BYTES))
        # The compiled relay's send window: zeros it sets each header byte in and clears.
        self._out_zeros = bytearray(SCRATCH_BYTES) if self.compiled else bytearray(0)

    @property
    def left(self) -> socket.socket | None:
        return self.inp.get(self.left_rank)

    @property
    def right(self) -> socket.socket | None:
        return self.out.get(self.right_rank)

    # --- set-up ---------------------------------------------------------------

    def connect(self) -> None:
        """Listen for the workers that send to us, connect to the ones we send to
        (retrying while they start), and check each says the same job and the
        expected worker."""
        me = self.peers[self.rank]
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        transport.configure(listener, self.congestion)  # accepted connections inherit it
        listener.bind((me.host, me.port))
        listener.listen(len(self.receives_from))
        listener.settimeout(0.05)
        self._listener = listener
        deadline = time.monotonic() + self.timeout_s
        while len(self.out) < len(self.sends_to) or len(self.inp) < len(self.receives_from):
            if time.monotonic() > deadline:
                missing = [r for r in self.receives_from if r not in self.inp]
                missing += [r for r in self.sends_to if r not in self.out]
                raise PeerLost(
                    self.job, self.rank, missing[0], self.peers[missing[0]],
                    f"not reachable within {self.timeout_s:g} s at start",
                )  # fmt: skip
            for other in self.sends_to:
                if other not in self.out:
                    sock = self._try_connect(other)
                    if sock is not None:
                        self.out[other] = sock
            if len(self.inp) < len(self.receives_from):
                self._try_accept(listener)
        listener.close()
        self._listener = None

    def _try_connect(self, other: int) -> socket.socket | None:
        address = self.peers[other]
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        transport.configure(sock, self.congestion)
        sock.settimeout(0.5)
        try:
            sock.connect((address.host, address.port))
        except OSError:
            sock.close()
            time.sleep(0.05)
            return None
        sock.settimeout(self.timeout_s)
        hello = HELLO.pack(HELLO_MAGIC, self.rank, self.job.encode()[:64])
        if other in self.pace_gbps:
            transport.pace(sock, self.pace_gbps[other])
            transport.send_unpaced(sock, hello)
        else:
            sock.sendall(hello)
        return sock

    def _try_accept(self, listener: socket.socket) -> None:
        try:
            sock, _ = listener.accept()
        except TimeoutError:
            return
        sock.settimeout(self.timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        magic, sender, job = HELLO.unpack(self._recv_exact(sock, HELLO.size, self.left_rank))
        name = job.rstrip(b"\0").decode(errors="replace")
        expected = [r for r in self.receives_from if r not in self.inp]
        if magic != HELLO_MAGIC or name != self.job[:64] or sender not in expected:
            sock.close()
            raise RuntimeError(
                f"job {self.job}: worker {self.rank} expected worker(s) "
                f"{', '.join(map(str, expected))} of its job on its port, got worker {sender} "
                f"of job {name!r}: are two replicas sharing a port?"
            )
        self.inp[sender] = sock

    def ecn_negotiated(self) -> bool:
        """Whether the kernel negotiated ECN on every connection (tcp_ecn=1 in the namespace)."""
        return all(_ecn_negotiated(s) for s in self._all_sockets())

    def barrier(self, margin_ms: float = START_MARGIN_MS) -> float:
        """Agree on the job's start: worker 0 sends a token around the ring (all
        are connected), then the start time (epoch ms) around it again."""
        left, right = self._sockets()
        if self.rank == 0:
            right.sendall(BARRIER.pack(BARRIER_MAGIC, 0.0))
            self._recv_barrier(left)
            start = time.time() * 1e3 + margin_ms
            right.sendall(BARRIER.pack(BARRIER_MAGIC, start))
            self._recv_barrier(left)
            return start
        right.sendall(BARRIER.pack(BARRIER_MAGIC, self._recv_barrier(left)))
        start = self._recv_barrier(left)
        right.sendall(BARRIER.pack(BARRIER_MAGIC, start))
        return start

    def _recv_barrier(self, left: socket.socket) -> float:
        magic, value = BARRIER.unpack(self._recv_exact(left, BARRIER.size, self.left_rank))
        if magic != BARRIER_MAGIC:
            raise RuntimeError(f"job {self.job}: worker {self.rank}: garbled barrier message")
        return float(value)

    # --- the collective -------------------------------------------------------

    def allreduce(self, total_bytes: int, stop: bool = False) -> CollectiveResult:
        """One ring AllReduce of `total_bytes` gradient bytes; `stop` is this
        worker's wish to end after the iteration (the result's `stop` is everyone's)."""
        began = time.monotonic()
        plan = ring_allreduce_plan(total_bytes, self.n, self.rank)
        sends = [step.send_bytes for step in plan]
        received, heard = self.relay(sends, [step.recv_bytes for step in plan], Header(stop))
        elapsed = (time.monotonic() - began) * 1e3
        return CollectiveResult(sum(sends), received, elapsed, heard.stop)

    def relay(
        self, sends: Sequence[int], receives: Sequence[int], header: Header | None = None
    ) -> tuple[int, Header]:
        """The ring's steps in one cut-through pass: `sends[k]` bytes to the right and
        `receives[k]` from the left in step k, each with its header byte (this
        worker's wishes merged with those heard so far); byte j of step k >= 1 leaves
        once byte j of step k-1 is in. Returns (payload bytes received, every wish
        heard merged with this worker's). No progress for timeout_s is a lost peer."""
        if len(sends) != len(receives):
            raise ValueError(f"{len(sends)} send steps but {len(receives)} receive steps")
        right = self._connection(self.out, self.right_rank, "send to")
        left = self._connection(self.inp, self.left_rank, "receive from")
        send_at = list(itertools.accumulate((1 + b for b in sends), initial=0))
        recv_at = list(itertools.accumulate((1 + b for b in receives), initial=0))
        known = header or Header()
        if self.compiled:
            return self._relay_compiled(left, right, send_at, recv_at, known)
        steps, send_total, recv_total = len(sends), send_at[-1], recv_at[-1]
        sent = received = 0
        selector = selectors.DefaultSelector()
        with self._non_blocking((right, left)), contextlib.closing(selector):
            selector.register(left, selectors.EVENT_READ)
            writing = False
            last_progress = time.monotonic()
            while sent < send_total or received < recv_total:
                limit = relay_limit(send_at, recv_at, received)
                if (sent < limit) != writing:  # watch the right socket only with data to send
                    if writing:
                        selector.unregister(right)
                    else:
                        selector.register(right, selectors.EVENT_WRITE)
                    writing = not writing
                events = selector.select(timeout=0.5)
                if not events and time.monotonic() - last_progress > self.timeout_s:
                    peer = self.left_rank if received < recv_total else self.right_rank
                    raise self._lost(peer, f"no progress for {self.timeout_s:g} s")
                for key, _mask in events:
                    if key.fileobj is left:
                        want = min(recv_total - received, SCRATCH_BYTES)
                        n = self._recv_some(left, want, self.left_rank)
                        for k in range(bisect.bisect_left(recv_at, received), steps):
                            if recv_at[k] >= received + n:
                                break
                            known = known.merge(Header.of(self._scratch[recv_at[k] - received]))
                        received += n
                        if received >= recv_total:
                            selector.unregister(left)
                    else:
                        end = min(limit, sent + SCRATCH_BYTES)
                        window = self._window(sent, end, send_at, known.byte())
                        try:
                            n = right.send(window)
                        except BlockingIOError:
                            continue
                        except OSError as err:
                            raise self._lost(self.right_rank, _reason(err)) from None
                        sent += n
                    last_progress = time.monotonic()
                # Nap only while the right has enough queued to last it (or nothing
                # more is due to it) and the left still has much to send.
                far = 2 * self._nap_bytes
                if (
                    self._nap_bytes
                    and recv_total - received > far
                    and (sent == send_total or _unsent(right) > far)
                ):
                    time.sleep(NAP_S)
        return received - steps, known

    def _relay_compiled(
        self,
        left: socket.socket,
        right: socket.socket,
        send_at: list[int],
        recv_at: list[int],
        known: Header,
    ) -> tuple[int, Header]:
        """`relay`'s loop in `_relay.c`: the same system calls without the interpreter
        between them (the Python loop above is its reference, tested byte for byte)."""
        assert _relay is not None
        with self._non_blocking((right, left)):
            status, received, _sent, heard, err = _relay.relay(
                left.fileno(), right.fileno(), send_at, recv_at, known.byte(),
                self._nap_bytes, NAP_S, self.timeout_s, self._scratch, self._out_zeros,
            )  # fmt: skip
        if status == RELAY_LEFT_CLOSED:
            raise self._lost(self.left_rank, "it closed the connection")
        if status in (RELAY_RECV_FAILED, RELAY_SEND_FAILED):
            peer = self.left_rank if status == RELAY_RECV_FAILED else self.right_rank
            raise self._lost(peer, _reason(OSError(err, os.strerror(err))))
        if status == RELAY_NO_PROGRESS:
            peer = self.left_rank if err == 0 else self.right_rank
            raise self._lost(peer, f"no progress for {self.timeout_s:g} s")
        return received - (len(send_at) - 1), known.merge(Header.of(heard))

    def _window(self, start: int, end: int, send_at: Sequence[int], header: int) -> memoryview:
        """Bytes [start, end) of the send stream: zeros, with each step's header byte."""
        if len(self._zeros) < end - start:
            self._zeros = memoryview(bytes(end - start))
        window = bytearray(self._zeros[: end - start])
        for k in range(bisect.bisect_left(send_at, start), len(send_at) - 1):
            if send_at[k] >= end:
                break
            window[send_at[k] - start] = header
        return memoryview(window)

    def agree(self, header: Header) -> Header:
        """Everyone's wishes: N-1 header-only steps around the ring, for patterns
        whose own steps do not carry them that far."""
        for _ in range(self.n - 1):
            _, heard = self.exchange({self.right_rank: 0}, {self.left_rank: 0}, header)
            header = header.merge(heard)
        return header

    def exchange(
        self, sends: Mapping[int, int], receives: Mapping[int, int], header: Header | None = None
    ) -> tuple[int, Header]:
        """One step: send one header byte (`header`: this worker's wishes so far) and
        `sends[r]` bytes to each rank r while receiving one header byte and
        `receives[r]` bytes from each; returns (payload bytes received, the senders'
        wishes merged). No progress for timeout_s is a lost peer."""
        mine = (header or Header()).byte()
        outgoing: dict[socket.socket, memoryview] = {}
        wanted: dict[socket.socket, int] = {}
        rank_of: dict[socket.socket, int] = {}
        for other, size in sends.items():
            sock = self._connection(self.out, other, "send to")
            if len(self._zeros) < size + 1:
                self._zeros = memoryview(bytes(size + 1))
            out = bytearray(self._zeros[: size + 1])
            out[0] = mine
            outgoing[sock], rank_of[sock] = memoryview(out), other
        for other, size in receives.items():
            sock = self._connection(self.inp, other, "receive from")
            wanted[sock], rank_of[sock] = size + 1, other
        got: dict[socket.socket, int] = dict.fromkeys(wanted, 0)
        by_fd = {sock.fileno(): sock for sock in rank_of}
        heard = Header()
        selector = selectors.DefaultSelector()
        with self._non_blocking(rank_of), contextlib.closing(selector):
            for sock in wanted:
                selector.register(sock, selectors.EVENT_READ)
            for sock in outgoing:
                selector.register(sock, selectors.EVENT_WRITE)
            pending = len(wanted) + len(outgoing)
            last_progress = time.monotonic()
            while pending:
                events = selector.select(timeout=0.5)
                if not events and time.monotonic() - last_progress > self.timeout_s:
                    late = [s for s in wanted if got[s] < wanted[s]] or list(outgoing)
                    raise self._lost(rank_of[late[0]], f"no progress for {self.timeout_s:g} s")
                for key, mask in events:
                    sock = by_fd[key.fd]
                    if mask & selectors.EVENT_READ:
                        want = wanted[sock] - got[sock]
                        n = self._recv_some(sock, min(want, SCRATCH_BYTES), rank_of[sock])
                        if got[sock] == 0 and n > 0:
                            heard = heard.merge(Header.of(self._scratch[0]))
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
                            raise self._lost(rank_of[sock], _reason(err)) from None
                        outgoing[sock] = outgoing[sock][n:]
                        if not outgoing[sock]:
                            selector.unregister(sock)
                            pending -= 1
                    last_progress = time.monotonic()
                if self._nap_bytes and _all_far(wanted, got, 2 * self._nap_bytes):
                    time.sleep(NAP_S)
        return sum(got.values()) - len(got), heard

    @contextlib.contextmanager
    def _non_blocking(self, socks: Iterable[socket.socket]) -> Iterator[None]:
        """The sockets non-blocking for one loop, back to blocking with the timeout after."""
        socks = tuple(socks)
        try:
            for sock in socks:
                sock.setblocking(False)
            yield
        finally:
            for sock in socks:
                sock.setblocking(True)
                sock.settimeout(self.timeout_s)

    def _connection(self, table: dict[int, socket.socket], other: int, verb: str) -> socket.socket:
        sock = table.get(other)
        if sock is None:
            raise RuntimeError(
                f"job {self.job}: worker {self.rank} has no connection to {verb} worker "
                f"{other}: call connect() first, with it among the pattern's neighbours"
            )
        return sock

    def _recv_some(self, sock: socket.socket, limit: int, peer: int) -> int:
        try:
            n = sock.recv_into(self._scratch, limit)
        except BlockingIOError:
            return 0
        except OSError as err:
            raise self._lost(peer, _reason(err)) from None
        if n == 0:
            raise self._lost(peer, "it closed the connection")
        return n

    def _recv_exact(self, sock: socket.socket, size: int, peer: int) -> bytes:
        data = b""
        while len(data) < size:
            try:
                chunk = sock.recv(size - len(data))
            except TimeoutError:
                raise self._lost(peer, f"no answer for {self.timeout_s:g} s") from None
            except OSError as err:
                raise self._lost(peer, _reason(err)) from None
            if not chunk:
                raise self._lost(peer, "it closed the connection")
            data += chunk
        return data

    def _lost(self, peer: int, reason: str) -> PeerLost:
        return PeerLost(self.job, self.rank, peer, self.peers[peer], reason)

    def _sockets(self) -> tuple[socket.socket, socket.socket]:
        if self.left is None or self.right is None:
            raise RuntimeError("the ring is not connected: call connect() first")
        return self.left, self.right

    def _all_sockets(self) -> list[socket.socket]:
        return [*self.out.values(), *self.inp.values()]

    def close(self) -> None:
        """Close every connection (neighbours see EOF at once and stop too)."""
        for sock in self._all_sockets():
            sock.close()
        if self._listener is not None:
            self._listener.close()
        self.out, self.inp, self._listener = {}, {}, None

    def __enter__(self) -> Ring:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _all_far(
    wanted: Mapping[socket.socket, int], got: Mapping[socket.socket, int], by: int
) -> bool:
    """Whether every receive still open has more than `by` bytes to come."""
    open_ = [wanted[s] - got[s] for s in wanted if got[s] < wanted[s]]
    return bool(open_) and min(open_) > by


def _ecn_negotiated(sock: socket.socket) -> bool:
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    return bool(info[TCP_INFO_OPTIONS_OFFSET] & TCPI_OPT_ECN)


def _reason(err: OSError) -> str:
    if err.errno in (errno.ECONNRESET, errno.EPIPE):
        return "its connection was reset (the process ended)"
    return f"{err.strerror or err}"


def _unsent(sock: socket.socket) -> int:
    """Bytes written to a TCP socket and not yet sent (SIOCOUTQNSD); 0 when unknown."""
    try:
        raw = fcntl.ioctl(sock.fileno(), SIOCOUTQNSD, b"\0\0\0\0")
    except OSError:
        return 0
    return int(struct.unpack("i", raw)[0])


def relay_limit(send_at: Sequence[int], recv_at: Sequence[int], received: int) -> int:
    """How much of the send stream may have left once `received` bytes came in: step 0
    freely, byte j of step k once byte j of step k-1 is in (`send_at`/`recv_at`: each
    step's start in its stream, the total last).

    >>> relay_limit([0, 4, 8, 12], [0, 4, 8, 12], 0)  # step 0 only
    4
    >>> relay_limit([0, 4, 8, 12], [0, 4, 8, 12], 6)  # steps 0 and 1, 2 bytes of step 2
    10
    >>> relay_limit([0, 4, 8, 12], [0, 4, 8, 12], 12)
    12
    """
    steps = len(send_at) - 1
    done = bisect.bisect_right(recv_at, received) - 1  # steps fully in: 0 .. done-1
    if done >= steps:
        return send_at[-1]
    limit = send_at[done + 1]  # steps 0 .. done may leave whole
    if done + 1 < steps:
        limit += min(send_at[done + 2] - send_at[done + 1], received - recv_at[done])
    return limit
