"""How do a job's workers hold their connections and relay a ring AllReduce through them?

One `Ring` per worker: persistent TCP connections between the job's workers
in placement order, two per worker by default: one to the right neighbour
(sends), one from the left (receives). `Ring.relay` moves the steps of a
ring AllReduce (`ring_plan`) over them: a worker sends byte j of step k
only once byte j of step k-1 has arrived from its left, so a slow link
anywhere stretches the whole job. (our choice) The steps are cut through,
the way NCCL's ring moves a step in slices, rather than one whole step
after another: at scaled rates a frame takes 246 us per hop (50 Mbit/s),
and waiting at every step for the last frame of the previous one added
that path's latency 2(N-1) times per phase (a ResNet50 ring of 4 ran its
24.6 ms Up phase in about 35 ms); cut through, the latency is paid once.
Each step carries its header byte (`header.Header`). The relay's loop runs
compiled (`_relay.c`) when it is built; the Python loop here is its reference.

Other patterns (pipeline: `patterns`) add connections: a worker opens one
to every rank it sends to and accepts one from every rank it receives from;
`exchange` runs one step of any pattern over them.

Transport (`transport`): kernel TCP, cubic with ECN (`tcp_ecn=1` in the
namespace, data as ECT(0)), each connection paced at its share of the
scaled NIC rate. The namespace default would be bbr, which ignores ECN, and
DCTCP is absent from this kernel; see `transport` for what cubic does with
an ECE echo (a loss-like x 0.7 cut once per window, not a proportional one).
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

from . import transport
from .header import Header
from .ring_plan import ring_allreduce_plan

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


class Ring:
    """One worker's persistent connections: `connect`, `barrier`, `allreduce` / `relay`,
    `close` (`exchange.exchange` and `exchange.agree` run other patterns' steps on them).

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
        # What may arrive during one nap of a relay or exchange loop (see NAP_S); 0: no naps.
        fastest = max(self.pace_gbps.values(), default=0.0)
        self.nap_bytes = int(NAP_S * fastest * 1e9 / 8)
        self.congestion = congestion
        self.out: dict[int, socket.socket] = {}  # rank -> the connection we opened to it
        self.inp: dict[int, socket.socket] = {}  # rank -> the connection it opened to us
        self._listener: socket.socket | None = None
        self._zeros = memoryview(bytes(0))
        # relay's loop compiled (`_relay.c`) when it is built; False runs the Python loop.
        self.compiled = _relay is not None if compiled is None else compiled
        if self.compiled and _relay is None:
            raise RuntimeError("the compiled relay loop is not built (scripts/setup.sh builds it)")
        self.scratch = memoryview(bytearray(SCRATCH_BYTES))  # where every receive lands
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
        right = self.outgoing(self.right_rank)
        left = self.incoming(self.left_rank)
        send_at = list(itertools.accumulate((1 + b for b in sends), initial=0))
        recv_at = list(itertools.accumulate((1 + b for b in receives), initial=0))
        known = header or Header()
        if self.compiled:
            return self._relay_compiled(left, right, send_at, recv_at, known)
        steps, send_total, recv_total = len(sends), send_at[-1], recv_at[-1]
        sent = received = 0
        selector = selectors.DefaultSelector()
        with self.non_blocking((right, left)), contextlib.closing(selector):
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
                    raise self.lost(peer, f"no progress for {self.timeout_s:g} s")
                for key, _mask in events:
                    if key.fileobj is left:
                        want = min(recv_total - received, SCRATCH_BYTES)
                        n = self.recv_some(left, want, self.left_rank)
                        for k in range(bisect.bisect_left(recv_at, received), steps):
                            if recv_at[k] >= received + n:
                                break
                            known = known.merge(Header.of(self.scratch[recv_at[k] - received]))
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
                            raise self.lost(self.right_rank, err) from None
                        sent += n
                    last_progress = time.monotonic()
                # Nap only while the right has enough queued to last it (or nothing
                # more is due to it) and the left still has much to send.
                far = 2 * self.nap_bytes
                if (
                    self.nap_bytes
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
        with self.non_blocking((right, left)):
            status, received, _sent, heard, err = _relay.relay(
                left.fileno(), right.fileno(), send_at, recv_at, known.byte(),
                self.nap_bytes, NAP_S, self.timeout_s, self.scratch, self._out_zeros,
            )  # fmt: skip
        if status == RELAY_LEFT_CLOSED:
            raise self.lost(self.left_rank, "it closed the connection")
        if status in (RELAY_RECV_FAILED, RELAY_SEND_FAILED):
            peer = self.left_rank if status == RELAY_RECV_FAILED else self.right_rank
            raise self.lost(peer, OSError(err, os.strerror(err)))
        if status == RELAY_NO_PROGRESS:
            peer = self.left_rank if err == 0 else self.right_rank
            raise self.lost(peer, f"no progress for {self.timeout_s:g} s")
        return received - (len(send_at) - 1), known.merge(Header.of(heard))

    def _window(self, start: int, end: int, send_at: Sequence[int], header: int) -> memoryview:
        """Bytes [start, end) of the send stream: zeros, with each step's header byte."""
        window = self.zeros(end - start)
        for k in range(bisect.bisect_left(send_at, start), len(send_at) - 1):
            if send_at[k] >= end:
                break
            window[send_at[k] - start] = header
        return memoryview(window)

    def zeros(self, size: int) -> bytearray:
        """`size` zero bytes to set header bytes in, copied from one kept buffer."""
        if len(self._zeros) < size:
            self._zeros = memoryview(bytes(size))
        return bytearray(self._zeros[:size])

    @contextlib.contextmanager
    def non_blocking(self, socks: Iterable[socket.socket]) -> Iterator[None]:
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

    def outgoing(self, other: int) -> socket.socket:
        """The connection this worker opened to worker `other`, to send on."""
        return self._connection(self.out, other, "send to")

    def incoming(self, other: int) -> socket.socket:
        """The connection worker `other` opened to this one, to receive on."""
        return self._connection(self.inp, other, "receive from")

    def _connection(self, table: dict[int, socket.socket], other: int, verb: str) -> socket.socket:
        sock = table.get(other)
        if sock is None:
            raise RuntimeError(
                f"job {self.job}: worker {self.rank} has no connection to {verb} worker "
                f"{other}: call connect() first, with it among the pattern's neighbours"
            )
        return sock

    def recv_some(self, sock: socket.socket, limit: int, peer: int) -> int:
        """Up to `limit` bytes from `sock` into `scratch`: how many (0: none yet)."""
        try:
            n = sock.recv_into(self.scratch, limit)
        except BlockingIOError:
            return 0
        except OSError as err:
            raise self.lost(peer, err) from None
        if n == 0:
            raise self.lost(peer, "it closed the connection")
        return n

    def _recv_exact(self, sock: socket.socket, size: int, peer: int) -> bytes:
        data = b""
        while len(data) < size:
            try:
                chunk = sock.recv(size - len(data))
            except TimeoutError:
                raise self.lost(peer, f"no answer for {self.timeout_s:g} s") from None
            except OSError as err:
                raise self.lost(peer, err) from None
            if not chunk:
                raise self.lost(peer, "it closed the connection")
            data += chunk
        return data

    def lost(self, peer: int, reason: str | OSError) -> PeerLost:
        """The error for a lost peer: `reason` said, or the socket error that says it."""
        said = _reason(reason) if isinstance(reason, OSError) else reason
        return PeerLost(self.job, self.rank, peer, self.peers[peer], said)

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
