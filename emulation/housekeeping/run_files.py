"""Who owns what this project created on the machine, and is the owner still alive?

Every run that creates namespaces, interfaces, processes or temporary
folders (a `NetnsLab`, so every fabric and every test) claims its name
prefix with a run file, `<run dir>/<prefix>.json`, *before* it creates
anything, and adds each item to the file before creating it. The file names
the owner by pid and by the process's start time (field 22 of
/proc/PID/stat), so a pid the kernel has reused for another process does not
make a dead run look alive. `cassini clean` removes the items of runs whose
owner is gone and leaves live runs alone; `--all` removes live runs too.

The run directory is `/run/cassini` (root), else `$TMPDIR/cassini-UID`;
`CASSINI_RUN_DIR` overrides it. Interface locks live there too: a switch
holds `flock` on one file per interface it attaches (`InterfaceLocks`), so a
second switch on the same interface is refused at once, and the kernel
releases the lock when the holder dies, even by SIGKILL.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from topologies.errors import UserInputError

RUN_DIR_ENV = "CASSINI_RUN_DIR"
SYSTEM_RUN_DIR = Path("/run/cassini")
# (our choice) An owner's command line is quoted up to this length in messages.
COMMAND_CHARS = 100


# A folder the lab made holds this file, naming the prefix of the run that made
# it: `cassini clean` deletes no folder without it (a run file can be forged).
FOLDER_MARKER = ".cassini-run"


def run_dir() -> Path:
    """Where run files and interface locks live (created owner-only on first use).

    Refused unless it is a real folder (not a link) owned by this user and
    writable by nobody else: in a shared /tmp another user could create
    `cassini-UID` first and plant run files naming folders for `clean` to delete.
    """
    override = os.environ.get(RUN_DIR_ENV)
    if override:
        path = Path(override)
    elif os.geteuid() == 0:
        path = SYSTEM_RUN_DIR
    else:
        path = Path(tempfile.gettempdir()) / f"cassini-{os.geteuid()}"
    with contextlib.suppress(FileExistsError):
        path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        path.mkdir(mode=0o700)
    check_private_folder(path, "run folder")
    return path


def check_private_folder(path: Path, what: str) -> None:
    """UserInputError unless `path` is a folder, not a link, owned by this user and
    not writable by group or others."""
    info = os.lstat(path)
    fix = f"remove it, or set {RUN_DIR_ENV} to a folder of your own"
    if not stat.S_ISDIR(info.st_mode):
        raise UserInputError(f"{what} {path} is not a folder (a link or a file?): {fix}")
    if info.st_uid != os.geteuid():
        raise UserInputError(f"{what} {path} belongs to user {info.st_uid}, not you: {fix}")
    if info.st_mode & 0o022:
        raise UserInputError(
            f"{what} {path} is writable by other users (mode {stat.S_IMODE(info.st_mode):o}): {fix}"
        )


# --- process identity --------------------------------------------------------


@dataclass(frozen=True)
class ProcessId:
    """A process as (pid, start time in clock ticks since boot): unique across pid reuse."""

    pid: int
    start: int

    @classmethod
    def of(cls, pid: int) -> ProcessId | None:
        """The identity of a running process, or None when there is no such process."""
        start = _start_time(pid)
        return None if start is None else cls(pid, start)

    def alive(self) -> bool:
        """True while this very process runs (not a zombie, not a newer one with its pid)."""
        return _start_time(self.pid) == self.start and _state(self.pid) not in (None, "Z", "X")


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    return text.rsplit(")", 1)[1].split()


def _start_time(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return None if fields is None else int(fields[19])  # field 22, starttime


def _state(pid: int) -> str | None:
    fields = _stat_fields(pid)
    return None if fields is None else fields[0]


def command_line(pid: int) -> str:
    """The process's argv joined by spaces ('' when it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    text = " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part)
    text = " ".join(text.split())  # one line, whatever the arguments hold
    return text if len(text) <= COMMAND_CHARS else text[: COMMAND_CHARS - 3] + "..."


# --- run files ---------------------------------------------------------------


