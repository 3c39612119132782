"""Run a reproduction: plan the cells, skip those on disk, run the rest, write the tables.

    from emulation.reproduce.run import ReproduceOptions, reproduce
    result = reproduce(["two-vgg19"], ReproduceOptions(quick=True), "out/", engine)

What `cassini reproduce` calls. Each finished cell is stored at once in
`DIR/cells/` (`scheduler.sweep.store.CellStore`); a failed one is listed in
`DIR/failures.json` and in the tables, and runs again next time.
"""

from __future__ import annotations

import importlib.metadata
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from topologies.errors import UserInputError, did_you_mean

from .aggregate import Column, ScenarioResult, column
from .grid import (
    COLUMNS,
    EMULATION,
    SIMULATOR,
    CellTask,
    plan_cells,
    record_problem,
    run_cell,
    run_cells,
)
from .scenarios import Scenario, select
from .tables import write


@dataclass(frozen=True)
class ReproduceOptions:
    quick: bool = False
    seeds: int | None = None  # replaces each scenario's number of seeds
    runs: int | None = None  # replaces each scenario's number of emulation runs
    columns: tuple[str, ...] = COLUMNS
    retries: int = 1  # further attempts of a failed cell, where it ran
    emulation_here: bool = True  # local engine: emulation cells in this process


@dataclass(frozen=True)
class Reproduction:
    results: tuple[ScenarioResult, ...]
    ran: int
    skipped: int
    failures: tuple[Mapping[str, Any], ...]
    paths: Mapping[str, Path] = field(default_factory=dict)
    doc: Mapping[str, Any] = field(default_factory=dict)
    rejected: tuple[str, ...] = ()  # stored cells not trusted (and run again), one line each


def check_columns(text: str) -> tuple[str, ...]:
    """`simulator,emulation` -> a tuple of known column names."""
    names = tuple(dict.fromkeys(c.strip() for c in text.split(",") if c.strip()))
    for n in names:
        if n not in COLUMNS:
            raise UserInputError("--columns: " + did_you_mean(n, COLUMNS, "column"))
    if not names:
        raise UserInputError(f"--columns: name one of {', '.join(COLUMNS)}")
    return names


def reproduce(
    names: Sequence[str],
    options: ReproduceOptions,
    out_dir: str | Path,
    engine: Any,
    on_cell: Callable[[CellTask, BaseException | None], None] | None = None,
    fn: Callable[[CellTask], dict[str, Any]] = run_cell,
) -> Reproduction:
    """Run the named scenarios' missing cells on `engine` (a `scheduler.sweep` engine) and
    write reproduction.json/.md/.html into `out_dir`."""
    from scheduler.sweep.store import CellStore

    scenarios = select(list(names))
    store = CellStore(out_dir)
    version = importlib.metadata.version("cassini-harness")
    tasks = plan_cells(scenarios, options.quick, options.columns, store.root, version,
                       options.seeds, options.runs)  # fmt: skip
    stored = {t.key: r for t in tasks
              if (r := store.load(t.key, partial(record_problem, task=t))) is not None}  # fmt: skip
    todo = [t for t in tasks if t.key not in stored]
    failures: list[dict[str, Any]] = []
    for task, record, error in run_cells(todo, engine, fn, options.retries, options.emulation_here):
        if error is None and record is not None:
            store.save(record)
            stored[task.key] = record
        else:
            failures.append({"cell": task.settings(), "key": task.key,
                             "error": f"{type(error).__name__}: {error}"})  # fmt: skip
        if on_cell is not None:
            on_cell(task, error)
    store.write_failures(failures)
    results = tuple(_result(s, tasks, stored, failures) for s in scenarios)
    doc = finite({
        "settings": {"harness": version, "quick": options.quick, "seeds": options.seeds,
                     "runs": options.runs, "columns": list(options.columns),
                     "engine": getattr(engine, "description", "inline")},
        "scenarios": [r.as_dict() for r in results],
        "failures": failures,
    })  # fmt: skip
    paths = write(doc, store.root)
    return Reproduction(results, len(todo) - len(failures), len(tasks) - len(todo),
                        tuple(failures), paths, doc, tuple(store.rejected))  # fmt: skip


def _result(
    scenario: Scenario,
    tasks: Sequence[CellTask],
    stored: Mapping[str, Mapping[str, Any]],
    failures: Sequence[Mapping[str, Any]],
) -> ScenarioResult:
    failed_keys = {f["key"] for f in failures}
    cols: dict[str, Column] = {}
    for name in COLUMNS:
        mine = [t for t in tasks if t.scenario == scenario.name and t.column == name]
        note = ""
        if name == EMULATION and scenario.full.emulation is None:
            note = scenario.emulation_note
        elif not mine:
            note = "not asked for (--columns)"
        seeds = len({(t.index, t.load) for t in mine}) if name == SIMULATOR else len(mine)
        cols[name] = column(
            scenario, name, seeds,
            [stored[t.key] for t in mine if t.key in stored],
            sum(1 for t in mine if t.key in failed_keys), note,
        )  # fmt: skip
    return ScenarioResult(scenario, cols[SIMULATOR], cols[EMULATION])


def finite(value: Any) -> Any:
    """`value` with every infinite or NaN float as a string ("inf", "nan"): strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value
