"""Where do a sweep's cells run?

On Dask distributed (our choice over Ray: pure-Python wheels, a local
cluster of worker processes by default, the same client API for a remote
scheduler's address, and its dashboard). Dask places the tasks, reruns
those of a worker that died on the others, and reports each task's error;
nothing here schedules by hand. `InlineEngine` runs cells one after another
in this process, for debugging and quick tests.

Every engine yields `(index, result, error)` as tasks finish, in any order;
one task's error never stops the others.
"""

from __future__ import annotations

import logging
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
        if address is None:
            # One thread per worker process: the simulator is CPU-bound Python and numba.
            self.cluster = LocalCluster(
                host=LOCAL_HOST,  # the scheduler, too, listens on loopback only
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=dashboard_address,
                silence_logs=silence_logs,
            )
            self.client = Client(self.cluster)
        else:
            try:
                self.client = Client(address, timeout="10s")
            except (OSError, TimeoutError) as err:
                raise UserInputError(
                    f"--address {address}: no Dask scheduler answered ({err})"
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
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()

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
        raise UserInputError("--engine dask needs --address (a running scheduler, host:port)")
    if kind == "inline":
        if address is not None or workers is not None:
            raise UserInputError("--engine inline runs in this process: drop --address/--workers")
        return InlineEngine()
    return DaskEngine(address, workers, dashboard_address)


def did_you_mean_engine(kind: str) -> str:
    from topologies.errors import did_you_mean

    msg = did_you_mean(kind, ENGINES, "engine")
    return msg + (" (Ray is not supported: see the README)" if kind == "ray" else "")
