"""How does a run build namespaces, veths and processes, and remove them on exit?

`NetnsLab` is a small, context-managed builder for test and emulation hosts:
network namespaces and veth pairs under one name prefix (`emulation.housekeeping.prefixes`),
with addresses, MACs and offloads set, and processes started inside them.
Leaving the `with` block - normally, by an exception, Ctrl-C or SIGTERM -
kills the processes and deletes what was created. Every item is recorded in
the lab's run file (`emulation.housekeeping.run_files`) before it is created, so a run
killed at any moment leaves nothing that `cassini clean` (`emulation.housekeeping.clean`)
cannot find.

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
import signal
import socket
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from emulation.housekeeping.clean import ProcessMatch, ip_command, leftovers, remove_items
from emulation.housekeeping.prefixes import IFNAMSIZ, new_prefix
from emulation.housekeeping.run_files import RunFile, mark_folder
from emulation.housekeeping.signals import KILLING_SIGNALS, raise_signal_exit, signals_deferred
from topologies.addressing import is_valid_mac
from topologies.errors import UserInputError

OFFLOADS = ("tx", "rx", "tso", "gso", "gro")
CLONE_NEWNET = 0x40000000
ETH_P_ALL = 0x0003


class NetnsLab:
    """Namespaces, veth pairs and processes under one prefix, removed on exit.

    `processes` names the programs that, found running on interfaces under
    the prefix, make it in use (see `emulation.housekeeping.clean.leftovers`).
    """

    def __init__(
        self,
        prefix: str | None = None,
        base: str = "cst",
        processes: ProcessMatch | None = None,
    ) -> None:
        self.prefix = prefix or new_prefix(base)
        self._chosen_prefix = prefix is None
        self._base = base
        self._processes = processes
        self.namespaces: list[str] = []
        self.root_links: list[str] = []
        self.processes: list[subprocess.Popen[Any]] = []
        self.folders: list[str] = []
        self._run: RunFile | None = None
        self._previous_handlers: dict[int, Any] = {}

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
                self._run = RunFile.claim(
                    self.prefix, existing=lambda prefix: leftovers(prefix, self._processes)
                )
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
        ip_command("netns", "add", full)
        ip_command("-n", full, "link", "set", "lo", "up")
        return full

    def tempdir(self, name: str = "tmp") -> Path:
        """A folder for this run's files (logs, configs), removed with the lab.

        `tempfile.mkdtemp` picks an unguessable name and creates it owner-only in
        one step (O_EXCL), so another local user can neither predict nor plant
        it. It is recorded the moment it exists (the one item not recorded
        first: its name is only known once made).
        """
        run = self.claim()
        folder = Path(tempfile.mkdtemp(prefix=f"{self.prefix}-{name}-"))
        mark_folder(folder, self.prefix)
        run.add("folders", str(folder))
        self.folders.append(str(folder))
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
        ip_command("link", "add", if_a, "type", "veth", "peer", "name", if_b)
        for ifname, ns, mac, address in ((if_a, ns_a, mac_a, ip_a), (if_b, ns_b, mac_b, ip_b)):
            if ns is not None:
                ip_command("link", "set", ifname, "netns", ns)
            where = ["-n", ns] if ns is not None else []
            if mac is not None:
                ip_command(*where, "link", "set", ifname, "address", mac)
            if mtu is not None:
                ip_command(*where, "link", "set", ifname, "mtu", str(mtu))
            if address is not None:
                ip_command(*where, "addr", "add", address, "dev", ifname)
            if ns is not None:
                # IPv6 router solicitations would add frames nobody asked for.
                self.run(ns, ["sysctl", "-qw", f"net.ipv6.conf.{ifname}.disable_ipv6=1"])
            else:
                with contextlib.suppress(OSError):  # IPv6 may be off altogether
                    Path(f"/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6").write_text("1")
            ip_command(*where, "link", "set", ifname, "up")
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
        with signals_deferred():
            process = subprocess.Popen(full, **kwargs)
            self.processes.append(process)
            run.add_process(process.pid)
        return process

    def packet_socket(self, ns: str, ifname: str) -> socket.socket:
        """An AF_PACKET socket on an interface inside a namespace (see open_packet_socket)."""
        return open_packet_socket(ns, ifname)

    # --- tearing down -------------------------------------------------------

    def close(self) -> None:
        """Kill our processes, delete our namespaces, links and folders (idempotent)."""
        for process in self.processes:
            _stop_process(process)
        self.processes.clear()
        remove_items(self.prefix, self.namespaces, self.root_links, self.folders)
        self.namespaces.clear()
        self.root_links.clear()
        self.folders.clear()
        if self._run is not None:
            self._run.release()
            self._run = None

    def __enter__(self) -> NetnsLab:
        if threading.current_thread() is threading.main_thread():
            # SIGTERM and SIGHUP become an exception so the with-block's exit still cleans up.
            self._previous_handlers = {
                signum: signal.signal(signum, raise_signal_exit) for signum in KILLING_SIGNALS
            }
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            # A second Ctrl-C during cleanup must not leave half the lab behind.
            with signals_deferred(redeliver=False):
                self.close()
        finally:
            for signum, handler in self._previous_handlers.items():
                signal.signal(signum, handler)
            self._previous_handlers = {}


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


def _stop_process(process: subprocess.Popen[Any], grace: float = 2.0) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(grace)
