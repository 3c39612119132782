"""What did runs leave on the machine, and how does it go away?

A run's namespaces, links, processes and folders carry its prefix and are
listed in its run file (`emulation.housekeeping.run_files`). `clean` removes what runs
whose owner is gone left behind (`cassini clean`) and leaves live runs
alone; `cleanup_all(prefix)` removes everything under a prefix, owner or
not. Processes outside any namespace that no run file recorded are found by
their command line: the caller says which programs a run may leave behind
(a `ProcessMatch`, e.g. `emulation.softswitch.processes.is_switch_process`),
and such a process is a run's when it names one of the run's interfaces as
`PORT@IFACE`. A switch killed outright leaves its interface lock files
(`run_files.InterfaceLocks`) behind: `clean` removes every one a switch
wrote that no process holds, whatever the interface's name.
Items are described as 'netns NAME', 'link NAME', 'process PID', 'folder
PATH' and 'lock PATH'. `NetnsLab` removes what it built with the same
functions.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .prefixes import PROJECT_PREFIXES
from .run_files import RunRecord, remove_folders, run_dir, runs

ProcessMatch = Callable[[Sequence[str]], bool]
"""Is this command line (argv) a program a run may leave running?"""


def ip_command(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`ip ARGS...`, its output captured as text."""
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def namespaces() -> list[str]:
    """The names of all network namespaces."""
    result = ip_command("netns", "list", check=False)
    return [line.split()[0] for line in result.stdout.splitlines() if line.strip()]


def root_links() -> list[str]:
    """The names of all interfaces in the root namespace."""
    return os.listdir("/sys/class/net")


def kill_namespace_pids(ns: str) -> list[int]:
    """End every process inside a namespace; returns their pids."""
    result = ip_command("netns", "pids", ns, check=False)
    pids = [int(p) for p in result.stdout.split() if p.isdigit()]
    terminate(pids)
    return pids


def terminate(pids: list[int]) -> None:
    """SIGTERM, up to 2 s to exit, then SIGKILL."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 2.0
    for pid in pids:
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie child of ours counts as gone.
    with contextlib.suppress(OSError):
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    return False


def wait_until_gone(prefix: str, timeout: float = 3.0) -> None:
    """Namespace teardown is asynchronous in the kernel; wait for its links to go."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and any(n.startswith(prefix) for n in root_links()):
        time.sleep(0.01)


def remove_items(
    prefix: str, netns: Sequence[str], links: Sequence[str], folders: Sequence[str]
) -> list[str]:
    """End the processes inside the namespaces, delete the links, the namespaces and
    the folders (names that do not exist are skipped); returns what went."""
    removed = []
    existing_ns = set(namespaces())
    for ns in netns:
        if ns in existing_ns:
            removed += [f"process {pid} (in {ns})" for pid in kill_namespace_pids(ns)]
    # Links first: deleting a veth end removes the pair at once, while a
    # deleted namespace's veths vanish only when the kernel gets round to it.
    existing = set(root_links())
    for name in links:
        if name in existing and Path("/sys/class/net", name).exists():
            ip_command("link", "delete", name, check=False)
            removed.append(f"link {name}")
    for ns in netns:
        if ns in existing_ns:
            ip_command("netns", "delete", ns, check=False)
            removed.append(f"netns {ns}")
    removed += [f"folder {f}" for f in remove_folders(folders, prefix)]
    if netns or links:
        wait_until_gone(prefix)
    return removed


def processes_on(prefixes: Iterable[str], match: ProcessMatch | None) -> list[int]:
    """Processes (not this one) that `match` accepts and whose command line names
    an interface under one of the prefixes as PORT@IFACE (none without `match`)."""
    if match is None:
        return []
    found = []
    prefix_tuple = tuple(prefixes)
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in argv]
        if not match(args):
            continue
        interfaces = [a.split("@", 1)[1] for a in args if "@" in a]
        if any(ifname.startswith(prefix_tuple) for ifname in interfaces):
            found.append(int(entry))
    return found


