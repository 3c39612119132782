"""Reading the data files users hand us (JSON or YAML, chosen by extension).

Topologies, profiles, traces, TM configs and control-plane settings are all
files a user edits by hand, so they share one reader whose errors point at
the file, line and column instead of a parser traceback. The reader is also
the first guard against hostile files: a folder, a binary, UTF-16 or other non-UTF-8 file,
an unreadable one, one past MAX_FILE_BYTES, nesting past Python's recursion
limit, a number of more digits than Python converts and YAML alias bombs (more than MAX_YAML_VALUES values once expanded)
are each one line naming the file. A UTF-8 byte-order mark is accepted (spreadsheets
write one).
"""

from __future__ import annotations

import errno
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import yaml

from .errors import UserInputError

DATA_SUFFIXES = (".json", ".yaml", ".yml")
# (our choice) Far above any real topology, trace or models file (the largest
# shipped is under 10 KB), far below what would exhaust memory.
MAX_FILE_BYTES = 64 << 20
# (our choice) A billion-laughs file needs few aliases (nine levels of ten) but
# expands to a billion values for whoever walks it (a validator, an error
# message): what is bounded is the expanded size, far above any real file's.
MAX_YAML_VALUES = 1_000_000


def read_text_file(path: str | Path, what: str = "data") -> str:
    """A user's text file, UTF-8 (with or without a byte-order mark), or one clear error.

    >>> read_text_file(".", "trace")
    Traceback (most recent call last):
    ...
    topologies.errors.UserInputError: .: is a folder, not a trace file
    """
    p = Path(path)
    try:
        if p.is_dir():
            raise UserInputError(f"{p}: is a folder, not a {what} file")
        data = read_capped_bytes(p, what)
    except FileNotFoundError:
        raise UserInputError(f"{p}: no such {what} file") from None
    except OSError as err:
        raise UserInputError(f"{p}: cannot read the {what} file: {err.strerror}") from None
    return _decoded(p, data, what, MAX_FILE_BYTES)


def read_capped_bytes(path: str | Path, what: str) -> bytes:
    """A user's file as bytes (binary inputs too: a P4Info, a device config), read no
    further than MAX_FILE_BYTES: past it, one line naming the file (`/dev/zero` is
    refused, not read until memory runs out). An OSError is the caller's to word."""
    p = Path(path)
    with p.open("rb") as fh:
        data = fh.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise UserInputError(f"{p}: larger than {MAX_FILE_BYTES >> 20} MiB; not a {what} file")
    return data


class NotARegularFile(OSError):
    """A FIFO, device, socket or folder where a regular file was expected."""


