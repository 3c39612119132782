"""Which cells does a reproduction run, where, and which are already done?

A cell is one seed (and load) of a scenario in the simulator, or one run of
it on the emulated fabric. Its key hashes its settings, its workload and the
harness version, so a rerun into the same folder skips the cells on disk
(`scheduler.sweep.store.CellStore`, written the moment a cell finishes) and
a new harness version runs them again.

Where cells run (Dask, the engine `cassini sweep` uses): simulator cells on
any worker; emulation cells need root and the whole machine, so on a
cluster (`--address`) they ask for the worker resource `fabric=1`, which
only workers started with `dask worker --resources "fabric=1"` offer (one
at a time each); on the local cluster they run one after the other in this
process once the workers' simulator cells are done. A failed cell is tried
again (`retries`) where it ran; if it still fails it is reported, listed in
failures.json and run again by the next invocation, never dropped.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from .scenarios import Scenario
from .workloads import TraceWorkload

SIMULATOR, EMULATION = "simulator", "emulation"
COLUMNS = (SIMULATOR, EMULATION)
FABRIC = "fabric"  # the Dask worker resource an emulation cell needs
RUNS_FOLDER = "emulation"  # DIR/emulation/<cell key>/: an emulation cell's reports


@dataclass(frozen=True)
class CellTask:
    """All a worker needs to run one cell."""

    scenario: str
    column: str
    index: int  # the seed (simulator) or the run (emulation)
    load: float | None
    quick: bool
    workload: Any
    key: str = ""
    out_dir: str | None = None  # where an emulation cell writes its reports

    def settings(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "column": self.column, "index": self.index,
                "load": self.load, "quick": self.quick}  # fmt: skip


def cell_key(task: CellTask, version: str) -> str:
    """A stable name for the cell's results: settings, workload and harness version."""
    doc = {"harness": version, "cell": task.settings(), "workload": repr(task.workload)}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:20]


def record_problem(record: Mapping[str, Any], task: CellTask) -> str | None:
    """Why a stored record is not what `attempt` returns for `task`, or None: the shape
    the tables read (a record of another shape was a traceback, or pooled as figures).

    >>> t = CellTask("two-vgg19", SIMULATOR, 1, None, True, None, key="k")
    >>> record_problem({"cell": t.settings(), "figures": {"x": True}}, t)
    "its figure 'x' is not a number"
    """
    if record.get("cell") != task.settings():
        return "its 'cell' is not the cell of its key"
    figures = record.get("figures")
    if not isinstance(figures, dict) or not figures:
        return "its 'figures' is not a mapping of figures"
    for name, value in figures.items():
        if not isinstance(value, int | float) or isinstance(value, bool):
            return f"its figure {name!r} is not a number"
    kinds = {"attempts": int, "errors": list, "wall_s": int | float, "flags": list,
             "trustworthy": bool | None, "transport": str | None}  # fmt: skip
    for name, kind in kinds.items():
        if name in record and not isinstance(record[name], kind):
            return f"its {name!r} is not {getattr(kind, '__name__', kind)}"
    if any(not isinstance(x, str) for x in (*record.get("errors", ()), *record.get("flags", ()))):
        return "its 'errors' or 'flags' are not lines of text"
    return None


def plan_cells(
    scenarios: Sequence[Scenario],
    quick: bool,
    columns: Sequence[str],
    out_dir: Path,
    version: str,
    seeds: int | None = None,
    runs: int | None = None,
) -> list[CellTask]:
    """Every cell of the scenarios, keyed; `seeds` / `runs` replace the scenarios' counts."""
    tasks = []
    for s in scenarios:
        size = s.size(quick)
        if SIMULATOR in columns:
            loads: Sequence[float | None] = (
                size.simulator.loads
                if isinstance(size.simulator, TraceWorkload) and size.simulator.loads
                else (None,)
            )
            for seed in range(1, (seeds or size.seeds) + 1):
                for load in loads:
                    tasks.append(CellTask(s.name, SIMULATOR, seed, load, quick, size.simulator))
        if EMULATION in columns and size.emulation is not None:
            for run in range(1, (runs or size.runs) + 1):
                tasks.append(CellTask(s.name, EMULATION, run, None, quick, size.emulation))
    keyed = [replace(t, key=cell_key(t, version)) for t in tasks]
    return [
        replace(t, out_dir=str(out_dir / RUNS_FOLDER / t.key)) if t.column == EMULATION else t
        for t in keyed
    ]


