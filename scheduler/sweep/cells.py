"""What does one cell run, and under which key are its results kept?

A cell's key hashes its settings, the digests of the files it reads and the
harness version, so a re-run finds the cells it already has and a new
harness version runs them again. `run_cell` is what a worker executes: the
same trace generation, checks and `run_experiment` call as `cassini
simulate`, reduced to plain records (no arrays cross the wire).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass
from typing import Any

import numpy as np

from scheduler.simulator.experiment import SchedulerSummary, run_experiment
from scheduler.workloads.profiles import ModelSpec
from scheduler.workloads.traces import TraceJob, check_fits, generate_trace
from topologies.model import Topology

from ..simulator import SimSettings
from .config import Cell

QUANTILES = np.linspace(0.0, 100.0, 101)  # iteration-time percentiles kept per run, for CDFs


def harness_version() -> str:
    return importlib.metadata.version("cassini-harness")


def cell_key(cell: Cell, inputs: Mapping[str, str], version: str | None = None) -> str:
    """A stable name for a cell's results: its settings, input files and harness version."""
    used = {p: d for p, d in inputs.items() if p in (cell.trace, cell.models, cell.topology)}
    doc = {"harness": version or harness_version(), "cell": cell.settings(), "inputs": used}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:20]


@dataclass(frozen=True)
class CellTask:
    """All a worker needs: files are read on the client, so workers need none of them."""

    cell: Cell
    key: str
    topology: Topology
    models: Mapping[str, ModelSpec]
    trace_jobs: tuple[TraceJob, ...] | None = None  # a trace file's jobs, parsed once


def cell_trace(task: CellTask) -> tuple[tuple[TraceJob, ...], str]:
    """The cell's jobs and the label `cassini simulate` would give them."""
    c = task.cell
    if task.trace_jobs is not None:
        return task.trace_jobs, c.trace
    jobs = generate_trace(
        c.trace,
        task.topology.total_gpus(),
        jobs=c.jobs if c.jobs is not None else 60,
        load=c.load if c.load is not None else 0.9,
        seed=c.seed,
        models=task.models,
    )
    load = f", load={c.load}" if c.trace == "poisson" else ""
    return jobs, f"{c.trace} (jobs={len(jobs)}{load}, seed={c.seed})"


def run_cell(task: CellTask) -> dict[str, Any]:
    """Simulate one cell; a plain record of its settings, metadata and per-scheduler figures."""
    c = task.cell
    jobs, label = cell_trace(task)
    check_fits(jobs, task.topology.total_gpus(), label)
    exp = run_experiment(
        jobs,
        task.topology,
        list(c.schedulers),
        c.seed,
        SimSettings(fast_forward=not c.exact, drift_sigma=c.drift, seed=c.seed),
        c.candidates,
        label,
        models=task.models,
        models_label=c.models or "built-in",
        precision_deg=c.precision,
        aggregate=c.aggregate,
        pace=c.pacing,
    )
    quantiles = {
        name: np.percentile(_iterations(res), QUANTILES).tolist()
        for name, res in exp.results.items()
    }
    return {
        "key": task.key,
        "cell": c.settings(),
        "meta": exp.settings,
        "summaries": [summary_record(s) for s in exp.summaries],
        "iteration_ms_q": quantiles,
    }


def record_problem(record: Mapping[str, Any], cell: Cell) -> str | None:
    """Why a stored record is not what `run_cell` returns for `cell`, or None: the shape
    every later step reads (a record of another shape was a traceback, or trusted).

    >>> from scheduler.sweep.config import parse_sweep_config
    >>> record_problem({"cell": {}}, parse_sweep_config({"seeds": 1}, "s").cells()[0])
    "its 'cell' is not the cell of its key"
    """
    if record.get("cell") != json.loads(json.dumps(cell.settings())):
        return "its 'cell' is not the cell of its key"
    if not isinstance(record.get("meta"), dict):
        return "its 'meta' is not a mapping"
    summaries, quantiles = record.get("summaries"), record.get("iteration_ms_q")
    if not isinstance(summaries, list) or not isinstance(quantiles, dict):
        return "its 'summaries' is not a list or its 'iteration_ms_q' not a mapping"
    names = [s.get("name") if isinstance(s, dict) else None for s in summaries]
    if sorted(map(str, names)) != sorted(cell.schedulers):
        return f"its summaries are not one per scheduler ({', '.join(cell.schedulers)})"
    for s in summaries:
        if (why := _summary_problem(s)) is not None:
            return f"summary '{s['name']}': {why}"
        q = quantiles.get(s["name"])
        if not isinstance(q, list) or len(q) != len(QUANTILES) or not all(map(_number, q)):
            return f"'iteration_ms_q' of '{s['name']}' is not {len(QUANTILES)} numbers"
    return None


def _summary_problem(s: Mapping[str, Any]) -> str | None:
    for name, f in SchedulerSummary.__dataclass_fields__.items():
        if name == "name":
            continue
        if name not in s:
            if f.default is MISSING:
                return f"no '{name}'"
            continue
        value = s[name]
        if name.startswith("per_model_"):
            if not isinstance(value, dict) or not all(map(_number, value.values())):
                return f"'{name}' is not a mapping of numbers"
        elif not _number(value):
            return f"'{name}' is not a number"
    return None


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _iterations(result: Any) -> np.ndarray:
    its = [j.iteration_ms for j in result.jobs if len(j.iteration_ms)]
    return np.concatenate(its) if its else np.zeros(1)


def summary_record(s: SchedulerSummary) -> dict[str, Any]:
    """A summary as plain data, unrounded (ratios of rounded figures would drift)."""
    d = dict(s.__dict__)
    d["per_model_mean_ms"] = dict(s.per_model_mean_ms)
    d["per_model_marked_gbit"] = dict(s.per_model_marked_gbit)
    return d


def summary_from_record(d: Mapping[str, Any]) -> SchedulerSummary:
    fields = SchedulerSummary.__dataclass_fields__
    return SchedulerSummary(**{k: v for k, v in d.items() if k in fields})


def record_rows(record: Mapping[str, Any], version: str) -> list[dict[str, Any]]:
    """One row per scheduler: the cell's settings, then the figures of `summary.json`."""
    cell = record["cell"]
    settings = {k: cell.get(k) for k in Cell.__dataclass_fields__ if k != "schedulers"}
    rows = []
    for s in record["summaries"]:
        row: dict[str, Any] = {"cell": record["key"], "harness": version, **settings}
        row["scheduler"] = s["name"]
        row.update({k: s[k] for k in SchedulerSummary.__dataclass_fields__ if k != "name"})
        row["iteration_ms_q"] = list(record["iteration_ms_q"].get(s["name"], []))
        rows.append(row)
    return rows


def ordered_records(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Records sorted by their cell's settings, seed last, so outputs do not depend on timing."""

    def sort_key(r: Mapping[str, Any]) -> tuple[str, int]:
        c = dict(r["cell"])
        seed = int(c.pop("seed"))
        return json.dumps(c, sort_keys=True), seed

    return sorted(records, key=sort_key)
