"""What grid of simulations does a sweep file name?

A sweep file is YAML; every list-valued key is an axis of the grid and the
cells are their product. A cell is one `cassini simulate` run: one trace
(kind, load, jobs, seed) on one topology under every scheduler named, with
one set of Cassini settings. Keys (defaults are `cassini simulate`'s):

    trace: poisson            # poisson | dynamic | snapshot | a trace FILE
    loads: [0.8, 0.9, 1.0]    # Poisson load (ignored by other traces)
    seeds: 21-60              # a list, one number, or "A-B"
    jobs: 60                  # jobs per trace (ignored by dynamic and files)
    topologies: [cassini-testbed]
    schedulers: [themis, th+cassini, pollux, po+cassini, random, ideal]
    precision: 5.0            # Cassini's angle precision, degrees
    aggregate: total          # how Cassini adds up link scores
    pacing: true              # may Cassini pace jobs to one period
    candidates: 10            # placements per decision
    drift: 0.0                # compute-time jitter sigma (enables the 5% rule)
    exact: false              # no steady-state fast-forward
    models: null              # YAML of measured profiles

Files (trace, models, topology files) are found relative to the sweep file.

>>> cfg = parse_sweep_config({"seeds": "1-3", "loads": [0.8, 0.9]}, "s.yaml")
>>> len(cfg.cells())
6
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from topologies.errors import UserInputError, did_you_mean

from ..baselines.registry import SCHEDULER_NAMES
from ..cassini import AGGREGATES
from ..traces import TRACE_KINDS

KEYS = (
    "trace",
    "loads",
    "seeds",
    "jobs",
    "topologies",
    "schedulers",
    "precision",
    "aggregate",
    "pacing",
    "candidates",
    "drift",
    "exact",
    "models",
)
DEFAULT_TOPOLOGY = "cassini-testbed"
DATA_SUFFIXES = (".json", ".yaml", ".yml")


@dataclass(frozen=True)
class Cell:
    """One simulation run of the grid; settings a trace kind ignores are None."""

    trace: str
    load: float | None
    seed: int
    jobs: int | None
    topology: str
    schedulers: tuple[str, ...]
    precision: float
    aggregate: str
    pacing: bool
    candidates: int
    drift: float
    exact: bool
    models: str | None

    def settings(self) -> dict[str, Any]:
        """Plain data: what the cell's key hashes and each result row carries."""
        d = asdict(self)
        d["schedulers"] = list(self.schedulers)
        return d

    def label(self) -> str:
        """Short, for progress lines and failures."""
        parts = [Path(self.trace).name if self.trace not in TRACE_KINDS else self.trace]
        if self.load is not None:
            parts.append(f"load {self.load:g}")
        if self.jobs is not None:
            parts.append(f"jobs {self.jobs}")
        parts += [f"seed {self.seed}", self.topology]
        return " ".join(parts)


@dataclass(frozen=True)
class SweepConfig:
    """A parsed sweep file: its axes and the digests of the files it reads."""

    source: str
    trace: str
    loads: tuple[float, ...]
    seeds: tuple[int, ...]
    jobs: tuple[int, ...]
    topologies: tuple[str, ...]
    schedulers: tuple[str, ...]
    precision: tuple[float, ...] = (5.0,)
    aggregate: tuple[str, ...] = ("total",)
    pacing: tuple[bool, ...] = (True,)
    candidates: tuple[int, ...] = (10,)
    drift: tuple[float, ...] = (0.0,)
    exact: bool = False
    models: str | None = None
    # File path -> sha256 of its bytes: a changed input file changes the cell keys.
    inputs: Mapping[str, str] = field(default_factory=dict)

    def cells(self) -> list[Cell]:
        """The grid, in file order (seeds vary fastest), without duplicates."""
        uses_load = self.trace == "poisson"
        uses_jobs = self.trace in ("poisson", "snapshot")
        out: dict[Cell, None] = {}
        for topo, load, jobs, prec, agg, pace, cand, drift, seed in itertools.product(
            self.topologies,
            self.loads,
            self.jobs,
            self.precision,
            self.aggregate,
            self.pacing,
            self.candidates,
            self.drift,
            self.seeds,
        ):
            cell = Cell(
                trace=self.trace,
                load=load if uses_load else None,
                seed=seed,
                jobs=jobs if uses_jobs else None,
                topology=topo,
                schedulers=self.schedulers,
                precision=prec,
                aggregate=agg,
                pacing=pace,
                candidates=cand,
                drift=drift,
                exact=self.exact,
                models=self.models,
            )
            out[cell] = None
        return list(out)


