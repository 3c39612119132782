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
- Nothing is opened through a link another user could have planted: a file a
  command creates is opened with O_CREAT | O_EXCL | O_NOFOLLOW (`create_file`:
  it must not exist, and a link in its place is refused), temporaries come from
  `mkstemp`/`mkdtemp`, and a results folder is staged (mode 0700 while it is
  written) and renamed into place (`new_stage`, `publish`), so no file of
  another user's is ever written through. A folder that must exist while a
  long command writes into it (`fabric up --log-dir`) is staged, filled by its
  first writers, and published once they have their files open.
- A write that fails for want of room (a full disk, a quota, a read-only
  file system) inside a staged folder is one line naming the file and the
  cause, the old folder kept (`staged_folder`); results that took a run to
  make are written again into a fresh folder in the system's temporary
  folder (`write_or_rescue`) and the line says where they are.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Literal, TypeVar, overload

from .errors import UserInputError
from .names import shown

PARTIAL_MARK = ".partial-"
# The errors that say the disk (not the command) is at fault: no room, no quota, a file
# too big, a read-only or failing file system.
DISK_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO})
# Where results that could not be written to their folder go instead (in tempfile's folder).
RESCUE_PREFIX = "cassini-rescued-"

T = TypeVar("T")


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
    `path` is left as it was; a write that failed for want of room is one line
    naming the file and the cause (`UserInputError`).
    """
    out = check_output(path, "folder", force, flag)
    stage = new_stage(out, flag)
    try:
        yield stage
        publish(stage, out)
    except OSError as err:
        why = disk_error(err, stage, out) if is_disk_error(err, stage) else None
        shutil.rmtree(stage, ignore_errors=True)
        if why is None:
            raise
        raise UserInputError(
            f"{flag} {out}: not written ({why}); the old folder, if any, is kept"
        ) from None
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise


@contextmanager
def scratch_folder(flag: str) -> Iterator[Path]:
    """A private folder in the temporary folder for what a command reads back and drops
    (`flag` names what the user could have given instead); removed after, and a disk
    error in it is one line, as in a staged folder."""
    try:
        stage = Path(tempfile.mkdtemp(prefix="cassini-"))
    except OSError as err:
        raise UserInputError(
            f"{flag} not given: cannot make a folder in {tempfile.gettempdir()}: {err.strerror}"
        ) from None
    try:
        yield stage
    except OSError as err:
        if not is_disk_error(err, stage):
            raise
        raise UserInputError(
            f"{flag} not given: the temporary folder is full ({disk_error(err, stage, stage)})"
        ) from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def new_stage(out: Path, flag: str = "--out") -> Path:
    """A fresh hidden sibling of `out` (`mkdtemp`: made by us, mode 0700, so nobody else
    can plant a link in it) for `publish` to rename into place."""
    try:
        return Path(
            tempfile.mkdtemp(prefix=f".{out.name}{PARTIAL_MARK}{os.getpid()}-", dir=out.parent)
        )
    except OSError as err:
        raise UserInputError(
            f"{flag} {out}: cannot write in {out.parent}: {err.strerror}"
        ) from None


def publish(stage: Path, out: Path) -> None:
    """Give `stage` the mode a new folder would have and put it where `out` is (an old
    `out`, a folder or a link, is replaced at this moment)."""
    # mkdtemp's 0700 would stick to the results. Set on the open folder, not by path:
    # in a parent others can write in, the path could be swapped for a link meanwhile.
    fd = os.open(stage, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        os.fchmod(fd, 0o777 & ~_umask())
    finally:
        os.close(fd)
    _replace(stage, out)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _replace(stage: Path, out: Path) -> None:
    """Put `stage` where `out` is; an old `out` is moved aside first and removed after
    (a link is removed, never followed: its target is not ours)."""
    old = None
    if os.path.lexists(out):
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        out.rename(old)
    try:
        stage.rename(out)
    except BaseException:
        if old is not None:
            old.rename(out)
        raise
    if old is None:
        return
    if old.is_symlink() or not old.is_dir():
        old.unlink(missing_ok=True)
    else:
        shutil.rmtree(old, ignore_errors=True)


@overload
def create_file(path: str | Path, binary: Literal[False] = False) -> IO[str]: ...
@overload
def create_file(path: str | Path, binary: Literal[True]) -> IO[bytes]: ...
def create_file(path: str | Path, binary: bool = False) -> IO[str] | IO[bytes]:
    """Open a new file for writing: O_CREAT | O_EXCL | O_NOFOLLOW, so an existing file or
    a link planted in its place is refused (FileExistsError), never written through.

    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> with create_file(folder / "a.log") as handle:
    ...     _ = handle.write("one")
    >>> create_file(folder / "a.log")
    Traceback (most recent call last):
    ...
    FileExistsError: [Errno 17] File exists: ...
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as err:
        err.filename = str(path)
        raise
    return os.fdopen(fd, "wb" if binary else "w")


