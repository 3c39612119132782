"""How much of a link do n jobs sending through it at once get, as the fluid simulator uses it?

Max-min fairness assumes a shared link is used whole. Kernel TCP with ECN
on the emulated fabric keeps a link 77-95% used when two to four jobs' Up
phases cross it (`cassini profile --sharing`, `emulation.profile.sharing`,
the benchmarks README). A `SharingModel` carries that as a capacity factor
by the number of jobs sending on a link: the simulator's max-min fills a
link shared by n jobs up to capacity x factor(n) (`fluid_events._resolve`).

Choices the measurement leaves open (our choice):
- n counts jobs, not flows: the factors were measured per job Up on the
  link, and a ring's flows of one job cross a link together.
- factor(1) = 1: a job alone runs at its profile, which (measured alone)
  already holds the transport's single-job efficiency.
- factor(n), n >= 2, is the mean link utilisation over every sample with
  exactly n jobs Up, across the file's runs (k = 2, 3, 4 jobs on the link),
  weighted by samples and capped at 1 (samples whose period stretched on a
  loaded machine read above 1); beyond the largest n measured the last
  factor holds.
- Shares stay equal: the measured unfairness (Jain 0.93-0.98) is kept in
  the model for reports but not applied, so the allocation stays
  deterministic and symmetric between jobs.
- A link's queue (ECN marks, the simulator's oversubscription) builds above
  the shared capacity, which is what the link delivers.
- The file is read as every input file is (`topologies.datafile`: at most
  64 MiB, UTF-8, nesting bounded), and the values that size the model are
  bounded: `active` at most `MAX_ACTIVE_JOBS` (the table holds one factor per
  n up to it), `samples` at most `MAX_SAMPLES` and `utilisation` at most
  `MAX_UTILISATION`, so sums stay finite.

>>> m = SharingModel(factors=(0.9, 0.8))
>>> [m.factor(n) for n in (0, 1, 2, 3, 7)]
[1.0, 1.0, 0.9, 0.8, 0.8]
>>> m.table().tolist(), SharingModel().table().tolist()
([1.0, 1.0, 0.9, 0.8], [1.0])
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from topologies.datafile import parse_data, read_text_file
from topologies.errors import UserInputError
from topologies.names import shown

# (our choice) Bounds of a sharing file's rows, far above anything measured: a
# link shared by 1024 jobs (the runs measure 2-4), 1e9 samples (10 ms samples
# for 115 days), a link read at 100x its capacity (a stretched sample reads
# a little above 1). `active` sizes the model's table, so it bounds memory.
MAX_ACTIVE_JOBS = 1024
MAX_SAMPLES = 1e9
MAX_UTILISATION = 100.0


@dataclass(frozen=True)
class SharingModel:
    """Capacity factors for 2, 3, ... jobs sending on one link (`factors[n - 2]`)."""

    factors: tuple[float, ...] = ()
    fairness: tuple[float, ...] = ()  # Jain's index for 2, 3, ... jobs (reported, not applied)
    source: str = ""  # where it was measured (the file, its model)

    def __post_init__(self) -> None:
        for f in self.factors:
            if not 0.0 < f <= 1.0:
                raise ValueError(f"capacity factor {f} outside (0, 1]")

    @property
    def identity(self) -> bool:
        """Ideal max-min: every link used whole."""
        return all(f == 1.0 for f in self.factors)

    def factor(self, n: int) -> float:
        """The fraction of a link's capacity n jobs sending through it get together."""
        if n < 2 or not self.factors:
            return 1.0
        return self.factors[min(n, len(self.factors) + 1) - 2]

    def table(self) -> npt.NDArray[np.float64]:
        """factor(n) for n = 0, 1, ..., the last entry for any larger n (the compiled
        loop's form); the identity is [1.0]."""
        if self.identity:
            return np.ones(1)
        return np.array([1.0, 1.0, *self.factors])

    def lowest(self) -> float:
        """The smallest factor: a link can bind once its peak demand reaches capacity x this."""
        return min(self.factors, default=1.0)

    def describe(self) -> dict[str, Any]:
        """What a run's metadata records about it."""
        return {
            "source": self.source,
            "factors": {str(n + 2): f for n, f in enumerate(self.factors)},
            "fairness": {str(n + 2): f for n, f in enumerate(self.fairness)},
        }