@dataclass
class RunRecord:
    """What one run created (or was about to create) under its prefix."""

    prefix: str
    owner: ProcessId
    command: str = ""
    created: float = 0.0
    namespaces: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    processes: list[ProcessId] = field(default_factory=list)
    folders: list[str] = field(default_factory=list)
    path: Path | None = None

    def owner_alive(self) -> bool:
        return self.owner.alive()

    def describe_owner(self) -> str:
        """'pid 4242 (cassini fabric up ...), alive' or '... gone'."""
        command = f" ({self.command})" if self.command else ""
        state = "alive" if self.owner_alive() else "gone"
        return f"pid {self.owner.pid}{command}, {state}"

    def to_json(self) -> dict[str, Any]:
        return {
            "prefix": self.prefix,
            "owner": {"pid": self.owner.pid, "start": self.owner.start},
            "command": self.command,
            "created": self.created,
            "namespaces": self.namespaces,
            "links": self.links,
            "processes": [{"pid": p.pid, "start": p.start} for p in self.processes],
            "folders": self.folders,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], path: Path | None = None) -> RunRecord:
        return cls(
            prefix=str(data["prefix"]),
            owner=ProcessId(int(data["owner"]["pid"]), int(data["owner"]["start"])),
            command=str(data.get("command", "")),
            created=float(data.get("created", 0.0)),
            namespaces=[str(n) for n in data.get("namespaces", [])],
            links=[str(n) for n in data.get("links", [])],
            processes=[
                ProcessId(int(p["pid"]), int(p["start"])) for p in data.get("processes", [])
            ],
            folders=[str(f) for f in data.get("folders", [])],
            path=path,
        )


class RunFile:
    """This process's claim on a prefix; every change is written before the item exists.

    `RunFile.claim(prefix)` refuses a prefix another run holds (alive or not:
    a dead run's leftovers must be cleaned, not silently adopted).
    """

    def __init__(self, record: RunRecord, path: Path) -> None:
        self.record = record
        self.path = path

    @classmethod
    def claim(cls, prefix: str, existing: Callable[[str], list[str]] | None = None) -> RunFile:
        """Write the run file, unless another run holds the prefix or `existing(prefix)`
        names items that exist under it although no run recorded them."""
        owner = ProcessId.of(os.getpid())
        assert owner is not None
        path = run_dir() / f"{prefix}.json"
        record = RunRecord(prefix, owner, command_line(os.getpid()), time.time(), path=path)
        with _directory_lock():
            if path.exists():
                raise UserInputError(_in_use_message(prefix, read_run(path)))
            found = existing(prefix) if existing is not None else []
            if found:
                raise UserInputError(
                    f"prefix {prefix} is in use: {found[0]} exists and no run file claims it; "
                    f"{removal_hint(found[0])}"
                )
            run = cls(record, path)
            run.save()
        return run

    def save(self) -> None:
        """Atomically replace the run file (a reader never sees half a file); the
        temporary is created exclusively, owner-only, never through a link."""
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()  # a leftover of this pid's earlier, killed life
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        with os.fdopen(os.open(tmp, flags, 0o600), "w") as handle:
            handle.write(json.dumps(self.record.to_json()))
        os.replace(tmp, self.path)

    def add(self, kind: str, name: str) -> None:
        """Record a namespace, link or folder before creating it."""
        items: list[str] = getattr(self.record, kind)
        if name not in items:
            items.append(name)
            self.save()

    def add_process(self, pid: int) -> None:
        identity = ProcessId.of(pid)
        if identity is not None:
            self.record.processes.append(identity)
            self.save()

    def release(self) -> None:
        """The run is over and everything it made is gone: drop the file."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def removal_hint(item: str) -> str:
    """How to remove one stray item ('netns NAME', 'link NAME', 'process PID') and nothing
    else: `cassini clean --all --prefix P` would also end every live run whose prefix
    starts with P.

    >>> removal_hint("netns casrlh1")
    '`ip netns delete casrlh1` removes it (as root)'
    """
    kind, _, name = item.partition(" ")
    command = {
        "netns": f"ip netns delete {name}",
        "link": f"ip link delete {name}",
        "process": f"kill {name}",
    }.get(kind)
    return f"`{command}` removes it (as root)" if command else "remove it by hand"


def _in_use_message(prefix: str, record: RunRecord | None) -> str:
    if record is None:
        return f"prefix {prefix} is in use by another run (its run file is unreadable)"
    if record.owner_alive():
        return f"prefix {prefix} is in use by a running process: {record.describe_owner()}"
    return (
        f"prefix {prefix} is still held by a run whose owner is gone "
        f"({record.describe_owner()}); `cassini clean --prefix {prefix}` removes what it left"
    )


@contextlib.contextmanager
def _directory_lock() -> Iterator[None]:
    """Serialises claims and cleaning, so two runs cannot claim one prefix."""
    with open(run_dir() / ".lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def read_run(path: Path) -> RunRecord | None:
    """The run file at `path`, or None if it is unreadable, a link, or not this user's."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd) as handle:
            if os.fstat(handle.fileno()).st_uid != os.geteuid():
                return None
            return RunRecord.from_json(json.loads(handle.read(1 << 20)), path)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def runs(prefixes: Iterable[str] = ("",)) -> list[RunRecord]:
    """Every recorded run whose prefix starts with one of `prefixes`, oldest first."""
    prefix_tuple = tuple(prefixes)
    found = []
    for path in sorted(run_dir().glob("*.json")):
        record = read_run(path)
        if record is not None and record.prefix.startswith(prefix_tuple):
            found.append(record)
    return sorted(found, key=lambda r: r.created)


