"""Which namespaces, veths and processes did we create, and how do they go away?

`NetnsLab` is a small, context-managed builder for test and emulation hosts:
network namespaces and veth pairs under one name prefix, with addresses,
MACs and offloads set, and processes started inside them. Leaving the
`with` block - normally, by an exception, Ctrl-C or SIGTERM - kills the
processes and deletes what was created. Every item is recorded in the
lab's run file (`emulation.run_files`) before it is created, so a run killed at
any moment leaves nothing that `clean` cannot find; `clean` removes what
runs whose owner is gone left behind (`cassini clean`), `cleanup_all(prefix)`
everything under a prefix, owner or not.

Example:

    with NetnsLab() as lab:
        h1 = lab.namespace("h1")
        host_if, switch_if = lab.veth("h1", "s1", ns_a=h1, ip_a="10.0.0.1/24")
        lab.run(h1, ["ping", "-c1", "10.0.0.2"])
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from topologies.addressing import is_valid_mac
from topologies.errors import UserInputError

from .run_files import RunFile, RunRecord, remove_folders, runs

# Prefixes of everything this project creates: "cas" for emulation runs,
# "cst" for tests (a random suffix keeps parallel runs apart).
PROJECT_PREFIXES = ("cas", "cst")
# The packet loop of a software switch runs as `python -m` this module.
DATAPATH_MODULE = "emulation.softswitch.datapath_process"
IFNAMSIZ = 15
OFFLOADS = ("tx", "rx", "tso", "gso", "gro")
CLONE_NEWNET = 0x40000000
ETH_P_ALL = 0x0003


def new_prefix(base: str = "cst") -> str:
    """A short unique prefix, e.g. 'cst3fa1', leaving room in 15-char interface names."""
    return base + secrets.token_hex(2)


class SignalExit(SystemExit):
    """SIGINT or SIGTERM, raised so cleanup runs; exits 128 + signal number like a shell."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise `SignalExit` (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _raise_interrupted) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