def read_regular_file(path: str | Path, limit: int) -> tuple[bytes, os.stat_result]:
    """Up to `limit` + 1 bytes of the regular file at `path` and its status, opened
    without following a link (OSError ELOOP) and without blocking on a FIFO
    (`NotARegularFile`): the one way this project reads a file someone else could
    have planted (a cache, a sweep's store). The caller judges the size and owner."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotARegularFile(errno.EINVAL, "not a regular file")
        return handle.read(limit + 1), info


def read_private_file(path: str | Path, what: str, max_bytes: int = MAX_FILE_BYTES) -> str | None:
    """A file this program wrote for this user (a cache), or None when there is none.

    Opened without following a link and without blocking on a FIFO; a link, anything
    but a regular file, or a file another user owns is refused, never read: a file
    someone else planted where ours goes is no figure to trust.
    """
    p = Path(path)
    try:
        data, info = read_regular_file(p, max_bytes)
    except FileNotFoundError:
        return None
    except NotARegularFile:
        raise UserInputError(f"{p}: not a regular file, not a {what} file; remove it") from None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise UserInputError(f"{p}: a symbolic link, not a {what} file; remove it") from None
        raise UserInputError(f"{p}: cannot read the {what} file: {err.strerror}") from None
    if info.st_uid != os.geteuid():
        raise UserInputError(
            f"{p}: owned by user {info.st_uid}, not by you ({os.geteuid()}); a {what} file "
            "is only read from its owner: remove it"
        )
    return _decoded(p, data, what, max_bytes)


def _decoded(p: Path, data: bytes, what: str, max_bytes: int) -> str:
    """The text of a file's bytes, or one line saying why they are not text."""
    if len(data) > max_bytes:
        limit = f"{max_bytes >> 20} MiB" if max_bytes >= 1 << 20 else f"{max_bytes:,} bytes"
        raise UserInputError(f"{p}: larger than {limit}; not a {what} file")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise UserInputError(f"{p}: UTF-16 text, not UTF-8; save the {what} file as UTF-8")
    if b"\0" in data:
        raise UserInputError(f"{p}: a binary file (it holds NUL bytes), not a {what} file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise UserInputError(f"{p}:{line}: not UTF-8 text (byte {err.start}); save it as UTF-8") from None


def data_format(path: str | Path, what: str = "data") -> str:
    """'json' or 'yaml' by extension; anything else is a user error naming the file."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in DATA_SUFFIXES:
        raise UserInputError(
            f"{p}: unknown {what} file type '{suffix or '(none)'}'; use .json, .yaml or .yml"
        )
    return "json" if suffix == ".json" else "yaml"


def parse_data(text: str, fmt: str, label: str) -> Any:
    """Parse JSON or YAML text; syntax errors become `label:line:col: ...`."""
    if fmt == "json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as err:
            raise UserInputError(
                f"{label}:{err.lineno}:{err.colno}: invalid JSON: {err.msg}"
            ) from None
        except RecursionError:
            raise UserInputError(f"{label}: nested too deeply to be a {fmt} data file") from None
        except ValueError as err:  # Python converts at most 4300 digits
            raise UserInputError(f"{label}: {_bad_value(err)}") from None
    try:
        doc = yaml.safe_load(text)
        size = _expanded_size(doc, {})
    except RecursionError:
        raise UserInputError(f"{label}: nested too deeply to be a {fmt} data file") from None
    except ValueError as err:  # too many digits, a date like 2024-13-45
        raise UserInputError(f"{label}: {_bad_value(err)}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{label}:{mark.line + 1}:{mark.column + 1}" if mark is not None else label
        problem = " ".join((getattr(err, "problem", None) or str(err)).split())  # one line
        raise UserInputError(f"{where}: invalid YAML: {problem}") from None
    if size > MAX_YAML_VALUES:
        raise UserInputError(
            f"{label}: its aliases expand to more than {MAX_YAML_VALUES:,} values; "
            "not a data file (a YAML alias bomb?)"
        )
    return doc


def _bad_value(err: ValueError) -> str:
    """One line for a value the parser could not convert."""
    if "digits" in str(err):
        return (
            f"a number of more than {sys.get_int_max_str_digits()} digits; "
            "not a value any field holds"
        )
    return f"a value that is not one: {' '.join(str(err).split())[:120]}"


def _expanded_size(value: Any, memo: dict[int, int]) -> int:
    """How many values `value` holds once every alias is expanded (shared parts counted
    each time they are reached, computed once each)."""
    if not isinstance(value, list | dict):
        return 1
    key = id(value)
    if key not in memo:
        memo[key] = 0  # a recursive alias (`&a [*a]`) counts once
        items = value.items() if isinstance(value, dict) else enumerate(value)
        memo[key] = 1 + sum(_expanded_size(v, memo) for _, v in items)
    return memo[key]


def read_data_file(path: str | Path, what: str = "data") -> Any:
    """Read and parse a user's JSON/YAML file.

    >>> read_data_file("missing.yaml", "topology")
    Traceback (most recent call last):
    ...
    topologies.errors.UserInputError: missing.yaml: no such topology file
    """
    p = Path(path)
    fmt = data_format(p, what)
    return parse_data(read_text_file(p, what), fmt, str(p))
