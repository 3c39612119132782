"""May a command write here, and how does a results folder appear whole or not at all?

One rule for every command that writes files (`topo export`, `trace generate`,
`simulate`, `tofino artifacts`, `sweep`), shared by every layer like
`errors.py`:

- An existing output is refused unless the command's `--force` is given: a
  file, or a folder that holds anything (an empty folder is filled).
- The wrong kind is refused even with `--force`: a folder where a file goes, a
  file where a folder goes. Nothing is deleted to make room for another kind.
- A results folder is never `/`, `.`, `..`, the current folder or one above
  it: replacing it would pull the floor from under the command (it ran the
  whole job, then crashed on `PosixPath('.')`). Refused before anything runs.
- Missing parent folders are created, as `mkdir -p` would; a parent that is a
  file, or one that cannot be created, is one line naming it.
- A results folder is written into a hidden sibling, `.NAME.partial-PID-XXXX`,
  and renamed to NAME only when complete. With `--force` the old folder is
  replaced at that moment, not before. If the run stops (an error, Ctrl-C,
  SIGTERM) the sibling is removed, so NAME is either the old folder or the
  complete new one, never a mix (our choice: no partial folder is kept; a
  half-written report is not worth reading). Only a SIGKILL can leave a
  sibling behind; the owner's pid in its name says whether it is stale.
- A single output file is written the same way (`write_file`): into a hidden
  sibling, flushed to disk, then renamed over NAME. A full disk or any other
  failure leaves the old file as it was (it left a CSV cut mid-line before)
  and is one line naming the file and the cause.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from .errors import UserInputError
from .names import shown

PARTIAL_MARK = ".partial-"


def check_output(
    path: str | Path,
    kind: Literal["file", "folder"],
    force: bool | None = False,
    flag: str = "--out",
) -> Path:
    """Apply the rule to `path` and create its missing parents; returns it as a Path.

    `force=None` means the command has no `--force`, so the refusal says to
    remove the output instead.

    >>> check_output("/", "file")
    Traceback (most recent call last):
    ...
    topologies.errors.UserInputError: --out /: is a folder, not a file
    """
    out = Path(path)
    if str(path) == "":
        raise UserInputError(f"{flag}: give a {kind} name")
    try:
        _check(out, kind, force, flag)
    except OSError as err:  # a name too long, a folder we may not read, ...
        raise UserInputError(f"{flag} {shown(str(out))}: {err.strerror or err}") from None
    return out


def _check(out: Path, kind: Literal["file", "folder"], force: bool | None, flag: str) -> None:
    if kind == "folder":
        _check_replaceable(out, flag)
    if out.is_dir():
        if kind == "file":
            raise UserInputError(f"{flag} {out}: is a folder, not a file")
        if any(out.iterdir()) and not force:
            raise UserInputError(
                f"{flag} {out}: already exists and is not empty; {_hint(force, flag)}"
            )
    elif out.exists() or out.is_symlink():
        if kind == "folder":
            raise UserInputError(f"{flag} {out}: is a file, not a folder")
        if not force:
            raise UserInputError(f"{flag} {out}: already exists; {_hint(force, flag)}")
    _make_parents(out, flag)
    if not os.access(out.parent, os.W_OK | os.X_OK):
        raise UserInputError(f"{flag} {out}: {out.parent} is not writable by this user")


def _check_replaceable(out: Path, flag: str) -> None:
    """Refuse a results folder that cannot be replaced whole (see the module docstring).

    >>> _check_replaceable(Path("."), "--out")
    Traceback (most recent call last):
    ...
    topologies.errors.UserInputError: --out .: is the current folder or one above it; name a folder of its own (e.g. --out results/run1)
    """
    resolved = out.resolve()
    here = Path.cwd().resolve()
    if out.name in ("", ".", "..") or resolved == here or here.is_relative_to(resolved):
        raise UserInputError(
            f"{flag} {out}: is the current folder or one above it; name a folder of its "
            "own (e.g. --out results/run1)"
        )


def _hint(force: bool | None, flag: str) -> str:
    return (
        "pass --force to overwrite" if force is not None else f"remove it or choose another {flag}"
    )


def _make_parents(out: Path, flag: str) -> None:
    parent = out.parent
    for above in (parent, *parent.parents):
        if above.exists():
            if not above.is_dir():
                raise UserInputError(f"{flag} {out}: {above} is a file, not a folder")
            break
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserInputError(
            f"{flag} {out}: cannot create {parent}: {err.strerror or err}"
        ) from None


@contextmanager
def staged_folder(
    path: str | Path, force: bool | None = False, flag: str = "--out"
) -> Iterator[Path]:
    """Yield a hidden sibling of `path` to write into; it becomes `path` on success.

    On any exception (KeyboardInterrupt included) the sibling is removed and
    `path` is left as it was.
    """
    out = check_output(path, "folder", force, flag)
    try:
        stage = Path(
            tempfile.mkdtemp(prefix=f".{out.name}{PARTIAL_MARK}{os.getpid()}-", dir=out.parent)
        )
    except OSError as err:
        raise UserInputError(
            f"{flag} {out}: cannot write in {out.parent}: {err.strerror}"
        ) from None
    try:
        stage.chmod(0o777 & ~_umask())  # mkdtemp's 0700 would stick to the results
        yield stage
        _replace(stage, out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _replace(stage: Path, out: Path) -> None:
    """Put `stage` where `out` is; an old `out` is moved aside first and removed after."""
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        out.rename(old)
    try:
        stage.rename(out)
    except BaseException:
        if old is not None:
            old.rename(out)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def write_file(path: str | Path, data: str | bytes, flag: str = "--out") -> Path:
    """Write `data` to `path` whole or not at all (see the module docstring).

    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> write_file(folder / "a.txt", "hello").read_text()
    'hello'
    """
    out = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        fd, name = tempfile.mkstemp(prefix=f".{out.name}{PARTIAL_MARK}{os.getpid()}-", dir=out.parent)
    except OSError as err:
        raise UserInputError(f"{flag} {out}: cannot write in {out.parent}: {err.strerror}") from None
    stage = Path(name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(raw)
            handle.flush()
            os.fsync(handle.fileno())
        stage.chmod(0o666 & ~_umask())  # mkstemp's 0600 would stick to the output
        os.replace(stage, out)
    except OSError as err:
        stage.unlink(missing_ok=True)
        raise UserInputError(
            f"{flag} {out}: not written ({err.strerror or err}); the old file, if any, is kept"
        ) from None
    except BaseException:
        stage.unlink(missing_ok=True)
        raise
    return out
