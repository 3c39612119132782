"""Which jobs arrive when: the workloads of the paper's evaluation, as files.

A trace is a tuple of `TraceJob` sorted by arrival. Three generators follow the
paper (section 8 of the design): Poisson arrivals at a target load, a dynamic
trace (a busy cluster, then DLRM + ResNet50 arrive), and a snapshot (`--jobs`
random jobs, all at t = 0). `four-jobs` is the fixed example `cassini schedule`
places by default: four 6-GPU jobs that fill the 24-GPU testbed; `snapshot2` is
the paper's snapshot 2 (VGG19, VGG16 and ResNet50), the main job's example.
Traces are plain files a user can write by hand:

CSV, one job per line after a header naming the columns (order free):

    arrival_s,model,workers,iterations,batch_size,name
    0.0,vgg16,4,500,,
    12.5,resnet50,8,800,64,my-resnet

JSON: `{"jobs": [{"arrival_s": 0.0, "model": "vgg16", "workers": 4,
"iterations": 500}, ...]}` (or a bare list). `batch_size` and `name` are
optional; names default to `j<index>-<model>`. A name becomes part of file
names, so it must be a safe name (`topologies.names`: 1-64 letters, digits,
`.`, `_`, `+`, `-`). Numbers are bounded (`LIMITS`) so a typo cannot ask the
simulator for centuries of work.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from topologies.datafile import parse_data, read_text_file
from topologies.errors import UserInputError, did_you_mean
from topologies.names import check_name, shown
from topologies.outputs import write_file

from .profiles import ModelSpec, build_profile, load_models, model_names, normalize_model_name

TRACE_KINDS = ("poisson", "dynamic", "snapshot", "four-jobs", "snapshot2")

FOUR_JOBS: tuple[tuple[str, int], ...] = (
    # (model, workers): 24 GPUs on the default testbed. No 6-worker job fits
    # in one 4-server rack, so each spans two racks and shares ToR uplinks
    # with a neighbour: the case Cassini exists for.
    ("vgg19", 6),
    ("vgg16", 6),
    ("wideresnet101", 6),
    ("bert", 6),
)
FIELDS = ("arrival_s", "model", "workers", "iterations", "batch_size", "name")
REQUIRED = ("arrival_s", "model", "workers", "iterations")
# (our choice) Upper bounds far above the paper's workloads (200-1000
# iterations, 1-12 GPUs, arrivals within hours): a trace past them is a typo
# or an attack, and is refused before anything runs.
LIMITS: dict[str, float] = {
    "arrival_s": 30 * 24 * 3600.0,  # thirty days
    "workers": 100_000,
    "iterations": 10_000_000,
    "batch_size": 1_000_000,
}


@dataclass(frozen=True)
class TraceJob:
    """One arriving job. `iterations` is the work it must complete."""

    name: str
    model: str
    workers: int
    iterations: int
    arrival_s: float = 0.0
    batch_size: int | None = None


def poisson_trace(
    jobs: int,
    total_gpus: int,
    load: float = 0.9,
    seed: int = 0,
    max_workers: int = 12,
    iterations: tuple[int, int] = (200, 1000),
    models: Mapping[str, ModelSpec] | None = None,
) -> tuple[TraceJob, ...]:
    """Poisson arrivals whose offered load is `load` x the cluster's GPUs.

    Models are drawn with equal probability from `models` (default: the 13
    built-in ones; a user's models file adds its own to the draw).

    Load = arrival rate x mean(GPU x seconds per job) / total GPUs (Little's law
    on GPUs), so the mean gap is mean_gpu_seconds / (load x total_gpus). The GPU
    seconds use each job's profile iteration time alone (no contention), so the
    real busy fraction ends a little above `load` once contention stretches
    jobs: that is the pressure the paper's traces put on the network.
    """
    if jobs < 1:
        raise UserInputError(f"--jobs must be >= 1, got {jobs}")
    if not 0.0 < load <= 2.0:
        raise UserInputError(f"--load must be in (0, 2], got {load}")
    rng = np.random.default_rng(seed)
    specs = models if models is not None else load_models()
    names = model_names(specs)
    drawn_models = rng.integers(0, len(names), size=jobs)
    workers = rng.integers(1, min(max_workers, total_gpus) + 1, size=jobs)
    iters = rng.integers(iterations[0], iterations[1] + 1, size=jobs)
    gpu_seconds = np.array(
        [
            build_profile(names[m], int(w), models=specs).iteration_ms / 1e3 * int(w) * int(n)
            for m, w, n in zip(drawn_models, workers, iters, strict=True)
        ]
    )
    mean_gap = float(gpu_seconds.mean()) / (load * total_gpus)
    gaps = rng.exponential(mean_gap, size=jobs)
    gaps[0] = 0.0
    arrivals = np.cumsum(gaps)
    return tuple(
        TraceJob(f"j{i:04d}-{names[m]}", names[m], int(w), int(n), round(float(t), 6))
        for i, (m, w, n, t) in enumerate(zip(drawn_models, workers, iters, arrivals, strict=True))
    )


def snapshot_trace(
    jobs: int,
    total_gpus: int,
    seed: int = 0,
    max_workers: int = 12,
    models: Mapping[str, ModelSpec] | None = None,
) -> tuple[TraceJob, ...]:
    """All jobs present at t = 0 (more than fit queue, FIFO by name)."""
    base = poisson_trace(jobs, total_gpus, 1.0, seed, max_workers, models=models)
    return tuple(TraceJob(j.name, j.model, j.workers, j.iterations, 0.0) for j in base)


def four_jobs_trace(iterations: int = 1000) -> tuple[TraceJob, ...]:
    """The fixed example of `FOUR_JOBS`, all at t = 0 (no seed, no load).

    >>> [j.name for j in four_jobs_trace()]
    ['vgg19-0', 'vgg16-1', 'wideresnet101-2', 'bert-3']
    """
    return tuple(
        TraceJob(f"{model}-{i}", model, workers, iterations, 0.0)
        for i, (model, workers) in enumerate(FOUR_JOBS)
    )


SNAPSHOT2: tuple[tuple[str, int], ...] = (
    # The paper's snapshot 2 (Figure 12b): VGG19 and VGG16 interleave, ResNet50's small
    # demand overlaps both. (our choice) The paper gives no worker counts: 10 + 10 + 4
    # fill the testbed's 24 GPUs, and a 10-worker job spans three 4-server racks, so the
    # two VGGs cannot both avoid a shared ToR uplink (at 8 each every job fits two
    # racks of its own and nothing is shared: nothing for Cassini to do).
    ("vgg19", 10),
    ("vgg16", 10),
    ("resnet50", 4),
)


def snapshot2_trace(iterations: int = 1000) -> tuple[TraceJob, ...]:
    """The paper's snapshot 2 (`SNAPSHOT2`), all at t = 0.

    >>> [(j.name, j.workers) for j in snapshot2_trace()]
    [('vgg19-0', 10), ('vgg16-1', 10), ('resnet50-2', 4)]
    """
    return tuple(
        TraceJob(f"{model}-{i}", model, workers, iterations, 0.0)
        for i, (model, workers) in enumerate(SNAPSHOT2)
    )


def dynamic_trace(
    total_gpus: int,
    seed: int = 0,
    background_jobs: int | None = None,
    arrive_s: float = 30.0,
    background_workers: int = 6,
    newcomer_workers: int = 3,
    background_models: Sequence[str] | None = None,
    models: Mapping[str, ModelSpec] | None = None,
) -> tuple[TraceJob, ...]:
    """A busy cluster, then DLRM and ResNet50 arrive together (the paper's case).

    What the case needs: the newcomers cannot avoid running jobs, so the
    placement decides *which* running jobs they share links with. (our
    choice) Background jobs of `background_workers` GPUs take every GPU the
    two newcomers will not (so after the arrival the cluster is full) and run
    long enough (900-1000 iterations) to still be running at `arrive_s`. On
    the default testbed (6 racks of 4 single-GPU servers) a locality-first
    scheduler puts each 6-GPU job on a full rack plus half of another, so the
    6 free GPUs are 2 in each of 3 racks: no rack holds a 3-GPU newcomer,
    each newcomer spans two racks and shares those racks' uplinks with the
    running jobs there, and equally good placements differ in which running
    job each newcomer meets. Background models are drawn uniformly from the
    other 11 models (the newcomers are the only DLRM and ResNet50 jobs, as in
    the paper's description), or given as `background_models` (one job each).
    `models` is the catalogue in use (a user's models file may add to it).
    """
    rng = np.random.default_rng(seed)
    known = model_names(models)
    names = [m for m in known if m not in ("dlrm", "resnet50")]
    chosen = [normalize_model_name(m) for m in background_models or ()]
    for given, model in zip(background_models or (), chosen, strict=True):
        if model not in known:
            raise UserInputError(did_you_mean(given, known, "background model"))
    count = background_jobs
    if chosen:
        count = len(chosen)
    elif count is None:
        count = max(1, (total_gpus - 2 * newcomer_workers) // background_workers)
    out: list[TraceJob] = []
    for i in range(count):
        model = chosen[i] if chosen else names[int(rng.integers(0, len(names)))]
        out.append(
            TraceJob(
                f"bg{i:03d}-{model}", model, background_workers, int(rng.integers(900, 1001)), 0.0
            )
        )
    out.append(TraceJob("new-dlrm", "dlrm", newcomer_workers, 1000, arrive_s))
    out.append(TraceJob("new-resnet50", "resnet50", newcomer_workers, 1000, arrive_s))
    return tuple(out)


def generate_trace(
    kind: str,
    total_gpus: int,
    jobs: int = 60,
    load: float = 0.9,
    seed: int = 0,
    models: Mapping[str, ModelSpec] | None = None,
) -> tuple[TraceJob, ...]:
    """Dispatch on a trace kind name (`TRACE_KINDS`)."""
    if kind == "poisson":
        return poisson_trace(jobs, total_gpus, load, seed, models=models)
    if kind == "snapshot":
        return snapshot_trace(jobs, total_gpus, seed, models=models)
    if kind == "dynamic":
        return dynamic_trace(total_gpus, seed, models=models)
    if kind == "four-jobs":
        return four_jobs_trace()
    if kind == "snapshot2":
        return snapshot2_trace()
    raise UserInputError(did_you_mean(kind, TRACE_KINDS, "trace kind"))


def resolve_trace(
    spec: str,
    total_gpus: int,
    jobs: int = 60,
    load: float = 0.9,
    seed: int = 0,
    models: Mapping[str, ModelSpec] | None = None,
    kinds: Sequence[str] = TRACE_KINDS,
    flag: str = "--trace",
) -> tuple[tuple[TraceJob, ...], str]:
    """The jobs a trace argument names, and a label for reports.

    `spec` is one of `kinds` (generated with `jobs`, `load` and `seed`) or a
    trace file. A name that is neither a kind nor a file is answered with the
    kinds that exist:

    >>> resolve_trace("four-jobs", 24)[1]
    'four-jobs (jobs=4)'
    >>> resolve_trace("poison", 24)
    Traceback (most recent call last):
    ...
    topologies.errors.UserInputError: --trace: no trace kind named 'poison'. Did you mean 'poisson'? (known: dynamic, four-jobs, poisson, snapshot, snapshot2) or give a trace file
    """
    if spec in kinds:
        trace = generate_trace(spec, total_gpus, jobs=jobs, load=load, seed=seed, models=models)
        load_text = f", load={load}" if spec == "poisson" else ""
        seed_text = "" if spec == "four-jobs" else f", seed={seed}"  # fixed: no draw
        return trace, f"{spec} (jobs={len(trace)}{load_text}{seed_text})"
    path = Path(spec)
    if not path.exists() and path.suffix.lower() not in (".csv", ".json"):
        raise UserInputError(
            f"{flag}: " + did_you_mean(spec, kinds, "trace kind") + " or give a trace file"
        )
    return load_trace(path, models), str(path)


# ---------------------------------------------------------------- files


def write_trace(jobs: Iterable[TraceJob], path: str | Path) -> Path:
    """Write CSV or JSON by the file suffix (.json, else CSV)."""
    out = Path(path)
    rows = [_row(j) for j in jobs]
    if out.suffix.lower() == ".json":
        return write_file(out, json.dumps({"jobs": rows}, indent=1) + "\n")
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(FIELDS), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return write_file(out, buf.getvalue())


def _row(job: TraceJob) -> dict[str, Any]:
    d = asdict(job)
    return {k: d[k] for k in FIELDS}


def load_trace(
    path: str | Path, models: Mapping[str, ModelSpec] | None = None
) -> tuple[TraceJob, ...]:
    """Read a trace file; errors name the file, the line (or entry) and the field.

    Jobs may name any model of `models` (default: the built-in ones).
    """
    src = Path(path)
    text = read_text_file(src, "trace")
    known = model_names(models)
    if src.suffix.lower() == ".json":
        return _parse_json(text, src.name, known)
    return _parse_csv(text, src.name, known)


def _parse_csv(text: str, where: str, known: Sequence[str]) -> tuple[TraceJob, ...]:
    # newline="": the csv module reads line ends itself, so a lone CR is a line end,
    # not an error; what it still refuses (a CR inside an unquoted field) is one line.
    reader = csv.reader(io.StringIO(text, newline=""))
    header: list[str] | None = None
    jobs: list[TraceJob] = []
    for lineno, cells in _csv_rows(reader, where):
        if not cells or all(not c.strip() for c in cells) or cells[0].lstrip().startswith("#"):
            continue
        if header is None:
            header = [c.strip().lower() for c in cells]
            for i, col in enumerate(header):
                if col not in FIELDS:
                    raise UserInputError(
                        f"{where}:{lineno}: " + did_you_mean(col[:40], FIELDS, "column")
                    )
                if col in header[:i]:
                    raise UserInputError(f"{where}:{lineno}: column '{col}' appears twice")
            missing = [f for f in REQUIRED if f not in header]
            if missing:
                raise UserInputError(
                    f"{where}:{lineno}: header lacks column(s) {', '.join(missing)}"
                )
            continue
        if len(cells) != len(header):
            raise UserInputError(
                f"{where}:{lineno}: expected {len(header)} fields, got {len(cells)}"
            )
        record = {k: v.strip() for k, v in zip(header, cells, strict=True)}
        jobs.append(_job_from_record(record, f"{where}:{lineno}", len(jobs), known))
    if header is None:
        raise UserInputError(f"{where}: empty trace (no header line)")
    return _finish(jobs, where)


def _csv_rows(reader: Any, where: str) -> Iterator[tuple[int, list[str]]]:
    """(line number, cells) of each record; a malformed one is a UserInputError."""
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            raise UserInputError(f"{where}:{reader.line_num}: not CSV: {err}") from None
        yield reader.line_num, cells


def _parse_json(text: str, where: str, known: Sequence[str]) -> tuple[TraceJob, ...]:
    raw = parse_data(text, "json", where)
    entries = raw.get("jobs") if isinstance(raw, dict) else raw
    if not isinstance(entries, list):
        raise UserInputError(f'{where}: expected a list of jobs or {{"jobs": [...]}}')
    jobs: list[TraceJob] = []
    for i, entry in enumerate(entries):
        at = f"{where}: jobs[{i}]"
        if not isinstance(entry, dict):
            raise UserInputError(f"{at}: expected an object, got {type(entry).__name__}")
        for key in entry:
            if key not in FIELDS:
                raise UserInputError(f"{at}: " + did_you_mean(str(key)[:40], FIELDS, "field"))
        for key in REQUIRED:
            if key not in entry:
                raise UserInputError(f"{at}: missing field '{key}'")
        record = {k: ("" if v is None else str(v)) for k, v in entry.items()}
        jobs.append(_job_from_record(record, at, len(jobs), known))
    return _finish(jobs, where)


def _job_from_record(record: dict[str, str], at: str, index: int, known: Sequence[str]) -> TraceJob:
    arrival = _number(record, "arrival_s", at, float, allow_zero=True)
    raw_model = record.get("model", "")
    key = normalize_model_name(raw_model)
    if key not in known:
        raise UserInputError(f"{at}: model: " + did_you_mean(raw_model[:40], known, "model"))
    workers = _number(record, "workers", at, int)
    iterations = _number(record, "iterations", at, int)
    batch = _number(record, "batch_size", at, int) if record.get("batch_size") else None
    name = check_name(record.get("name") or f"j{index:04d}-{key}", "job name", f"{at}: name")
    return TraceJob(
        name,
        key,
        int(workers),
        int(iterations),
        float(arrival),
        None if batch is None else int(batch),
    )


def _number(
    record: dict[str, str], field: str, at: str, kind: type, allow_zero: bool = False
) -> float:
    text = record.get(field, "")
    limit = LIMITS[field]
    what = "a non-negative number" if allow_zero else "a positive integer"
    what += f" up to {limit:g}"
    try:
        value = float(text) if kind is float else int(text)
    except ValueError:  # also an integer of more digits than Python converts
        raise UserInputError(f"{at}: {field}: expected {what}, got {shown(text)}") from None
    if not 0 <= value <= limit or (value == 0 and not allow_zero):  # NaN fails both
        raise UserInputError(f"{at}: {field}: expected {what}, got {shown(text)}")
    return value


def _finish(jobs: list[TraceJob], where: str) -> tuple[TraceJob, ...]:
    if not jobs:
        raise UserInputError(f"{where}: the trace has no jobs")
    seen: set[str] = set()
    for job in jobs:
        if job.name in seen:
            raise UserInputError(f"{where}: job name {job.name!r} appears twice")
        seen.add(job.name)
    return tuple(sorted(jobs, key=lambda j: (j.arrival_s, j.name)))


def check_fits(jobs: Sequence[TraceJob], total_gpus: int, where: str = "trace") -> None:
    """Refuse jobs that could never run on this cluster (they would wait forever)."""
    for job in jobs:
        if job.workers > total_gpus:
            raise UserInputError(
                f"{where}: job {job.name}: workers: asks for {job.workers} GPUs, "
                f"the cluster has {total_gpus}"
            )
