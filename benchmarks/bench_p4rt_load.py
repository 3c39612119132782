"""Does the P4Runtime server hold up under load? (run by hand, prints numbers)

    .venv/bin/python benchmarks/bench_p4rt_load.py [--clients 8] [--updates 20000] [--cycles 1000]
    .venv/bin/python benchmarks/bench_p4rt_load.py --json
    .venv/bin/python benchmarks/bench_p4rt_load.py --no-oversized

The server is `serve(device_id, "127.0.0.1:0")` (tables in its own process,
no packet path) in a process of its own, and every client is a process too,
so the clients' pure-Python protobuf work shares no interpreter lock with
the server or with each other. The code measured is the tree this file
belongs to. Three parts, each against a fresh server:

- load: `--clients` clients, each the primary of its own role (r0, r1, ...;
  on this target every role has full pipeline access, so per-role writes
  work); r0 pushes the pipeline before anyone writes. Together they insert
  then delete `--updates` `CassiniIngress.logical_forward` entries (distinct
  MACs per client) in Writes of `--batch-size`. The table holds 4,096
  entries, fewer than 20,000, so (our choice) each client inserts one batch,
  deletes it, and repeats: at most clients x batch-size entries are
  installed at once. Reports updates/s over the whole run (first Write sent
  to last answered), failed updates (must be 0), the median and slowest
  Write, and the server's RSS before and after. The clients' per-RPC
  timeout is --timeout (see TIMEOUT_S).
- streams: `--cycles` times in a row, open a session (StreamChannel +
  arbitration, default role, the same election id each time as a
  reconnecting controller would), then close it; the server's RSS and
  thread count after 0, 100, 500 and all cycles, and the time per cycle.
  The server takes at most 16 StreamChannels at once, so a stream it did
  not release would refuse the 17th session.
- oversized (skip with --no-oversized): with 4,000 entries installed, one
  Write of 10,000 INSERTs that all fail (each a duplicate of an installed
  entry), timed from send to answer (the request is serialized before the
  clock starts), with the server's RSS before and after and its peak
  (VmHWM); then one Write of 10,001 updates, which must be refused with
  RESOURCE_EXHAUSTED before any update is tried (its time is mostly the
  server parsing the request, which gRPC does before the handler runs).

RSS is VmRSS of /proc/<server pid>/status, in MB (10^6 bytes). Prints a
Markdown table with the numbers measured before this round of fixes beside
ours, or JSON with --json.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEVICE_ID = 1
TABLE = "CassiniIngress.logical_forward"
ELECTION_ID = (0, 1)
# (our choice) The clients' per-RPC timeout. The device applies one Write at a time, so
# with 8 clients a 500-update Write waits for the other 7 (about 4 s): the client's
# default of 5 s lets some of them end in DEADLINE_EXCEEDED.
TIMEOUT_S = 60.0
START_TIMEOUT_S = 60.0  # for the server to listen, and for every client to be connected
CHECKPOINTS = (0, 100, 500)  # stream cycles after which RSS is taken (and after the last)
# Entries installed before the failing Write, whose 10,000 updates repeat them and so
# all fail (ALREADY_EXISTS) whatever the table's size.
OVERSIZED_INSTALLED = 4000
MAX_UPDATES_PER_WRITE = 10_000  # emulation/softswitch/device.py; checked against it in main()
# Before this round of fixes (the same measurements, for comparison).
BEFORE = {
    "load": "508 updates/s, 0 errors",
    "streams": "RSS flat",
    "failing_write": "100,000 updates: 73 MB -> 1.62 GB, 52 s",
    "oversized_write": "no cap (accepted)",
}


# --- the server process ------------------------------------------------------------


def _serve(conn: Connection) -> None:
    """Child process: serve one device on a free port, send the address, stop when told."""
    from emulation.softswitch.p4runtime_service import serve

    with serve(DEVICE_ID, "127.0.0.1:0") as running:
        conn.send(running.address)
        with suppress(EOFError):  # EOF: the benchmark died, stop too
            conn.recv()


@dataclass(frozen=True)
class Server:
    address: str
    pid: int


@contextmanager
def server_process() -> Iterator[Server]:
    """A P4Runtime server in its own process, stopped on leaving the with-block."""
    ctx = multiprocessing.get_context("spawn")
    ours, theirs = ctx.Pipe()
    process = ctx.Process(target=_serve, args=(theirs,), name="p4rt-server", daemon=True)
    process.start()
    theirs.close()
    try:
        if not ours.poll(START_TIMEOUT_S):
            raise RuntimeError(f"the P4Runtime server did not start within {START_TIMEOUT_S:g} s")
        address = ours.recv()
        assert process.pid is not None
        yield Server(address, process.pid)
    finally:
        with suppress(OSError):
            ours.send(None)
        process.join(10)
        if process.is_alive():
            process.terminate()
            process.join(5)


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (kB) and Threads from /proc/<pid>/status."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM", "Threads"):
            values[key] = int(rest.split()[0])
    return values


def rss_mb(pid: int) -> float:
    return proc_status(pid)["VmRSS"] * 1024 / 1e6


def peak_mb(pid: int) -> float:
    return proc_status(pid)["VmHWM"] * 1024 / 1e6


# --- part 1: concurrent writers ------------------------------------------------------


def mac_of(client: int, n: int) -> str:
    """A distinct locally administered MAC per (client, n): 02:cc:<client>:<n>."""
    return f"02:cc:{client:02x}:{(n >> 16) & 0xFF:02x}:{(n >> 8) & 0xFF:02x}:{n & 0xFF:02x}"


def forward_entries(client: int, count: int, first: int = 0) -> list[Any]:
    from controlplane.entries import TableEntry

    return [
        TableEntry(
            TABLE, {"ingress_port": 1, "dst_mac": mac_of(client, first + n)},
            "set_egress_port", {"port": 2},
        )
        for n in range(count)
    ]  # fmt: skip


@dataclass(frozen=True)
class ClientResult:
    client: int
    updates: int = 0
    failed: int = 0
    start: float = 0.0  # time.monotonic() (CLOCK_MONOTONIC: one clock for all processes)
    end: float = 0.0
    write_s: tuple[float, ...] = ()  # each Write, send to answer
    error: str = ""  # the first failure, if any


def _client(
    address: str,
    client: int,
    updates: int,
    batch_size: int,
    timeout: float,
    ready: Any,
    go: Any,
    results: Any,
) -> None:
    """Child process: be primary of role r<client>; insert and delete `updates` entries."""
    from controlplane.entries import Update, UpdateType
    from controlplane.p4info import load_p4info
    from controlplane.session import P4RuntimeSession, WriteError

    failed, sent, first_error = 0, 0, ""
    times: list[float] = []
    start = end = 0.0
    try:
        index = load_p4info()
        with P4RuntimeSession.connect(
            address, DEVICE_ID, ELECTION_ID, role=f"r{client}", timeout=timeout, p4info=index
        ) as session:
            if not session.is_primary:
                raise RuntimeError(f"client {client} is not the primary of role r{client}")
            if client == 0:
                session.set_pipeline(index)
            ready.wait(START_TIMEOUT_S)
            go.wait(START_TIMEOUT_S)
            start = time.monotonic()
            for offset in range(0, updates, batch_size):
                entries = forward_entries(client, min(batch_size, updates - offset), offset)
                for kind in (UpdateType.INSERT, UpdateType.DELETE):
                    batch = [Update(kind, e) for e in entries]
                    t0 = time.monotonic()
                    try:
                        session.write(batch, batch_size=len(batch))
                    except WriteError as err:
                        failed += len(err.details)
                        first_error = first_error or str(err).splitlines()[-1].strip()
                    except Exception as err:  # the RPC failed whole (timeout, refused)
                        failed += len(batch)
                        first_error = first_error or f"{type(err).__name__}: {err}"
                    times.append(time.monotonic() - t0)
                    sent += len(batch)
            end = time.monotonic()
    except Exception as err:
        first_error = first_error or f"{type(err).__name__}: {err}"
        failed += 2 * updates - sent
        ready.abort()
        go.abort()
    results.put(asdict(ClientResult(client, sent, failed, start, end, tuple(times), first_error)))


@dataclass(frozen=True)
class LoadResult:
    clients: int
    updates: int  # inserts + deletes sent
    failed: int
    seconds: float
    updates_per_s: float
    write_p50_s: float
    write_max_s: float
    rss_before_mb: float
    rss_after_mb: float
    errors: tuple[str, ...] = ()


def load_run(
    server: Server, clients: int, inserts: int, batch_size: int, timeout: float
) -> LoadResult:
    """`clients` writer processes, `inserts` inserts and as many deletes in total."""
    ctx = multiprocessing.get_context("spawn")
    ready, go = ctx.Barrier(clients + 1), ctx.Barrier(clients + 1)
    results = ctx.Queue()
    share, extra = divmod(inserts, clients)
    workers = [
        ctx.Process(
            target=_client,
            args=(
                server.address, c, share + (c < extra), batch_size, timeout, ready, go, results
            ),
            name=f"p4rt-client-{c}",
            daemon=True,
        )
        for c in range(clients)
    ]  # fmt: skip
    for w in workers:
        w.start()
    rss_before = 0.0
    try:
        ready.wait(START_TIMEOUT_S)  # everyone connected, pipeline pushed
        rss_before = rss_mb(server.pid)
        go.wait(START_TIMEOUT_S)
    except threading.BrokenBarrierError:
        pass  # a client failed to start: it says why in its result
    collected = [ClientResult(**results.get()) for _ in workers]
    for w in workers:
        w.join(10)
    rss_after = rss_mb(server.pid)
    ran = [r for r in collected if r.end > 0]
    seconds = (max(r.end for r in ran) - min(r.start for r in ran)) if ran else 0.0
    sent = sum(r.updates for r in collected)
    times = [t for r in collected for t in r.write_s]
    return LoadResult(
        clients=clients,
        updates=sent,
        failed=sum(r.failed for r in collected),
        seconds=seconds,
        updates_per_s=sent / seconds if seconds else 0.0,
        write_p50_s=statistics.median(times) if times else 0.0,
        write_max_s=max(times, default=0.0),
        rss_before_mb=rss_before,
        rss_after_mb=rss_after,
        errors=tuple(f"client {r.client}: {r.error}" for r in collected if r.error),
    )


# --- part 2: stream cycles -----------------------------------------------------------


@dataclass(frozen=True)
class StreamResult:
    cycles: int
    failed: int
    open_s: float  # per cycle: connect (channel, StreamChannel, arbitration answer)
    close_s: float  # per cycle: session.close()
    rss_mb: dict[int, float]  # after this many cycles
    threads: dict[int, int]
    growth_mb: float
    errors: tuple[str, ...] = ()


def stream_cycles(server: Server, cycles: int, timeout: float) -> StreamResult:
    """Open and close a session `cycles` times in a row, from this process."""
    from controlplane.session import P4RuntimeSession

    marks = sorted({c for c in CHECKPOINTS if c < cycles} | {cycles})
    rss: dict[int, float] = {}
    threads: dict[int, int] = {}
    errors: list[str] = []
    failed = 0
    opening = closing = 0.0
    for done in range(cycles + 1):
        if done in marks:
            time.sleep(0.2)  # let the server finish with the last stream
            status = proc_status(server.pid)
            rss[done] = status["VmRSS"] * 1024 / 1e6
            threads[done] = status["Threads"]
        if done == cycles:
            break
        t0 = time.monotonic()
        try:
            session = P4RuntimeSession.connect(
                server.address, DEVICE_ID, ELECTION_ID, timeout=timeout
            )
        except Exception as err:
            failed += 1
            if len(errors) < 3:
                errors.append(f"cycle {done}: {type(err).__name__}: {err}")
            continue
        t1 = time.monotonic()
        session.close()
        opening, closing = opening + t1 - t0, closing + time.monotonic() - t1
    return StreamResult(
        cycles=cycles,
        failed=failed,
        open_s=opening / max(1, cycles - failed),
        close_s=closing / max(1, cycles - failed),
        rss_mb=rss,
        threads=threads,
        growth_mb=rss[cycles] - rss[0],
        errors=tuple(errors),
    )


# --- part 3: oversized and failing Writes ---------------------------------------------


@dataclass(frozen=True)
class OversizedResult:
    failing_updates: int
    failing_codes: dict[str, int]  # per-update codes in the failed Write's details
    failing_s: float
    rss_before_mb: float
    rss_after_mb: float
    peak_before_mb: float
    peak_after_mb: float
    refused_updates: int
    refused_code: str
    refused_s: float


def oversized_writes(server: Server, timeout: float) -> OversizedResult:
    """One Write of MAX_UPDATES_PER_WRITE duplicates, then one of one update more.

    The requests are built and serialized before the clock starts and sent
    as bytes, so the times are the server's (parse, apply, answer) and the
    wire's, not the client's pure-Python encoding.
    """
    import grpc
    from google.rpc import code_pb2, status_pb2

    from controlplane.entries import Update, UpdateType
    from controlplane.p4info import load_p4info
    from controlplane.proto.p4.v1 import p4runtime_pb2
    from controlplane.session import CHANNEL_OPTIONS, P4RuntimeSession

    index = load_p4info()
    installed = forward_entries(0xFF, OVERSIZED_INSTALLED)
    with P4RuntimeSession.connect(
        server.address, DEVICE_ID, ELECTION_ID, timeout=timeout, p4info=index
    ) as session:
        session.set_pipeline(index)
        session.write([Update(UpdateType.INSERT, e) for e in installed])

        def request(count: int) -> Any:
            message = p4runtime_pb2.WriteRequest(device_id=DEVICE_ID)
            message.election_id.high, message.election_id.low = ELECTION_ID
            protos = [Update(UpdateType.INSERT, e).to_proto(index) for e in installed]
            message.updates.extend(protos[i % len(protos)] for i in range(count))
            return message

        failing, oversized = request(MAX_UPDATES_PER_WRITE), request(MAX_UPDATES_PER_WRITE + 1)
        channel = grpc.insecure_channel(server.address, options=CHANNEL_OPTIONS)
        try:
            # No request serializer: the bytes go out as they are.
            write = channel.unary_unary("/p4.v1.P4Runtime/Write")

            def send(message: Any) -> tuple[Any, float]:
                wire = message.SerializeToString()
                t0 = time.monotonic()
                try:
                    write(wire, timeout=max(timeout, 120.0))
                except grpc.RpcError as err:
                    return err, time.monotonic() - t0
                return None, time.monotonic() - t0

            rss_before, hwm_before = rss_mb(server.pid), peak_mb(server.pid)
            err, failing_s = send(failing)
            time.sleep(0.2)
            rss_after, hwm_after = rss_mb(server.pid), peak_mb(server.pid)
            codes: dict[str, int] = {}
            for key, value in (err.trailing_metadata() or ()) if err is not None else ():
                if key == "grpc-status-details-bin":
                    for detail in status_pb2.Status.FromString(value).details:
                        error = p4runtime_pb2.Error()
                        detail.Unpack(error)
                        name = code_pb2.Code.Name(error.canonical_code)
                        codes[name] = codes.get(name, 0) + 1
            refused, refused_s = send(oversized)
        finally:
            channel.close()
    return OversizedResult(
        failing_updates=len(failing.updates),
        failing_codes=codes,
        failing_s=failing_s,
        rss_before_mb=rss_before,
        rss_after_mb=rss_after,
        peak_before_mb=hwm_before,
        peak_after_mb=hwm_after,
        refused_updates=len(oversized.updates),
        refused_code=refused.code().name if refused is not None else "OK",
        refused_s=refused_s,
    )


# --- report --------------------------------------------------------------------------


@dataclass
class Report:
    load: LoadResult | None = None
    streams: StreamResult | None = None
    oversized: OversizedResult | None = None
    before: dict[str, str] = field(default_factory=lambda: dict(BEFORE))


def markdown(report: Report) -> str:
    rows: list[tuple[str, str, str]] = []
    if (load := report.load) is not None:
        inserts = load.updates // 2
        rows.append((
            f"{load.clients} clients, {inserts:,} inserts + {inserts:,} deletes",
            f"{load.updates_per_s:,.0f} updates/s ({load.updates:,} in {load.seconds:.1f} s), "
            f"{load.failed} errors",
            BEFORE["load"],
        ))  # fmt: skip
        rows.append((
            "  one Write (p50 / max)",
            f"{load.write_p50_s:.2f} s / {load.write_max_s:.2f} s",
            "",
        ))  # fmt: skip
        rows.append((
            "  server RSS before / after",
            f"{load.rss_before_mb:.0f} MB / {load.rss_after_mb:.0f} MB",
            "",
        ))  # fmt: skip
    if (streams := report.streams) is not None:
        marks = " / ".join(f"{c:,}: {mb:.1f}" for c, mb in streams.rss_mb.items())
        threads = " / ".join(str(t) for t in streams.threads.values())
        rows.append((
            f"{streams.cycles:,} stream cycles: RSS (MB) after",
            f"{marks} (growth {streams.growth_mb:+.1f} MB), {streams.failed} failed",
            BEFORE["streams"],
        ))  # fmt: skip
        rows.append(("  server threads at the same points", threads, ""))
        rows.append((
            "  time per cycle (open + arbitrate + close)",
            f"{(streams.open_s + streams.close_s) * 1e3:.0f} ms: open {streams.open_s * 1e3:.1f} ms "
            f"+ close {streams.close_s * 1e3:.1f} ms",
            "",
        ))  # fmt: skip
    if (big := report.oversized) is not None:
        codes = ", ".join(f"{n:,} {code}" for code, n in big.failing_codes.items()) or "no details"
        rows.append((
            f"one Write of {big.failing_updates:,} failing updates",
            f"{big.failing_s:.2f} s, RSS {big.rss_before_mb:.0f} -> {big.rss_after_mb:.0f} MB "
            f"(peak {big.peak_before_mb:.0f} -> {big.peak_after_mb:.0f} MB); {codes}",
            BEFORE["failing_write"],
        ))  # fmt: skip
        rows.append((
            f"one Write of {big.refused_updates:,} updates",
            f"{big.refused_code} in {big.refused_s:.2f} s",
            BEFORE["oversized_write"],
        ))  # fmt: skip
    lines = ["| measurement | this run | before this round |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    errors = [
        *(report.load.errors if report.load else ()),
        *(report.streams.errors if report.streams else ()),
    ]
    if errors:
        lines += ["", "Errors:", *(f"- {e}" for e in errors)]
    return "\n".join(lines)


def verdicts(report: Report) -> list[str]:
    """What the run must show and did not (empty: all good)."""
    bad = []
    if report.load is not None and report.load.failed:
        bad.append(f"{report.load.failed} updates failed under load (must be 0)")
    if report.streams is not None and report.streams.failed:
        bad.append(f"{report.streams.failed} stream cycles failed")
    if report.oversized is not None:
        big = report.oversized
        if big.failing_codes.get("ALREADY_EXISTS", 0) != big.failing_updates:
            bad.append(
                f"the failing Write's details were {big.failing_codes}, not all ALREADY_EXISTS"
            )
        if big.refused_code != "RESOURCE_EXHAUSTED":
            bad.append(f"the oversized Write got {big.refused_code}, not RESOURCE_EXHAUSTED")
    return bad


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=8, help="writer processes (default 8)")
    parser.add_argument(
        "--updates", type=int, default=20_000, help="inserts in total, and as many deletes"
    )
    parser.add_argument("--batch-size", type=int, default=500, help="updates per Write")
    parser.add_argument("--cycles", type=int, default=1000, help="stream open/close cycles")
    parser.add_argument(
        "--timeout", type=float, default=None,
        help=f"per-RPC timeout of the clients, s (default {TIMEOUT_S:g}; the client's own is 5)",
    )  # fmt: skip
    parser.add_argument("--no-oversized", action="store_true", help="skip part 3")
    parser.add_argument("--parts", default="load,streams,oversized", help="which parts to run")
    parser.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    args = parser.parse_args(argv)

    from controlplane.p4info import load_p4info
    from emulation.softswitch import device

    if device.MAX_UPDATES_PER_WRITE != MAX_UPDATES_PER_WRITE:
        parser.error(
            f"the device takes {device.MAX_UPDATES_PER_WRITE} updates per Write; "
            f"this benchmark expects {MAX_UPDATES_PER_WRITE} (update MAX_UPDATES_PER_WRITE)"
        )
    known = ("load", "streams", "oversized")
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    for p in parts:
        if p not in known:
            parser.error(f"unknown part {p!r}; the parts are {', '.join(known)}")
    if args.no_oversized and "oversized" in parts:
        parts.remove("oversized")
    size = load_p4info().table(TABLE).size
    if args.clients < 1 or args.batch_size < 1 or args.updates < args.clients:
        parser.error("--clients and --batch-size must be >= 1, and --updates >= --clients")
    if args.clients * args.batch_size > size:
        parser.error(
            f"{args.clients} clients x {args.batch_size} entries per Write exceed the "
            f"{size} entries {TABLE} holds (lower --batch-size to {size // args.clients})"
        )
    timeout = args.timeout or TIMEOUT_S

    report = Report()
    runs: dict[str, Callable[[Server], None]] = {
        "load": lambda s: setattr(
            report, "load", load_run(s, args.clients, args.updates, args.batch_size, timeout)
        ),
        "streams": lambda s: setattr(report, "streams", stream_cycles(s, args.cycles, timeout)),
        "oversized": lambda s: setattr(report, "oversized", oversized_writes(s, timeout)),
    }
    for part in parts:
        print(f"running {part} ...", file=sys.stderr, flush=True)
        with server_process() as server:
            runs[part](server)
    if args.json:
        print(json.dumps(asdict(report), indent=2))
    else:
        print(markdown(report))
    bad = verdicts(report)
    for line in bad:
        print(f"NOT MET: {line}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
