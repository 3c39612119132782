"""Run a sweep: skip the cells on disk, run the rest on an engine, write the outputs.

The client reads every input file once (topologies, models, a trace file)
and ships the parsed data with each task, so workers of a remote cluster
need the harness installed but none of the files. Each result is stored the
moment it arrives; a failed cell is reported and left for the next run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from scheduler.workloads.profiles import ModelSpec, load_models
from scheduler.workloads.traces import TRACE_KINDS, TraceJob, load_trace
from topologies.errors import UserInputError
from topologies.outputs import write_file

from .aggregate import markdown_report, seed_runs
from .cells import CellTask, cell_key, harness_version, ordered_records, record_problem, run_cell
from .config import Cell, SweepConfig
from .engine import Engine
from .plots import write_plots
from .progress import QuietProgress, SweepEvents, error_text
from .store import CellStore, write_parquet


@dataclass(frozen=True)
class SweepResult:
    """What a sweep did and where its outputs are."""

    total: int
    skipped: int
    ran: int
    failures: tuple[Mapping[str, Any], ...]
    records: tuple[Mapping[str, Any], ...]
    paths: Mapping[str, Path] = field(default_factory=dict)
    rejected: tuple[str, ...] = ()  # stored cells not trusted (and run again), one line each


def prepare_tasks(
    config: SweepConfig, cells: Sequence[Cell], keys: Sequence[str]
) -> list[CellTask]:
    """Tasks with their inputs loaded; an unknown topology is an error naming the file and key."""
    from topologies.library import load_topology

    topologies = {}
    for spec in dict.fromkeys(c.topology for c in cells):
        try:
            topologies[spec] = load_topology(spec)
        except UserInputError as err:
            raise UserInputError(f"{config.source}: key 'topologies': {err}") from err
    try:
        models: Mapping[str, ModelSpec] = load_models(config.models)
    except UserInputError as err:
        raise UserInputError(f"{config.source}: key 'models': {err}") from err
    trace_jobs: tuple[TraceJob, ...] | None = None
    if config.trace not in TRACE_KINDS:
        try:
            trace_jobs = tuple(load_trace(Path(config.trace), models))
        except UserInputError as err:
            raise UserInputError(f"{config.source}: key 'trace': {err}") from err
    return [
        CellTask(c, k, topologies[c.topology], models, trace_jobs)
        for c, k in zip(cells, keys, strict=True)
    ]


def run_sweep(
    config: SweepConfig,
    out_dir: str | Path,
    engine: Engine,
    events: SweepEvents | None = None,
) -> SweepResult:
    """Run the grid's missing cells on `engine`, then write runs.parquet, table.md and plots."""
    events = events or QuietProgress()
    store = CellStore(out_dir)
    version = harness_version()
    cells = config.cells()
    keys = [cell_key(c, config.inputs, version) for c in cells]
    done = store.done_keys()
    checks = {k: partial(record_problem, cell=c) for k, c in zip(keys, cells, strict=True)}
    # Each stored record is read once: here for the cells already done, after saving
    # for the ones this run finishes; one of the wrong shape runs again.
    stored = {k: r for k in checks if k in done and (r := store.load(k, checks[k])) is not None}
    to_run = [i for i, k in enumerate(keys) if k not in stored]
    tasks = prepare_tasks(config, [cells[i] for i in to_run], [keys[i] for i in to_run])
    events.started(len(cells), len(cells) - len(to_run), engine.description, engine.dashboard_link)
    failures: list[Mapping[str, Any]] = []
    try:
        for i, record, error in engine.run(run_cell, tasks):
            cell = tasks[i].cell
            if error is None:
                store.save(record)
                key = tasks[i].key
                reloaded = store.load(key, checks[key])  # as a later run will see it
                if reloaded is not None:
                    stored[key] = reloaded
            else:
                failures.append(
                    {"cell": cell.settings(), "key": tasks[i].key, "error": error_text(error)}
                )
            events.finished(cell, error)
    finally:
        events.closed()
    records = ordered_records([stored[k] for k in dict.fromkeys(keys) if k in stored])
    paths = write_outputs(records, store, version)
    paths["failures"] = store.write_failures(failures)
    return SweepResult(
        total=len(cells),
        skipped=len(cells) - len(to_run),
        ran=len(to_run) - len(failures),
        failures=tuple(failures),
        records=tuple(records),
        paths=paths,
        rejected=tuple(store.rejected),
    )


def write_outputs(
    records: Sequence[Mapping[str, Any]], store: CellStore, version: str
) -> dict[str, Path]:
    """runs.parquet, table.md and the PNGs from the grid's stored records."""
    paths = {"runs": write_parquet(records, store.root / "runs.parquet", version, store.flag)}
    paths["table"] = write_file(
        store.root / "table.md", markdown_report(records) + "\n", store.flag
    )
    if records:
        paths.update(write_plots(records, seed_runs(records), store.root))
    return paths
