"""Where do a sweep's cells run?

On Dask distributed (our choice over Ray: pure-Python wheels, a local
cluster of worker processes by default, the same client API for a remote
scheduler's address, and its dashboard). Dask places the tasks, reruns
those of a worker that died on the others, and reports each task's error;
nothing here schedules by hand. `InlineEngine` runs cells one after another
in this process, for debugging and quick tests.

Whoever can talk to a Dask scheduler or worker runs code as its user, and
loopback is not a boundary between the users of one machine. So the local
cluster speaks mutual TLS only, with a key and certificate made for this
run and held in this process's memory (`Security.temporary`): a client
without them cannot even finish the handshake. A remote scheduler is
reached with Dask's own TLS configuration (`distributed.comm.tls.*`);
`plain_address_warning` says when root points at one without TLS.

Every engine yields `(index, result, error)` as tasks finish, in any order;
one task's error never stops the others.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

from topologies.errors import UserInputError

T = TypeVar("T")
Outcome = tuple[int, Any, BaseException | None]

ENGINES = ("local", "dask", "inline")


class Engine(Protocol):
    """Runs a function over tasks and yields outcomes as they finish."""

    @property
    def dashboard_link(self) -> str | None: ...

    @property
    def description(self) -> str: ...

    def run(self, fn: Callable[[T], Any], tasks: Sequence[T]) -> Iterator[Outcome]: ...

    def close(self) -> None: ...


class InlineEngine:
    """Cells in this process, in order: no cluster, tracebacks stay local."""

    dashboard_link: str | None = None
    description = "inline (this process)"

    def run(self, fn: Callable[[T], Any], tasks: Sequence[T]) -> Iterator[Outcome]:
        for i, task in enumerate(tasks):
            try:
                result = fn(task)
            except Exception as err:  # a failed cell must not stop the others
                yield i, None, err
            else:
                yield i, result, None

    def close(self) -> None:
        pass


# Loopback unless the user asks: the dashboard shows the sweep's tasks and
# tracebacks to whoever can reach it, and has no authentication.
DEFAULT_DASHBOARD = "127.0.0.1:8787"
LOCAL_HOST = "127.0.0.1"
SCHEMES = ("tcp", "tls")  # Dask's TCP comm, plain and with TLS
MAX_PORT = 65535
_HOSTNAME = re.compile(
    r"(?=.{1,253}\Z)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\Z"
)
TLS_KEYS = (
    "distributed.comm.tls.ca-file",
    "distributed.comm.tls.client.cert",
    "distributed.comm.tls.client.key",
)


def scheduler_address(text: str) -> str:
    """`[tcp://|tls://]HOST:PORT` of a running scheduler, canonical, or one line naming it.

    >>> scheduler_address("10.0.0.5:8786"), scheduler_address("tls://[::1]:8786")
    ('tcp://10.0.0.5:8786', 'tls://[::1]:8786')
    """
    example = "e.g. tls://10.0.0.5:8786"
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "tcp", text  # Dask's default comm
    if scheme not in SCHEMES:
        raise UserInputError(
            f"--address {text!r}: unknown protocol '{scheme}://'; use tls:// or tcp:// ({example})"
        )
    if rest.startswith("["):
        inside, bracket, after = rest[1:].partition("]")
        host, colon, port_text = f"[{inside}]", after[:1], after[1:]
        ok_host = bool(bracket) and _is_ip(inside, ipaddress.IPv6Address)
    else:
        host, colon, port_text = rest.rpartition(":")
        host, colon, port_text = (host, colon, port_text) if colon else (rest, "", "")
        ok_host = bool(_HOSTNAME.match(host)) and (
            not re.fullmatch(r"[0-9.]+", host) or _is_ip(host, ipaddress.IPv4Address)
        )
    if not ok_host:
        raise UserInputError(
            f"--address {text!r}: '{host}' is not a host name or address ({example})"
        )
    if colon != ":" or not (port_text.isascii() and port_text.isdigit()):
        raise UserInputError(f"--address {text!r}: no port after the host ({example})")
    if not 1 <= int(port_text) <= MAX_PORT:
        raise UserInputError(f"--address {text!r}: port {port_text} is outside 1 to {MAX_PORT}")
    return f"{scheme}://{host}:{int(port_text)}"


def _is_ip(text: str, kind: type[ipaddress.IPv4Address] | type[ipaddress.IPv6Address]) -> bool:
    try:
        kind(text)
    except ValueError:
        return False
    return True


def plain_address_warning(address: str, euid: int) -> str | None:
    """A one-line warning when root talks to a scheduler without TLS, else None.

    Dask runs what its clients send and unpickles what its workers return:
    anyone who reaches a plain tcp:// scheduler runs code on its workers, and
    a forged reply runs code in this root process.

    >>> plain_address_warning("tls://h:8786", 0) is None
    True
    """
    if euid != 0 or scheduler_address(address).startswith("tls://"):
        return None
    return (
        f"warning: --address {address} is not TLS: anyone who can reach that scheduler can run "
        "code on its workers and in this root process; use tls:// (see the README)"
    )


def local_security() -> Any:
    """Mutual-TLS credentials made for one local cluster, held only in this process's memory
    (the workers get them over the pipe that starts them, never from a file or argv)."""
    from distributed.security import Security

    return Security.temporary()


def remote_security(address: str) -> Any:
    """Dask's configured security for `address`; a tls:// address with no client TLS
    settings is one line saying which settings to give."""
    from distributed.security import Security

    security = Security()
    if address.startswith("tls://") and not security.get_connection_args("client")["ssl_context"]:
        raise UserInputError(
            f"--address {address}: no TLS settings for a Dask client; set "
            f"{', '.join(TLS_KEYS)} in Dask's configuration (see the README)"
        )
    return security


class DaskEngine:
    """A Dask client: to a new `LocalCluster` of processes, or to a running scheduler.

    >>> with DaskEngine(workers=2, dashboard_address=None) as eng:  # doctest: +SKIP
    ...     list(eng.run(abs, [-1, -2]))
    """

    def __init__(
        self,
        address: str | None = None,
        workers: int | None = None,
        dashboard_address: str | None = DEFAULT_DASHBOARD,
        silence_logs: int = logging.ERROR,
    ) -> None:
        from distributed import Client, LocalCluster

        if address is not None and workers is not None:
            raise UserInputError(
                "--workers: a remote cluster has its own workers; drop --workers or --address"
            )
        if workers is not None and workers < 1:
            raise UserInputError(f"--workers must be >= 1, got {workers}")
        self.cluster: Any = None
        self.scratch: str | None = None
        if address is None:
            security = local_security()
            # The workers' spill and scratch files in a folder only we can enter, not in a
            # shared dask-scratch-space another user may have made first.
            self.scratch = tempfile.mkdtemp(prefix="cassini-dask-")
            try:
                # One thread per worker process: the simulator is CPU-bound Python and numba.
                self.cluster = LocalCluster(
                    host=LOCAL_HOST,  # the scheduler, too, listens on loopback only
                    protocol="tls://",
                    security=security,
                    n_workers=workers,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=dashboard_address,
                    silence_logs=silence_logs,
                    local_directory=self.scratch,
                )
                self.client = Client(self.cluster, security=security)
            except BaseException:
                self.close()
                raise
        else:
            address = scheduler_address(address)
            security = remote_security(address)
            try:
                self.client = Client(address, security=security, timeout="10s")
            except (OSError, TimeoutError) as err:  # CommClosedError is an OSError
                why = " ".join(str(err).split())
                raise UserInputError(
                    f"--address {address}: no Dask scheduler answered ({why})"
                ) from err
        self.address = address

    @property
    def dashboard_link(self) -> str | None:
        link = self.client.dashboard_link
        return str(link) if link else None

    @property
    def workers(self) -> int:
        return len(self.client.scheduler_info(n_workers=-1)["workers"])

    @property
    def description(self) -> str:
        where = f"scheduler {self.address}" if self.address else "local cluster"
        n = self.workers
        return f"dask {where}, {n} worker{'' if n == 1 else 's'}"

    def run(self, fn: Callable[[T], Any], tasks: Sequence[T]) -> Iterator[Outcome]:
        from distributed import as_completed

        futures = {self.client.submit(fn, t, pure=False): i for i, t in enumerate(tasks)}
        for fut in as_completed(list(futures)):
            i = futures[fut]
            try:
                result = fut.result()
            except Exception as err:  # the cell's own error, or KilledWorker after retries
                yield i, None, err
            else:
                yield i, result, None
            fut.release()

    def close(self) -> None:
        client = getattr(self, "client", None)
        if client is not None:
            client.close()
        if self.cluster is not None:
            self.cluster.close()
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)

    def __enter__(self) -> DaskEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_engine(
    kind: str = "local",
    address: str | None = None,
    workers: int | None = None,
    dashboard_address: str | None = DEFAULT_DASHBOARD,
) -> Engine:
    """The engine a user names: `local` (default), `dask` (needs an address) or `inline`."""
    if kind not in ENGINES:
        raise UserInputError("--engine: " + did_you_mean_engine(kind))
    if address is not None and kind == "local":
        kind = "dask"  # an address means the user's cluster
    if kind == "dask" and address is None:
        raise UserInputError("--engine dask needs --address (a running scheduler, tls://HOST:PORT)")
    if kind == "inline":
        if address is not None or workers is not None:
            raise UserInputError("--engine inline runs in this process: drop --address/--workers")
        return InlineEngine()
    return DaskEngine(address, workers, dashboard_address)


def did_you_mean_engine(kind: str) -> str:
    from topologies.errors import did_you_mean

    msg = did_you_mean(kind, ENGINES, "engine")
    return msg + (" (Ray is not supported: see the README)" if kind == "ray" else "")