def mark_folder(folder: Path, prefix: str) -> None:
    """Label a folder the lab made as this run's, so `clean` may later delete it."""
    (folder / FOLDER_MARKER).write_text(prefix)


def ours(folder: str, prefix: str) -> bool:
    """Whether `folder` is one the lab made for the run `prefix`: a real folder (not a
    link) of this user, named after the prefix, holding the marker that names it."""
    path = Path(folder)
    try:
        info = os.lstat(path)
        marker = os.open(path / FOLDER_MARKER, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(marker) as handle:
            label = handle.read(256)
    except OSError:
        return False
    return (
        stat.S_ISDIR(info.st_mode)
        and info.st_uid == os.geteuid()
        and path.name.startswith(f"{prefix}-")
        and label == prefix
    )


def remove_folders(folders: Iterable[str], prefix: str) -> list[str]:
    """Delete the folders a run recorded that are ours (`ours`); returns those removed.
    A recorded folder without the marker is left alone, whatever the run file says."""
    removed = []
    for folder in folders:
        if ours(folder, prefix):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


# --- interface locks ----------------------------------------------------------


class InterfaceLocks:
    """Exclusive flocks on the interfaces a switch attaches; released when it exits or dies.

    >>> with InterfaceLocks(["veth1"]):   # doctest: +SKIP
    ...     pass  # a second InterfaceLocks(["veth1"]) raises UserInputError here
    """

    def __init__(self, interfaces: Iterable[str]) -> None:
        self.interfaces = sorted(set(interfaces))
        self._held: list[tuple[Path, Any]] = []

    def acquire(self) -> InterfaceLocks:
        try:
            for ifname in self.interfaces:
                self._held.append(self._lock_one(ifname))
        except BaseException:
            self.release()
            raise
        return self

    @staticmethod
    def _path(ifname: str) -> Path:
        # Interface names are per network namespace: the lock is too.
        netns = os.stat("/proc/self/ns/net").st_ino
        return run_dir() / f"iface-{netns}-{ifname}.lock"

    def _lock_one(self, ifname: str) -> tuple[Path, Any]:
        path = self._path(ifname)
        while True:
            handle = open(path, "a+")  # noqa: SIM115 - held until release()
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                holder = handle.read().strip() or "another process"
                handle.close()
                raise UserInputError(
                    f"interface {ifname} is already attached to a switch: {holder}"
                ) from None
            # The previous holder may have unlinked the file between our open and
            # our lock: then we hold a lock nobody else can see; try again.
            try:
                same = os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino
            except FileNotFoundError:
                same = False
            if same:
                handle.seek(0)
                handle.truncate()
                handle.write(f"pid {os.getpid()} ({command_line(os.getpid())})\n")
                handle.flush()
                return path, handle
            handle.close()

    def release(self) -> None:
        for path, handle in reversed(self._held):
            with contextlib.suppress(OSError):
                path.unlink()
            handle.close()
        self._held.clear()

    def __enter__(self) -> InterfaceLocks:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