IDENTITY = SharingModel()


def _number(value: Any, where: str, limit: float, why: str = " (our choice)") -> float:
    """`value` as a float if it is a number in [-limit, limit] (compared before any
    conversion, so 400 digits are refused, not overflowed); else one line naming it."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not -limit <= value <= limit:  # NaN and inf fail here too
        raise UserInputError(
            f"{where} must be a number of at most {limit:g}{why}, got {shown(value)}"
        )
    return float(value)


def model_from_dict(doc: Any, where: str) -> SharingModel:
    """The model from the document `write_sharing_model` writes; `where` names it in errors."""
    if not isinstance(doc, Mapping):
        raise UserInputError(f"{where}: must be a JSON object with field 'runs'")
    runs = doc.get("runs")
    if not isinstance(runs, list) or not runs:
        raise UserInputError(f"{where}: field 'runs' must be a non-empty list")
    used: dict[int, float] = {}
    fair: dict[int, float] = {}
    samples: dict[int, float] = {}
    for i, run in enumerate(runs):
        rows = run.get("by_active") if isinstance(run, Mapping) else None
        if not isinstance(rows, list):
            raise UserInputError(f"{where}: field 'runs[{i}].by_active' must be a list")
        for r, row in enumerate(rows):
            ctx = f"{where}: field 'runs[{i}].by_active[{r}]"
            if not isinstance(row, Mapping):
                raise UserInputError(f"{ctx}' must be an object")
            for key in ("active", "samples", "utilisation", "fairness"):
                if key not in row:
                    raise UserInputError(f"{ctx}.{key}' is missing")
            n = _number(row["active"], f"{ctx}.active'", MAX_ACTIVE_JOBS)
            count = _number(row["samples"], f"{ctx}.samples'", MAX_SAMPLES)
            util = _number(row["utilisation"], f"{ctx}.utilisation'", MAX_UTILISATION)
            jain = _number(row["fairness"], f"{ctx}.fairness'", 1.0, " (Jain's index)")
            if n != int(n) or n < 1 or count < 0 or util < 0 or not 0 < jain <= 1:
                raise UserInputError(
                    f"{ctx}' out of range: active {n:g} (a whole number >= 1), samples "
                    f"{count:g} (>= 0), utilisation {util:g} (>= 0), fairness {jain:g} (in (0, 1])"
                )
            if n < 2 or count == 0:
                continue
            k = int(n)
            used[k] = used.get(k, 0.0) + util * count
            fair[k] = fair.get(k, 0.0) + jain * count
            samples[k] = samples.get(k, 0.0) + count
    if 2 not in samples:
        raise UserInputError(f"{where}: no samples with two or more jobs Up ('runs[].by_active')")
    factors: list[float] = []
    fairness: list[float] = []
    for k in range(2, max(samples) + 1):
        if k not in samples:  # a gap: carry the smaller n's figure on
            factors.append(factors[-1])
            fairness.append(fairness[-1])
            continue
        mean = used[k] / samples[k]
        if mean <= 0:
            raise UserInputError(f"{where}: links with {k} jobs Up carried nothing")
        factors.append(round(min(mean, 1.0), 6))
        fairness.append(round(fair[k] / samples[k], 6))
    model = doc.get("model", "")
    return SharingModel(tuple(factors), tuple(fairness), f"{where} ({model})" if model else where)


def load_sharing_model(path: str | Path | None) -> SharingModel:
    """The sharing model in a `cassini profile --sharing-out` file; None: the identity."""
    if path is None:
        return IDENTITY
    where = f"sharing model {path}"
    doc = parse_data(read_text_file(path, "sharing model"), "json", where)
    return model_from_dict(doc, where)