def load_sweep_config(path: str | Path) -> SweepConfig:
    """Read and check a sweep file; errors name the file, the key and the value."""
    import yaml

    p = Path(path)
    try:
        text = p.read_text()
    except OSError as err:
        raise UserInputError(f"{p}: cannot read the sweep file ({err.strerror})") from err
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise UserInputError(f"{p}: not valid YAML: {err}") from err
    return parse_sweep_config(doc, str(p), base=p.parent)


def parse_sweep_config(doc: Any, source: str, base: Path | None = None) -> SweepConfig:
    """Check a parsed sweep document; `source` names it in errors, `base` roots its files."""
    if not isinstance(doc, Mapping):
        raise UserInputError(f"{source}: expected a mapping of keys ({', '.join(KEYS)})")
    for key in doc:
        if key not in KEYS:
            raise UserInputError(f"{source}: " + did_you_mean(str(key), KEYS, "key"))
    if "seeds" not in doc:
        raise UserInputError(f"{source}: key 'seeds' is missing (a list, a number or 'A-B')")
    base = base if base is not None else Path(".")
    inputs: dict[str, str] = {}

    def where(key: str) -> str:
        return f"{source}: key '{key}'"

    trace = doc.get("trace", "poisson")
    if not isinstance(trace, str) or not trace.strip():
        raise UserInputError(
            f"{where('trace')}: expected poisson, dynamic, snapshot or a file, got {trace!r}"
        )
    trace = trace.strip()
    if trace not in TRACE_KINDS:
        file = _input_file(trace, base)
        if file is None:
            raise UserInputError(
                f"{where('trace')}: "
                + did_you_mean(trace, TRACE_KINDS, "trace kind")
                + " or give a trace file (.csv or .json)"
            )
        trace = str(file)
        inputs[trace] = _digest(file, where("trace"))

    models = doc.get("models")
    if models is not None:
        if not isinstance(models, str):
            raise UserInputError(f"{where('models')}: expected a file name, got {models!r}")
        file = _input_file(models, base)
        if file is None or not file.exists():
            raise UserInputError(f"{where('models')}: no such file '{models}'")
        models = str(file)
        inputs[models] = _digest(file, where("models"))

    topologies: list[str] = []
    for spec in _strings(doc.get("topologies", DEFAULT_TOPOLOGY), where("topologies")):
        if Path(spec).suffix.lower() in DATA_SUFFIXES:
            file = base / spec
            if not file.exists():
                raise UserInputError(f"{where('topologies')}: no such file '{spec}'")
            spec = str(file)
            inputs[spec] = _digest(file, where("topologies"))
        topologies.append(spec)

    schedulers = _strings(doc.get("schedulers", list(SCHEDULER_NAMES)), where("schedulers"))
    schedulers = [s.lower() for s in schedulers]
    for name in schedulers:
        if name not in SCHEDULER_NAMES:
            raise UserInputError(
                f"{where('schedulers')}: " + did_you_mean(name, SCHEDULER_NAMES, "scheduler")
            )
    aggregates = _strings(doc.get("aggregate", "total"), where("aggregate"))
    for agg in aggregates:
        if agg not in AGGREGATES:
            raise UserInputError(
                f"{where('aggregate')}: " + did_you_mean(agg, AGGREGATES, "aggregate")
            )
    exact = doc.get("exact", False)
    if not isinstance(exact, bool):
        raise UserInputError(f"{where('exact')}: expected true or false, got {exact!r}")

    return SweepConfig(
        source=source,
        trace=trace,
        loads=_numbers(doc.get("loads", 0.9), where("loads"), float, lo=0.0, strict=True),
        seeds=tuple(dict.fromkeys(parse_seeds(doc["seeds"], where("seeds")))),
        jobs=_numbers(doc.get("jobs", 60), where("jobs"), int, lo=1),
        topologies=tuple(dict.fromkeys(topologies)),
        schedulers=tuple(dict.fromkeys(schedulers)),
        precision=_numbers(
            doc.get("precision", 5.0), where("precision"), float, lo=0.0, strict=True
        ),
        aggregate=tuple(dict.fromkeys(aggregates)),
        pacing=_bools(doc.get("pacing", True), where("pacing")),
        candidates=_numbers(doc.get("candidates", 10), where("candidates"), int, lo=1),
        drift=_numbers(doc.get("drift", 0.0), where("drift"), float, lo=0.0),
        exact=exact,
        models=models,
        inputs=inputs,
    )