def run_cell(task: CellTask) -> dict[str, Any]:
    """What a worker runs: the cell's figures as a plain record."""
    from .emu_cells import emulate_cell
    from .sim_cells import simulate_cell

    if task.column == SIMULATOR:
        result: dict[str, Any] = {"figures": simulate_cell(task.workload, task.index, task.load)}
    else:
        assert task.out_dir is not None
        result = emulate_cell(task.workload, task.index, task.out_dir)
    return result


def attempt(
    fn: Callable[[CellTask], dict[str, Any]], retries: int, task: CellTask
) -> dict[str, Any]:
    """`fn(task)` as a stored record, tried up to 1 + `retries` times; the last error is raised
    with the number of attempts."""
    errors = []
    for n in range(1, retries + 2):
        began = time.monotonic()
        try:
            result = fn(task)
        except Exception as err:  # the cell's own failure: try again, then report it
            errors.append(f"{type(err).__name__}: {err}")
            continue
        return {"key": task.key, "cell": task.settings(), "attempts": n,
                "errors": errors, "wall_s": round(time.monotonic() - began, 3), **result}  # fmt: skip
    raise CellFailed(f"failed {len(errors)} time(s): {errors[-1]}")


class CellFailed(RuntimeError):
    """A cell that failed every attempt."""


Outcome = tuple[CellTask, dict[str, Any] | None, BaseException | None]


def run_cells(
    tasks: Sequence[CellTask],
    engine: Any,
    fn: Callable[[CellTask], dict[str, Any]] = run_cell,
    retries: int = 1,
    emulation_here: bool = True,
) -> Iterator[Outcome]:
    """Run `tasks` and yield each as it finishes, with its record or its error.

    `engine` is a `scheduler.sweep` engine. On a Dask engine, simulator cells
    go to any worker; emulation cells go to workers offering `FABRIC` unless
    `emulation_here` (the local cluster: this machine), then they run in this
    process, one at a time, after the workers' simulator cells (the whole machine).
    """
    call = partial(attempt, fn, retries)
    client = getattr(engine, "client", None)
    if client is None:  # inline: every cell here, in order
        for task in tasks:
            yield _guarded(call, task)
        return
    from distributed import as_completed

    here = [t for t in tasks if t.column == EMULATION and emulation_here]
    if any(t.column == EMULATION for t in tasks) and not emulation_here:
        check_fabric_workers(client)
    futures = {}
    for t in tasks:
        if t in here:
            continue
        resources = {FABRIC: 1} if t.column == EMULATION else None
        futures[client.submit(call, t, pure=False, resources=resources)] = t
    for fut in as_completed(list(futures)):
        task = futures[fut]
        try:
            record = fut.result()
        except Exception as err:  # the cell's failure, or KilledWorker after Dask's retries
            yield task, None, err
        else:
            yield task, record, None
        fut.release()
    # This machine's fabric, one cell at a time, once the local workers are done: an
    # emulation needs the whole machine (the fidelity monitor flags a busy one).
    for task in here:
        yield _guarded(call, task)


def check_fabric_workers(client: Any) -> None:
    """Refuse emulation cells on a cluster where no worker offers a fabric (they would wait
    for ever)."""
    from topologies.errors import UserInputError

    workers = client.scheduler_info(n_workers=-1)["workers"].values()
    if not any(w.get("resources", {}).get(FABRIC, 0) >= 1 for w in workers):
        raise UserInputError(
            f"--address: no worker offers the resource {FABRIC}=1 for emulation cells; start "
            f'one with `dask worker ADDRESS --resources "{FABRIC}=1"` or use --columns simulator'
        )


def _guarded(call: Callable[[CellTask], dict[str, Any]], task: CellTask) -> Outcome:
    try:
        return task, call(task), None
    except Exception as err:
        return task, None, err