def leftovers(prefixes: str | Iterable[str], processes: ProcessMatch | None = None) -> list[str]:
    """What exists under the prefixes: 'netns NAME', 'link NAME', 'process PID'
    (processes that `processes` accepts, on interfaces under the prefixes)."""
    prefix_tuple = (prefixes,) if isinstance(prefixes, str) else tuple(prefixes)
    found = [f"netns {ns}" for ns in namespaces() if ns.startswith(prefix_tuple)]
    found += [f"link {name}" for name in root_links() if name.startswith(prefix_tuple)]
    found += [f"process {pid}" for pid in processes_on(prefix_tuple, processes)]
    return found


def cleanup_all(
    prefixes: str | Iterable[str] = PROJECT_PREFIXES, processes: ProcessMatch | None = None
) -> list[str]:
    """Remove every namespace, root link and matching process under the prefixes,
    and the runs recorded under them, whether their owners live or not.

    Returns what was removed, in the words of `leftovers`.
    """
    prefix_tuple = (prefixes,) if isinstance(prefixes, str) else tuple(prefixes)
    removed = []
    for run in runs(prefix_tuple):
        removed += _remove_run(run, processes)
    found = processes_on(prefix_tuple, processes)
    terminate(found)
    removed += [f"process {pid}" for pid in found]
    for ns in namespaces():
        if ns.startswith(prefix_tuple):
            for pid in kill_namespace_pids(ns):
                removed.append(f"process {pid} (in {ns})")
            ip_command("netns", "delete", ns, check=False)
            removed.append(f"netns {ns}")
    for name in root_links():
        if name.startswith(prefix_tuple) and Path("/sys/class/net", name).exists():
            ip_command("link", "delete", name, check=False)
            removed.append(f"link {name}")
    return removed


# --- interface locks whose holder is gone ---------------------------------------

# `run_files.InterfaceLocks` names a lock file iface-<netns inode>-<interface>.lock.
LOCK_PREFIX, LOCK_SUFFIX = "iface-", ".lock"


def lock_interface(name: str) -> str | None:
    """The interface an interface lock file is for; None for any other file name.

    >>> lock_interface("iface-4026531833-cas1e64p1.lock"), lock_interface("run-cas1.json")
    ('cas1e64p1', None)
    """
    if not (name.startswith(LOCK_PREFIX) and name.endswith(LOCK_SUFFIX)):
        return None
    netns, sep, ifname = name[len(LOCK_PREFIX) : -len(LOCK_SUFFIX)].partition("-")
    return ifname if sep and netns.isdigit() and ifname else None


def _unheld(path: Path) -> bool:
    """Whether no process holds the lock on `path`; if none does, the file is removed
    while we hold it (a switch that opened it meanwhile sees another inode and retries,
    as `InterfaceLocks` does)."""
    try:
        handle = open(path, "a+")  # noqa: SIM115 (closed below)
    except OSError:
        return False
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        try:
            if os.stat(path).st_ino != os.fstat(handle.fileno()).st_ino:
                return False  # replaced meanwhile: its holder is someone else
            path.unlink()
        except FileNotFoundError:
            return False
        return True


def switch_lock(path: Path, processes: ProcessMatch | None) -> bool:
    """Whether a lock file is one a switch of ours wrote: `InterfaceLocks` records
    'pid N (COMMAND)', and COMMAND is one `processes` matches (any, without it)."""
    try:
        with open(path, errors="replace") as handle:
            text = handle.read(4096)
    except OSError:
        return False
    found = re.fullmatch(r"pid \d+ \((.*)\)\s*", text, re.DOTALL)
    if found is None:
        return False
    return processes is None or processes(found.group(1).split())


