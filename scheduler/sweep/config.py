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
Every value is checked, and the grid's size counted, before the first cell
runs: a grid of more than MAX_CELLS cells is refused unless the caller
raises the limit (`cassini sweep --max-cells N`), so a typo such as
`seeds: 0-100000000` is one line, not gigabytes of cells.

>>> cfg = parse_sweep_config({"seeds": "1-3", "loads": [0.8, 0.9]}, "s.yaml")
>>> len(cfg.cells())
6
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from scheduler.cassini.compatibility import MIN_PRECISION_DEG
from scheduler.cassini.plans import AGGREGATES
from scheduler.workloads.traces import TRACE_KINDS
from topologies.datafile import parse_data, read_text_file
from topologies.errors import UserInputError, did_you_mean
from topologies.names import shown

from ..baselines.registry import PAPER_SCHEDULERS, SCHEDULER_NAMES

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
# (our choice) Ten thousand cells is days of simulation on a large cluster.
MAX_CELLS = 10_000
# (our choice) Upper bounds of the numeric axes, far above any real study.
MAXIMA = {"loads": 10.0, "jobs": 100_000, "precision": 180.0, "candidates": 1000, "drift": 1.0}
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


def load_sweep_config(path: str | Path, max_cells: int = MAX_CELLS) -> SweepConfig:
    """Read and check a sweep file; errors name the file, the key and the value."""
    p = Path(path)
    text = read_text_file(p, "sweep")
    doc = parse_data(text, "yaml", str(p))
    refuse_duplicate_keys(text, str(p))
    return parse_sweep_config(doc, str(p), base=p.parent, max_cells=max_cells)


def refuse_duplicate_keys(text: str, label: str) -> None:
    """One line naming the file, line and key of a key given twice in one mapping (YAML
    keeps the last silently: `seeds: 1-50` then `seeds: 1` ran one seed). Call it on text
    `parse_data` has read, so the file is valid YAML of bounded size.

    >>> refuse_duplicate_keys("seeds: 1-50\\nloads: 0.9\\nseeds: 1\\n", "s.yaml")
    Traceback (most recent call last):
    ...
    topologies.errors.UserInputError: s.yaml:3: key 'seeds' is given twice (first on line 1); keep one
    """
    import yaml

    root = yaml.compose(text, Loader=yaml.SafeLoader)
    todo, seen_nodes = [root] if root is not None else [], set()
    twice: list[tuple[int, str, int]] = []  # (line, key, its first line)
    while todo:  # iterative, each node once: aliases share nodes
        node = todo.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[str, int] = {}
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                    line = key.start_mark.line + 1
                    if key.value in first:
                        twice.append((line, key.value, first[key.value]))
                    first.setdefault(key.value, line)
                todo += [key, value]
        elif isinstance(node, yaml.SequenceNode):
            todo += node.value
    if twice:
        line, key, line0 = min(twice)
        raise UserInputError(
            f"{label}:{line}: key {shown(key)} is given twice (first on line {line0}); keep one"
        )


def parse_sweep_config(
    doc: Any, source: str, base: Path | None = None, max_cells: int = MAX_CELLS
) -> SweepConfig:
    """Check a parsed sweep document; `source` names it in errors, `base` roots its files.

    >>> parse_sweep_config({"seeds": "0-100000000"}, "s.yaml")
    Traceback (most recent call last):
    ...
    topologies.errors.UserInputError: s.yaml: key 'seeds': the range '0-100000000' has 100000001 seeds, more than a grid may have (10000; raise it with --max-cells)
    """
    config = _parse(doc, source, base, max_cells)
    axes = (config.topologies, config.loads, config.jobs, config.precision, config.aggregate)
    size = math.prod(len(a) for a in axes)
    size *= math.prod(
        len(a) for a in (config.pacing, config.candidates, config.drift, config.seeds)
    )
    if size > max_cells:
        raise UserInputError(
            f"{source}: the grid has {size:,} cells, more than {max_cells:,}; "
            "shrink an axis or raise the limit with --max-cells"
        )
    return config