def is_disk_error(err: OSError, stage: Path | None = None) -> bool:
    """Did `err` come from the disk (no room, read-only, ...) or from writing into `stage`?"""
    if err.errno in DISK_ERRORS:
        return True
    return stage is not None and err.filename is not None and _inside(err.filename, stage)


def _inside(name: str | bytes | int, folder: Path) -> bool:
    return isinstance(name, str) and Path(name).is_relative_to(folder)


def disk_error(err: OSError, stage: Path, out: Path) -> str:
    """'No space left on device writing OUT/telemetry.csv': the cause and the file, named
    where it would have been (a write names no file: the newest one in `stage` is it)."""
    name = err.filename if isinstance(err.filename, str) else _newest(stage)
    cause = err.strerror or str(err)
    if name is None:
        return cause
    where = Path(name)
    if where.is_relative_to(stage):
        where = out / where.relative_to(stage)
    return f"{cause} writing {where}"


def _newest(folder: Path) -> str | None:
    """The file most recently written under `folder` (the one a failed write was in)."""
    newest: tuple[int, str] | None = None
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            try:
                mtime = os.lstat(path).st_mtime_ns
            except OSError:
                continue
            if newest is None or mtime >= newest[0]:
                newest = (mtime, path)
    return None if newest is None else newest[1]


def write_or_rescue(write: Callable[[Path], T], stage: Path, out: Path, flag: str = "--out") -> T:
    """`write(stage)`; when that fails for want of room, what the stage holds and
    `write`'s files go to a fresh folder in the temporary folder instead, and the one
    line (`UserInputError`) says why and where they are: results a run took minutes to
    make are not thrown away with the stage.
    """
    try:
        return write(stage)
    except OSError as err:
        if not is_disk_error(err, stage):
            raise
        why = disk_error(err, stage, out)
    try:
        spare = Path(tempfile.mkdtemp(prefix=f"{RESCUE_PREFIX}{out.name}-"))
    except OSError:
        spare = None
    if spare is not None:
        try:
            shutil.copytree(stage, spare, symlinks=True, dirs_exist_ok=True)
            write(spare)
        except OSError:
            shutil.rmtree(spare, ignore_errors=True)
            spare = None
    kept = f"; the results are in {spare} instead" if spare else "; nothing could be kept"
    raise UserInputError(f"{flag} {out}: not written ({why}){kept}") from None


def write_file(
    path: str | Path, data: str | bytes, flag: str = "--out", rescue: bool = False
) -> Path:
    """Write `data` to `path` whole or not at all (see the module docstring); with
    `rescue` (data a run took long to make), data that cannot be written there goes to
    a fresh file in the temporary folder, which the one-line error names.

    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> write_file(folder / "a.txt", "hello").read_text()
    'hello'
    """
    out = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        _write_whole(out, raw)
    except OSError as err:
        spare = _rescue_file(out, raw) if rescue else None
        kept = f"; it is in {spare} instead" if spare else "; the old file, if any, is kept"
        raise UserInputError(f"{flag} {out}: not written ({err.strerror or err}){kept}") from None
    return out


def _write_whole(out: Path, raw: bytes) -> None:
    """A hidden sibling of `out` (`mkstemp`), written, flushed, renamed over `out`."""
    fd, name = tempfile.mkstemp(prefix=f".{out.name}{PARTIAL_MARK}{os.getpid()}-", dir=out.parent)
    stage = Path(name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(raw)
            handle.flush()
            os.fsync(handle.fileno())
            # mkstemp's 0600 would stick to the output; set on the open file, never
            # through a path someone could swap for a link in between.
            os.fchmod(handle.fileno(), 0o666 & ~_umask())
        os.replace(stage, out)
    except BaseException:
        stage.unlink(missing_ok=True)
        raise


def _rescue_file(out: Path, raw: bytes) -> Path | None:
    """`raw` in a fresh file of the temporary folder, or None when that fails too."""
    try:
        fd, name = tempfile.mkstemp(prefix=f"{RESCUE_PREFIX}{out.stem}-", suffix=out.suffix)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(raw)
    except OSError:
        Path(name).unlink(missing_ok=True)
        return None
    return Path(name)