def stale_locks(processes: ProcessMatch | None = None, remove: bool = False) -> list[str]:
    """'lock PATH' of every interface lock file in the run folder that a switch of ours
    wrote (`switch_lock`) and no process holds, whatever its interface is called: a
    switch on the user's own veths leaves them too (removed when `remove`; a dry run
    only tests the lock and leaves the file)."""
    folder = run_dir()
    found = []
    for name in sorted(os.listdir(folder)):
        path = folder / name
        if lock_interface(name) is None or not switch_lock(path, processes):
            continue
        if remove:
            if _unheld(path):
                found.append(f"lock {path}")
            continue
        with contextlib.suppress(OSError), open(path) as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            found.append(f"lock {path}")
    return found


# --- `cassini clean`: runs whose owner is gone -----------------------------------


@dataclass(frozen=True)
class RunState:
    """One recorded run as `clean` sees it: what of it still exists."""

    run: RunRecord
    alive: bool
    items: tuple[str, ...]


@dataclass(frozen=True)
class Survey:
    """Recorded runs under the prefixes, and items no run file claims."""

    runs: tuple[RunState, ...]
    unrecorded: tuple[str, ...]
    stale_locks: tuple[str, ...] = ()  # interface locks no process holds


def survey(
    prefixes: Iterable[str] = PROJECT_PREFIXES, processes: ProcessMatch | None = None
) -> Survey:
    """What `clean` would look at: each run with its owner and live items, then the rest."""
    prefix_tuple = tuple(prefixes)
    states = []
    claimed: set[str] = set()
    for run in runs(prefix_tuple):
        items = tuple(_existing_items(run, processes))
        claimed.update(items)
        states.append(RunState(run, run.owner_alive(), items))
    own_prefixes = tuple(state.run.prefix for state in states)
    unrecorded = tuple(
        item
        for item in leftovers(prefix_tuple, processes)
        if item not in claimed and not _item_name(item).startswith(own_prefixes or ("\0",))
    )
    return Survey(tuple(states), unrecorded, tuple(stale_locks(processes)))


def clean(
    prefixes: Iterable[str] = PROJECT_PREFIXES,
    include_live: bool = False,
    processes: ProcessMatch | None = None,
) -> list[str]:
    """Remove what runs whose owner is gone left behind (all runs with include_live,
    and then also items under the prefixes that no run recorded), and the interface
    locks no process holds. Returns what went."""
    prefix_tuple = tuple(prefixes)
    removed: list[str] = []
    for run in runs(prefix_tuple):
        if include_live or not run.owner_alive():
            removed += _remove_run(run, processes)
    if include_live:
        removed += cleanup_all(prefix_tuple, processes)
    return removed + stale_locks(processes, remove=True)


def _item_name(item: str) -> str:
    return item.split(" ", 1)[1]


def _existing_items(run: RunRecord, processes: ProcessMatch | None) -> list[str]:
    existing_ns = set(namespaces())
    links = set(root_links())
    found = [f"netns {ns}" for ns in run.namespaces if ns in existing_ns]
    found += [f"link {name}" for name in run.links if name in links]
    found += [f"process {p.pid}" for p in run.processes if p.alive()]
    found += [f"process {pid}" for pid in processes_on((run.prefix,), processes)]
    found += [f"folder {f}" for f in run.folders if os.path.isdir(f)]
    return list(dict.fromkeys(found))


def _remove_run(run: RunRecord, processes: ProcessMatch | None) -> list[str]:
    """Processes, namespaces, links and folders of one run, then its run file.

    Only processes whose start time still matches are signalled: a recorded
    pid the kernel has given to another process is left alone.
    """
    pids = [p.pid for p in run.processes if p.alive()]
    pids += [pid for pid in processes_on((run.prefix,), processes) if pid not in pids]
    terminate(pids)
    removed = [f"process {pid}" for pid in pids]
    removed += remove_items(run.prefix, run.namespaces, run.links, run.folders)
    if run.path is not None:
        with contextlib.suppress(FileNotFoundError):
            run.path.unlink()
    return removed
