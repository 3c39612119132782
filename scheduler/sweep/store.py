"""Which cells are done, and where do their results go?

Each finished cell is one small JSON file, `DIR/cells/<key>.json`, written
as soon as it arrives, whole or not at all (`topologies.outputs.write_file`:
a `mkstemp` sibling renamed into place, so a killed sweep never leaves half
a file and a link planted at the name is replaced, never written through).
A re-run reads the keys present and skips those cells. At the end the cells
of this grid are merged into `DIR/runs.parquet`, one row per cell and
scheduler; every output goes through the same writer.

What is read back is checked, never trusted: a cell file that is not
ours to read (a link, not a regular file), not JSON, not the record of its
key (its digest, its shape: the caller's `check`) runs again, and the
reason is kept in `rejected` for the command to print. Nobody else may
write in the folder: `DIR` and `cells/` are made by `mkdir` (which never
follows a link), and an existing one, or its `cells/`, that belongs to another user or that other
users may write in is refused, since they could swap its files under the
run. A full disk is one line naming the file, the cells finished before it kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import stat
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from topologies.datafile import read_regular_file
from topologies.errors import UserInputError
from topologies.outputs import write_file

from .cells import record_rows

CELLS = "cells"
DIGEST = "digest"
# (our choice) Far above a cell record (a few KB; an emulation cell's a few hundred).
MAX_CELL_BYTES = 16 << 20
# A stored record's own check: None when it is sound, else why it is not.
Check = Callable[[Mapping[str, Any]], str | None]


class CellStore:
    """The results folder of a sweep; safe to reuse across runs of the same grid."""

    def __init__(self, out_dir: str | Path, flag: str = "--out") -> None:
        self.root = Path(out_dir)
        self.cells_dir = self.root / CELLS
        self.flag = flag
        self.rejected: list[str] = []  # one line per stored cell that was not trusted
        try:
            self.root.parent.mkdir(parents=True, exist_ok=True)
            for folder in (self.root, self.cells_dir):
                with contextlib.suppress(FileExistsError):
                    folder.mkdir()  # exclusive: never through a link in its place
                own_folder(folder, flag)
            fd, probe = tempfile.mkstemp(prefix=".probe-", dir=self.cells_dir)
            os.close(fd)
            os.unlink(probe)
        except OSError as err:
            raise UserInputError(
                f"{flag} {out_dir}: cannot write there ({err.strerror or err})"
            ) from None

    def path(self, key: str) -> Path:
        return self.cells_dir / f"{key}.json"

    def done_keys(self) -> set[str]:
        """Keys of the cells whose results are on disk."""
        return {p.stem for p in self.cells_dir.glob("*.json")}

    def save(self, record: Mapping[str, Any]) -> Path:
        """Store one cell's record, with its digest, whole or not at all (a full disk is one
        line naming the file; the cells stored before are kept)."""
        body = {k: v for k, v in record.items() if k != DIGEST}
        doc = {**body, DIGEST: digest(body)}
        return write_file(self.path(str(record["key"])), json.dumps(doc, sort_keys=True), self.flag)

    def load(self, key: str, check: Check | None = None) -> dict[str, Any] | None:
        """A stored record, or None if missing or not trusted (then the cell runs again and
        `rejected` says why)."""
        path = self.path(key)
        try:
            raw = read_own_file(path, MAX_CELL_BYTES)
        except FileNotFoundError:
            return None
        except OSError as err:
            self._reject(path, f"cannot read it ({err.strerror or err})")
            return None
        try:
            record = json.loads(raw)
        except (ValueError, RecursionError):
            self._reject(path, "not JSON")
            return None
        why = record_problem(record, key) or (check(record) if check else None)
        if why is not None:
            self._reject(path, why)
            return None
        return {k: v for k, v in record.items() if k != DIGEST}

    def _reject(self, path: Path, why: str) -> None:
        self.rejected.append(f"{path}: {why}; not used, the cell runs again")

    def write_failures(self, failures: Sequence[Mapping[str, Any]]) -> Path:
        path = self.root / "failures.json"
        if failures:
            write_file(path, json.dumps(list(failures), indent=1) + "\n", self.flag)
        elif os.path.lexists(path):
            path.unlink()
        return path


def own_folder(path: Path, flag: str = "--out") -> None:
    """UserInputError unless `path` is a folder of this user's that no other user may write
    in (through a link only if the link is this user's too)."""
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        if info.st_uid != os.geteuid():
            raise UserInputError(
                f"{flag} {path}: a link of user {info.st_uid}'s; name the folder itself"
            )
        info = os.stat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise UserInputError(f"{flag} {path}: is not a folder")
    if info.st_uid != os.geteuid():
        raise UserInputError(
            f"{flag} {path}: belongs to user {info.st_uid}, not you ({os.geteuid()}): its "
            "files could be swapped under this run; choose a folder of your own"
        )
    if info.st_mode & stat.S_IWOTH:
        raise UserInputError(
            f"{flag} {path}: other users may write in it (mode {stat.S_IMODE(info.st_mode):o}); "
            "choose a folder of your own"
        )


def read_own_file(path: Path, limit: int) -> bytes:
    """The bytes of a regular file at `path`, never through a link (ELOOP) nor from a FIFO
    or device (`topologies.datafile.read_regular_file`); OSError(EFBIG) past `limit` bytes."""
    import errno

    data, _ = read_regular_file(path, limit)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit >> 20} MiB")
    return data


def digest(body: Mapping[str, Any]) -> str:
    """The SHA-256 of a record's canonical JSON: a record edited or cut by hand no longer
    matches it."""
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def record_problem(record: Any, key: str) -> str | None:
    """Why `record` is not a stored cell of `key` (its shape, key and digest), or None."""
    if not isinstance(record, dict):
        return f"a JSON {type(record).__name__}, not a cell record"
    if record.get("key") != key:
        return f"its 'key' is not {key}"
    body = {k: v for k, v in record.items() if k != DIGEST}
    if record.get(DIGEST) != digest(body):
        return "its digest does not match its content (edited or cut short)"
    return None


def write_parquet(
    records: Iterable[Mapping[str, Any]], path: Path, version: str, flag: str = "--out"
) -> Path:
    """Rows of every record into one Parquet file (settings, figures, iteration quantiles)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [row for r in records for row in record_rows(r, version)]
    if not rows:
        if os.path.lexists(path):
            path.unlink()
        return path
    schema = _schema(rows)
    table = pa.Table.from_pylist([_arrow_row(r) for r in rows], schema=schema)
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return write_file(path, buffer.getvalue(), flag)


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