def parse_seeds(value: Any, where: str = "seeds") -> list[int]:
    """A number, "A-B", "1,4,7", or a list of those.

    >>> parse_seeds("21-23"), parse_seeds([1, "5-6"])
    ([21, 22, 23], [1, 5, 6])
    """
    items = value if isinstance(value, list) else [value]
    if not items:
        raise UserInputError(f"{where}: give at least one seed")
    out: list[int] = []
    for item in items:
        if isinstance(item, bool):
            raise UserInputError(f"{where}: expected a seed number or 'A-B', got {item!r}")
        if isinstance(item, int):
            out.append(item)
            continue
        if not isinstance(item, str):
            raise UserInputError(f"{where}: expected a seed number or 'A-B', got {item!r}")
        for part in item.split(","):
            out += _seed_range(part.strip(), item, where)
    return out


def _seed_range(part: str, item: str, where: str) -> list[int]:
    lo, sep, hi = part.partition("-")
    try:
        if not sep:
            return [int(lo)]
        a, b = int(lo), int(hi)
    except ValueError:
        raise UserInputError(f"{where}: expected a seed number or 'A-B', got {item!r}") from None
    if b < a:
        raise UserInputError(f"{where}: empty range {part!r} (write the smaller seed first)")
    return list(range(a, b + 1))


def _strings(value: Any, where: str) -> list[str]:
    items = value if isinstance(value, list) else [value]
    if not items:
        raise UserInputError(f"{where}: give at least one value")
    for item in items:
        if not isinstance(item, str) or not item.strip():
            raise UserInputError(f"{where}: expected a name, got {item!r}")
    return [i.strip() for i in items]


def _numbers(
    value: Any, where: str, kind: type, lo: float, strict: bool = False
) -> tuple[Any, ...]:
    items = value if isinstance(value, list) else [value]
    if not items:
        raise UserInputError(f"{where}: give at least one value")
    out: list[Any] = []
    for item in items:
        ok_type = (int, float) if kind is float else (int,)
        if isinstance(item, bool) or not isinstance(item, ok_type):
            raise UserInputError(f"{where}: expected a {kind.__name__}, got {item!r}")
        if item < lo or (strict and item == lo):
            raise UserInputError(f"{where}: {item!r} must be {'>' if strict else '>='} {lo:g}")
        out.append(kind(item))
    return tuple(dict.fromkeys(out))


def _bools(value: Any, where: str) -> tuple[bool, ...]:
    items = value if isinstance(value, list) else [value]
    for item in items:
        if not isinstance(item, bool):
            raise UserInputError(f"{where}: expected true or false, got {item!r}")
    if not items:
        raise UserInputError(f"{where}: give at least one value")
    return tuple(dict.fromkeys(items))


def _input_file(name: str, base: Path) -> Path | None:
    """The file a config names (relative to the config), or None if it is not one."""
    path = base / name
    if path.exists():
        return path
    return path if path.suffix.lower() in (".csv", ".json") else None


def _digest(path: Path, where: str) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as err:
        raise UserInputError(f"{where}: cannot read '{path}' ({err.strerror})") from err


def seed_label(seeds: Sequence[int]) -> str:
    """`21-60` for a run of seeds, else `1, 4, 7`."""
    s = sorted(set(seeds))
    if len(s) > 2 and s == list(range(s[0], s[-1] + 1)):
        return f"{s[0]}-{s[-1]}"
    return ", ".join(map(str, s))