def _parse(doc: Any, source: str, base: Path | None, max_cells: int) -> SweepConfig:
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

    schedulers = _strings(doc.get("schedulers", list(PAPER_SCHEDULERS)), where("schedulers"))
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
        loads=_numbers(
            doc.get("loads", 0.9), where("loads"), float, lo=0.0, strict=True, hi=MAXIMA["loads"]
        ),
        seeds=tuple(dict.fromkeys(parse_seeds(doc["seeds"], where("seeds"), max_cells))),
        jobs=_numbers(doc.get("jobs", 60), where("jobs"), int, lo=1, hi=MAXIMA["jobs"]),
        topologies=tuple(dict.fromkeys(topologies)),
        schedulers=tuple(dict.fromkeys(schedulers)),
        precision=_numbers(
            doc.get("precision", 5.0),
            where("precision"),
            float,
            lo=MIN_PRECISION_DEG,
            hi=MAXIMA["precision"],
        ),
        aggregate=tuple(dict.fromkeys(aggregates)),
        pacing=_bools(doc.get("pacing", True), where("pacing")),
        candidates=_numbers(
            doc.get("candidates", 10), where("candidates"), int, lo=1, hi=MAXIMA["candidates"]
        ),
        drift=_numbers(doc.get("drift", 0.0), where("drift"), float, lo=0.0, hi=MAXIMA["drift"]),
        exact=exact,
        models=models,
        inputs=inputs,
    )


def parse_seeds(value: Any, where: str = "seeds", max_seeds: int = MAX_CELLS) -> list[int]:
    """A number, "A-B", "1,4,7", or a list of those (at most `max_seeds` seeds).

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
            out.append(_seed(item, str(item), where))
            continue
        if not isinstance(item, str):
            raise UserInputError(f"{where}: expected a seed number or 'A-B', got {item!r}")
        for part in item.split(","):
            out += _seed_range(part.strip(), item, where, max_seeds - len(out))
        if len(out) > max_seeds:
            raise UserInputError(
                f"{where}: {len(out)} seeds, more than a grid may have ({max_seeds}; "
                "raise it with --max-cells)"
            )
    return out


def _seed_range(part: str, item: str, where: str, room: int) -> list[int]:
    lo, sep, hi = part.partition("-")
    try:
        if not sep:
            return [_seed(int(lo), item, where)]
        a, b = _seed(int(lo), item, where), _seed(int(hi), item, where)
    except ValueError:
        raise UserInputError(
            f"{where}: expected a seed number or 'A-B', got {shown(item)}"
        ) from None
    if b < a:
        raise UserInputError(f"{where}: empty range {part!r} (write the smaller seed first)")
    if b - a + 1 > room:  # counted before the list is built
        raise UserInputError(
            f"{where}: the range {part!r} has {b - a + 1} seeds, more than a grid may have "
            f"({room + 0}; raise it with --max-cells)"
        )
    return list(range(a, b + 1))


def _seed(value: int, item: str, where: str) -> int:
    # Seeds feed numpy's generators: non-negative and below 2**32.
    if not 0 <= value < 2**32:
        raise UserInputError(f"{where}: seed {shown(value)} is outside 0..{2**32 - 1}")
    return value


def _strings(value: Any, where: str) -> list[str]:
    items = value if isinstance(value, list) else [value]
    if not items:
        raise UserInputError(f"{where}: give at least one value")
    for item in items:
        if not isinstance(item, str) or not item.strip():
            raise UserInputError(f"{where}: expected a name, got {item!r}")
    return [i.strip() for i in items]


def _numbers(
    value: Any, where: str, kind: type, lo: float, hi: float, strict: bool = False
) -> tuple[Any, ...]:
    items = value if isinstance(value, list) else [value]
    if not items:
        raise UserInputError(f"{where}: give at least one value")
    out: list[Any] = []
    for item in items:
        ok_type = (int, float) if kind is float else (int,)
        if isinstance(item, bool) or not isinstance(item, ok_type):
            raise UserInputError(f"{where}: expected a {kind.__name__}, got {shown(item)}")
        if not math.isfinite(item) or item > hi:
            raise UserInputError(f"{where}: {shown(item)} must be a finite number up to {hi:g}")
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
