"""Which cells are done, and where do their results go?

Each finished cell is one small JSON file, `DIR/cells/<key>.json`, written
as soon as it arrives (to a temporary name, then renamed, so a killed sweep
never leaves half a file). A re-run reads the keys present and skips those
cells. At the end the cells of this grid are merged into `DIR/runs.parquet`,
one row per cell and scheduler.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from topologies.errors import UserInputError

from .cells import record_rows


class CellStore:
    """The results folder of a sweep; safe to reuse across runs of the same grid."""

    def __init__(self, out_dir: str | Path) -> None:
        self.root = Path(out_dir)
        self.cells_dir = self.root / "cells"
        try:
            self.cells_dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise UserInputError(f"--out {out_dir}: cannot create the folder ({err})") from err

    def path(self, key: str) -> Path:
        return self.cells_dir / f"{key}.json"

    def done_keys(self) -> set[str]:
        """Keys of the cells whose results are on disk."""
        return {p.stem for p in self.cells_dir.glob("*.json")}

    def save(self, record: Mapping[str, Any]) -> Path:
        """Store one cell's record atomically (a crash leaves the old state or the new)."""
        path = self.path(str(record["key"]))
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(record, sort_keys=True))
        os.replace(tmp, path)
        return path

    def load(self, key: str) -> dict[str, Any] | None:
        """A stored record, or None if missing or unreadable (then the cell runs again)."""
        try:
            record: dict[str, Any] = json.loads(self.path(key).read_text())
        except (OSError, ValueError):
            return None
        return record if record.get("key") == key else None

    def write_failures(self, failures: Sequence[Mapping[str, Any]]) -> Path:
        path = self.root / "failures.json"
        if failures:
            path.write_text(json.dumps(list(failures), indent=1) + "\n")
        elif path.exists():
            path.unlink()
        return path


def write_parquet(records: Iterable[Mapping[str, Any]], path: Path, version: str) -> Path:
    """Rows of every record into one Parquet file (settings, figures, iteration quantiles)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [row for r in records for row in record_rows(r, version)]
    if not rows:
        if path.exists():
            path.unlink()
        return path
    schema = _schema(rows)
    table = pa.Table.from_pylist([_arrow_row(r) for r in rows], schema=schema)
    pq.write_table(table, path)
    return path


def _arrow_row(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (list(v.items()) if isinstance(v, dict) else v) for k, v in row.items()}


def _schema(rows: Sequence[Mapping[str, Any]]) -> Any:
    """Types by column from the values (None-only columns are float, e.g. `load` of a file trace)."""
    import pyarrow as pa

    fixed = {
        "trace": pa.string(),
        "load": pa.float64(),
        "seed": pa.int64(),
        "jobs": pa.int64(),
        "topology": pa.string(),
        "precision": pa.float64(),
        "aggregate": pa.string(),
        "pacing": pa.bool_(),
        "candidates": pa.int64(),
        "drift": pa.float64(),
        "exact": pa.bool_(),
        "models": pa.string(),
    }
    fields = []
    for name in rows[0]:
        if name in fixed:
            fields.append(pa.field(name, fixed[name]))
            continue
        values = [r[name] for r in rows if r.get(name) is not None]
        sample = values[0] if values else None
        if isinstance(sample, bool):
            kind = pa.bool_()
        elif isinstance(sample, int) and all(isinstance(v, int) for v in values):
            kind = pa.int64()
        elif isinstance(sample, (int, float)) or sample is None:
            kind = pa.float64()
        elif isinstance(sample, str):
            kind = pa.string()
        elif isinstance(sample, dict):
            kind = pa.map_(pa.string(), pa.float64())
        elif isinstance(sample, list):
            kind = pa.list_(pa.float64())
        else:
            raise TypeError(f"column {name}: no Parquet type for {type(sample).__name__}")
        fields.append(pa.field(name, kind))
    return pa.schema(fields)
