"""Reading the data files users hand us (JSON or YAML, chosen by extension).

Topologies, profiles, traces, TM configs and control-plane settings are all
files a user edits by hand, so they share one reader whose errors point at
the file, line and column instead of a parser traceback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from .errors import UserInputError

DATA_SUFFIXES = (".json", ".yaml", ".yml")


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
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{label}:{mark.line + 1}:{mark.column + 1}" if mark is not None else label
        problem = getattr(err, "problem", None) or str(err)
        raise UserInputError(f"{where}: invalid YAML: {problem}") from None


def read_data_file(path: str | Path, what: str = "data") -> Any:
    """Read and parse a user's JSON/YAML file.

    >>> read_data_file("missing.yaml", "topology")
    Traceback (most recent call last):
    ...
    topologies.errors.UserInputError: missing.yaml: no such topology file
    """
    p = Path(path)
    fmt = data_format(p, what)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserInputError(f"{p}: no such {what} file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise UserInputError(f"{p}: cannot read: {err}") from None
    return parse_data(text, fmt, str(p))