class NetnsLab:
    """Namespaces, veth pairs and processes under one prefix, removed on exit."""

    def __init__(self, prefix: str | None = None, base: str = "cst") -> None:
        self.prefix = prefix or new_prefix(base)
        self._chosen_prefix = prefix is None
        self._base = base
        self.namespaces: list[str] = []
        self.root_links: list[str] = []
        self.processes: list[subprocess.Popen[Any]] = []
        self.folders: list[str] = []
        self._run: RunFile | None = None
        self._previous_sigterm: Any = None

    # --- building -----------------------------------------------------------

    def claim(self) -> RunFile:
        """Claim the prefix with a run file (once, before anything is created).

        A prefix another run holds, or under which items exist that no run
        recorded, is refused at once with one line; a random prefix that
        collides is replaced by another.
        """
        if self._run is not None:
            return self._run
        for _ in range(8):
            try:
                self._run = RunFile.claim(self.prefix, existing=leftovers)
                return self._run
            except UserInputError:
                if not self._chosen_prefix:
                    raise
                self.prefix = new_prefix(self._base)
        raise RuntimeError("no free random prefix after 8 tries")

    def namespace(self, name: str) -> str:
        """Create namespace prefix+name with loopback up; returns its full name."""
        full = self.prefix + name
        self.claim().add("namespaces", full)  # recorded first: a kill now leaves nothing unknown
        self.namespaces.append(full)
        _ip("netns", "add", full)
        _ip("-n", full, "link", "set", "lo", "up")
        return full

    def tempdir(self, name: str = "tmp") -> Path:
        """A folder for this run's files (logs, configs), removed with the lab."""
        folder = Path(tempfile.gettempdir()) / f"{self.prefix}-{name}-{secrets.token_hex(3)}"
        self.claim().add("folders", str(folder))
        self.folders.append(str(folder))
        folder.mkdir(mode=0o700)
        return folder

    def veth(
        self,
        name_a: str,
        name_b: str,
        ns_a: str | None = None,
        ns_b: str | None = None,
        mac_a: str | None = None,
        mac_b: str | None = None,
        ip_a: str | None = None,
        ip_b: str | None = None,
        mtu: int | None = None,
    ) -> tuple[str, str]:
        """A veth pair prefix+name_a <-> prefix+name_b, each end in a namespace or the root.

        Both ends come up with checksum/segmentation offloads off, so a
        user-space switch sees real frames with real checksums.
        """
        if_a, if_b = self.prefix + name_a, self.prefix + name_b
        for name in (if_a, if_b):
            if len(name) > IFNAMSIZ:
                raise ValueError(f"interface name '{name}' is longer than {IFNAMSIZ} characters")
        for mac in (mac_a, mac_b):
            if mac is not None and not is_valid_mac(mac):
                raise ValueError(f"MAC {mac!r} is not six hex pairs like 02:00:00:00:00:01")
        # Recorded before it exists: a signal between the two leaves no unknown veth.
        run = self.claim()
        for name in (if_a, if_b):
            run.add("links", name)
        self.root_links += [if_a, if_b]
        _ip("link", "add", if_a, "type", "veth", "peer", "name", if_b)
        for ifname, ns, mac, address in ((if_a, ns_a, mac_a, ip_a), (if_b, ns_b, mac_b, ip_b)):
            if ns is not None:
                _ip("link", "set", ifname, "netns", ns)
            where = ["-n", ns] if ns is not None else []
            if mac is not None:
                _ip(*where, "link", "set", ifname, "address", mac)
            if mtu is not None:
                _ip(*where, "link", "set", ifname, "mtu", str(mtu))
            if address is not None:
                _ip(*where, "addr", "add", address, "dev", ifname)
            if ns is not None:
                # IPv6 router solicitations would add frames nobody asked for.
                self.run(ns, ["sysctl", "-qw", f"net.ipv6.conf.{ifname}.disable_ipv6=1"])
            else:
                with contextlib.suppress(OSError):  # IPv6 may be off altogether
                    Path(f"/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6").write_text("1")
            _ip(*where, "link", "set", ifname, "up")
            ethtool = ["ethtool", "-K", ifname]
            for offload in OFFLOADS:
                ethtool += [offload, "off"]
            if ns is not None:
                self.run(ns, ethtool)
            else:
                subprocess.run(ethtool, check=True, capture_output=True)
        return if_a, if_b

    def run(
        self, ns: str, argv: Sequence[str], check: bool = True, timeout: float = 30.0
    ) -> subprocess.CompletedProcess[str]:
        """Run a command inside a namespace to completion."""
        return subprocess.run(
            ["ip", "netns", "exec", ns, *argv],
            check=check,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def popen(self, ns: str | None, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start a process (in a namespace, or the root one); it is killed on exit."""
        full = ["ip", "netns", "exec", ns, *argv] if ns is not None else list(argv)
        run = self.claim()
        # A pid exists only once the process does: hold signals until it is recorded.
        with _signals_deferred():
            process = subprocess.Popen(full, **kwargs)
            self.processes.append(process)
            run.add_process(process.pid)
        return process

    def packet_socket(self, ns: str, ifname: str) -> socket.socket:
        """An AF_PACKET socket on an interface inside a namespace (see open_packet_socket)."""
        return open_packet_socket(ns, ifname)

    # --- tearing down -------------------------------------------------------

    def close(self) -> None:
        """Kill our processes, delete our namespaces and links (idempotent)."""
        made_links = bool(self.namespaces or self.root_links)
        for process in self.processes:
            _stop_process(process)
        self.processes.clear()
        for ns in self.namespaces:
            _kill_namespace_pids(ns)
        # Links first: deleting a veth end removes the pair at once, while a
        # deleted namespace's veths vanish only when the kernel gets round to it.
        existing = set(_root_links())
        for link in self.root_links:
            if link in existing:
                _ip("link", "delete", link, check=False)
        self.root_links.clear()
        existing_ns = set(_namespaces())
        for ns in self.namespaces:
            if ns in existing_ns:
                _ip("netns", "delete", ns, check=False)
        self.namespaces.clear()
        if made_links:
            _wait_until_gone(self.prefix)
        remove_folders(self.folders)
        self.folders.clear()
        if self._run is not None:
            self._run.release()
            self._run = None

    def __enter__(self) -> NetnsLab:
        if threading.current_thread() is threading.main_thread():
            # SIGTERM becomes an exception so the with-block's exit still cleans up.
            self._previous_sigterm = signal.signal(signal.SIGTERM, _raise_system_exit)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            # A second Ctrl-C during cleanup must not leave half the lab behind.
            with _signals_deferred(redeliver=False):
                self.close()
        finally:
            if self._previous_sigterm is not None:
                signal.signal(signal.SIGTERM, self._previous_sigterm)
                self._previous_sigterm = None


def open_packet_socket(ns: str, ifname: str, rcvbuf: int = 8 << 20) -> socket.socket:
    """An AF_PACKET/ETH_P_ALL socket bound to `ifname` in namespace `ns`.

    A socket keeps the namespace it was created in, so a short-lived thread
    enters the namespace (setns only moves the calling thread), opens the
    socket and exits: tests can then send and sniff from their own process
    without starting a Python per namespace.
    """
    result: list[socket.socket | BaseException] = []

    def enter_and_open() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            with open(f"/run/netns/{ns}") as ns_file:
                if libc.setns(ns_file.fileno(), CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns into {ns}: {os.strerror(err)}")
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            sock.setsockopt(socket.SOL_SOCKET, 33, rcvbuf)  # SO_RCVBUFFORCE
            sock.bind((ifname, ETH_P_ALL))
            result.append(sock)
        except BaseException as err:  # handed to the caller's thread
            result.append(err)

    thread = threading.Thread(target=enter_and_open, name=f"setns-{ns}")
    thread.start()
    thread.join()
    outcome = result[0]
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


def _raise_system_exit(signum: int, frame: FrameType | None) -> None:
    raise SignalExit(signum)


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    raise SignalExit(signum)


@contextlib.contextmanager
def _signals_deferred(redeliver: bool = True) -> Iterator[None]:
    """SIGINT/SIGTERM wait until the block is done, then take effect as usual
    (redeliver=False: dropped, as during cleanup, which is what they ask for)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        pending.append(signum)

    previous = {s: signal.signal(s, hold) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if pending and redeliver:
            signal.raise_signal(pending[0])


def exit_cause(returncode: int | None) -> str:
    """Why a process ended, as a phrase; a negative code is a signal (subprocess's way).

    >>> exit_cause(-9), exit_cause(3), exit_cause(None)
    ('was killed by SIGKILL (signal 9)', 'exited with code 3', 'is still running')
    """
    if returncode is None:
        return "is still running"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "an unknown signal"
        return f"was killed by {name} (signal {-returncode})"
    return f"exited with code {returncode}"


def _stop_process(process: subprocess.Popen[Any], grace: float = 2.0) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(grace)


def _kill_namespace_pids(ns: str) -> list[int]:
    result = _ip("netns", "pids", ns, check=False)
    pids = [int(p) for p in result.stdout.split() if p.isdigit()]
    _terminate(pids)
    return pids


def _terminate(pids: list[int]) -> None:
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


def _wait_until_gone(prefix: str, timeout: float = 3.0) -> None:
    """Namespace teardown is asynchronous in the kernel; wait for its links to go."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and any(n.startswith(prefix) for n in _root_links()):
        time.sleep(0.01)


def _root_links() -> list[str]:
    return [name for name in os.listdir("/sys/class/net")]


def _namespaces() -> list[str]:
    result = _ip("netns", "list", check=False)
    return [line.split()[0] for line in result.stdout.splitlines() if line.strip()]


BMV2_PROCESS = "simple_switch_grpc"  # bmv2 as the fabric's switch (emulation.mininet_net)


def _switch_processes(prefixes: Iterable[str]) -> list[int]:
    """`cassini switch serve` processes (and their packet loops) and bmv2's
    `simple_switch_grpc` bound to interfaces with one of the prefixes."""
    found = []
    prefixes = tuple(prefixes)
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in argv]
        serving = ("switch" in args and "serve" in args) or (
            bool(args) and Path(args[0]).name == BMV2_PROCESS
        )
        if not serving and DATAPATH_MODULE not in args:
            continue
        interfaces = [a.split("@", 1)[1] for a in args if "@" in a]
        if any(ifname.startswith(prefixes) for ifname in interfaces):
            found.append(int(entry))
    return found


def leftovers(prefixes: str | Iterable[str]) -> list[str]:
    """What exists under the prefixes: 'netns NAME', 'link NAME', 'process PID'."""
    prefix_tuple = (prefixes,) if isinstance(prefixes, str) else tuple(prefixes)
    found = [f"netns {ns}" for ns in _namespaces() if ns.startswith(prefix_tuple)]
    found += [f"link {name}" for name in _root_links() if name.startswith(prefix_tuple)]
    found += [f"process {pid}" for pid in _switch_processes(prefix_tuple)]
    return found


def cleanup_all(prefixes: str | Iterable[str] = PROJECT_PREFIXES) -> list[str]:
    """Remove every namespace, root link and switch process under the prefixes,
    and the runs recorded under them, whether their owners live or not.

    Returns what was removed, in the words of `leftovers`.
    """
    prefix_tuple = (prefixes,) if isinstance(prefixes, str) else tuple(prefixes)
    removed = []
    for run in runs(prefix_tuple):
        removed += _remove_run(run)
    switches = _switch_processes(prefix_tuple)
    _terminate(switches)
    removed += [f"process {pid}" for pid in switches]
    for ns in _namespaces():
        if ns.startswith(prefix_tuple):
            for pid in _kill_namespace_pids(ns):
                removed.append(f"process {pid} (in {ns})")
            _ip("netns", "delete", ns, check=False)
            removed.append(f"netns {ns}")
    for name in _root_links():
        if name.startswith(prefix_tuple) and Path("/sys/class/net", name).exists():
            _ip("link", "delete", name, check=False)
            removed.append(f"link {name}")
    return removed


# --- `cassini clean`: runs whose owner is gone -----------------------------------

MIN_PREFIX_LEN = len(PROJECT_PREFIXES[0])


def check_clean_prefix(prefix: str) -> str:
    """A prefix `clean` may use: one of the project's, letters and digits only.

    >>> check_clean_prefix("cas3fa1")
    'cas3fa1'
    """
    if (
        len(prefix) < MIN_PREFIX_LEN
        or not prefix.isalnum()
        or not prefix.startswith(PROJECT_PREFIXES)
    ):
        raise UserInputError(
            f"--prefix {prefix!r}: must start with {' or '.join(PROJECT_PREFIXES)} and hold "
            "only letters and digits (this project creates nothing else)"
        )
    return prefix


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


def survey(prefixes: Iterable[str] = PROJECT_PREFIXES) -> Survey:
    """What `clean` would look at: each run with its owner and live items, then the rest."""
    prefix_tuple = tuple(prefixes)
    states = []
    claimed: set[str] = set()
    for run in runs(prefix_tuple):
        items = tuple(_existing_items(run))
        claimed.update(items)
        states.append(RunState(run, run.owner_alive(), items))
    own_prefixes = tuple(state.run.prefix for state in states)
    unrecorded = tuple(
        item
        for item in leftovers(prefix_tuple)
        if item not in claimed and not _item_name(item).startswith(own_prefixes or ("\0",))
    )
    return Survey(tuple(states), unrecorded)


def clean(prefixes: Iterable[str] = PROJECT_PREFIXES, include_live: bool = False) -> list[str]:
    """Remove what runs whose owner is gone left behind (all runs with include_live,
    and then also items under the prefixes that no run recorded). Returns what went."""
    prefix_tuple = tuple(prefixes)
    removed: list[str] = []
    for run in runs(prefix_tuple):
        if include_live or not run.owner_alive():
            removed += _remove_run(run)
    if include_live:
        removed += cleanup_all(prefix_tuple)
    return removed


def _item_name(item: str) -> str:
    return item.split(" ", 1)[1]


def _existing_items(run: RunRecord) -> list[str]:
    namespaces = set(_namespaces())
    links = set(_root_links())
    found = [f"netns {ns}" for ns in run.namespaces if ns in namespaces]
    found += [f"link {name}" for name in run.links if name in links]
    found += [f"process {p.pid}" for p in run.processes if p.alive()]
    found += [f"process {pid}" for pid in _switch_processes((run.prefix,))]
    found += [f"folder {f}" for f in run.folders if os.path.isdir(f)]
    return list(dict.fromkeys(found))


def _remove_run(run: RunRecord) -> list[str]:
    """Processes, namespaces, links and folders of one run, then its run file.

    Only processes whose start time still matches are signalled: a recorded
    pid the kernel has given to another process is left alone.
    """
    removed = []
    pids = [p.pid for p in run.processes if p.alive()]
    pids += [pid for pid in _switch_processes((run.prefix,)) if pid not in pids]
    _terminate(pids)
    removed += [f"process {pid}" for pid in pids]
    existing_ns = set(_namespaces())
    for ns in run.namespaces:
        if ns in existing_ns:
            removed += [f"process {pid} (in {ns})" for pid in _kill_namespace_pids(ns)]
    existing = set(_root_links())
    for name in run.links:
        if name in existing and Path("/sys/class/net", name).exists():
            _ip("link", "delete", name, check=False)
            removed.append(f"link {name}")
    for ns in run.namespaces:
        if ns in existing_ns:
            _ip("netns", "delete", ns, check=False)
            removed.append(f"netns {ns}")
    removed += [f"folder {f}" for f in remove_folders(run.folders)]
    _wait_until_gone(run.prefix)
    if run.path is not None:
        with contextlib.suppress(FileNotFoundError):
            run.path.unlink()
    return removed
