"""Which names from a user's file may the harness use, in paths, namespaces and commands?

Job, server, switch and model names end up in file names (`replicas/<job>-w0.jsonl`),
in Mininet host and namespace names and on command lines. A name from a file
is therefore checked where the file is read, once: a name that is not a safe
path component is refused with the file, the row and the field, before
anything runs.

The rule (our choice, documented in the README): 1 to 64 characters of
letters, digits, `.`, `_`, `+` and `-`, starting with a letter or a digit.
So no `/`, no space, no NUL, never `.` or `..` and never an option (`-x`).

>>> check_name("vgg16-1", "job name")
'vgg16-1'
>>> check_name("../x", "job name", "trace.csv: line 3")
Traceback (most recent call last):
...
topologies.errors.UserInputError: trace.csv: line 3: job name '../x' is not a safe name: use 1-64 letters, digits, '.', '_', '+' or '-', starting with a letter or digit
"""

from __future__ import annotations

import re
from pathlib import Path

from .errors import UserInputError

MAX_NAME_LENGTH = 64
NAME_PATTERN = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._+-]{{0,{MAX_NAME_LENGTH - 1}}}")
NAME_RULE = "use 1-64 letters, digits, '.', '_', '+' or '-', starting with a letter or digit"
# How much of a refused value an error message repeats: a 256 KiB name must
# not become a 256 KiB log line.
SHOWN = 80


def shown(value: object) -> str:
    """`repr` of a value, cut to SHOWN characters so a hostile value stays one short line."""
    text = repr(value)
    return text if len(text) <= SHOWN else f"{text[:SHOWN]}... ({len(text)} characters)"


def check_name(value: object, what: str, where: str = "") -> str:
    """`value` if it is a safe name (see the module docstring), else a UserInputError.

    `what` names the field ("job name"), `where` the file and row.
    """
    prefix = f"{where}: " if where else ""
    if not isinstance(value, str) or NAME_PATTERN.fullmatch(value) is None:
        raise UserInputError(f"{prefix}{what} {shown(value)} is not a safe name: {NAME_RULE}")
    return value


def path_under(folder: str | Path, *parts: str) -> Path:
    """`folder/parts...`, refused unless it stays inside `folder` (names already checked
    are the first defence; this is the second, at the place a path is built).

    >>> str(path_under("/out", "replicas", "a-w0.jsonl"))
    '/out/replicas/a-w0.jsonl'
    >>> path_under("/out", "replicas", "../../etc/x")
    Traceback (most recent call last):
    ...
    topologies.errors.UserInputError: path 'replicas/../../etc/x' leaves the output folder /out
    """
    base = Path(folder).resolve()
    if not base.joinpath(*parts).resolve().is_relative_to(base):
        raise UserInputError(f"path {'/'.join(parts)!r} leaves the output folder {base}")
    return Path(folder).joinpath(*parts)
