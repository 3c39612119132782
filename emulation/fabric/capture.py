"""Which file records the frames of one chip port, and how is its capture started?

`cassini fabric up --pcap DIR` writes one pcap per switch-side interface,
`DIR/<chip port>-<interface>.pcap`, as p4-utils writes one per switch port.
Each is a `tcpdump` in the root namespace (both directions, whole frames,
written packet by packet so a killed run keeps what it saw), started through
the caller's `launch` so the fabric's run file records its pid and `cassini
clean` stops it. Cabled ports of the software switch have no interface and
so no capture; bmv2's cables are veths and are captured like server ports.
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from topologies.errors import UserInputError

TCPDUMP = "tcpdump"
# tcpdump's stderr line once its socket is open: frames from then on are written.
LISTENING = "listening on"


def pcap_name(port: int, ifname: str) -> str:
    """'3-cas1a2bp3.pcap': the chip port first, so `ls` sorts files as the ports go.

    >>> pcap_name(3, "cas1a2bp3")
    '3-cas1a2bp3.pcap'
    """
    return f"{port}-{ifname}.pcap"


def tcpdump_argv(ifname: str, file: Path, binary: str = TCPDUMP) -> list[str]:
    """One interface, both directions, whole frames, each written at once (-U).

    `-Z root` keeps tcpdump from switching to its own user, who could not write
    into a results folder owned by root; `-n` resolves nothing.
    """
    return [
        binary, "-i", ifname, "-w", str(file), "-U", "-n", "-s", "0",
        "--immediate-mode", "-Z", "root",
    ]  # fmt: skip


@dataclass(frozen=True)
class Capture:
    """One running capture: the port, its interface, the file and the process."""

    port: int
    ifname: str
    file: Path
    process: subprocess.Popen[str]


def check_tcpdump() -> str:
    """tcpdump's path, or the one-line error naming what `--pcap` needs."""
    found = shutil.which(TCPDUMP)
    if found is None:
        raise UserInputError(
            "--pcap: tcpdump is not on PATH (install Debian's tcpdump, as scripts/setup.sh does)"
        )
    return found


def start_captures(
    ports: Mapping[int, str],
    folder: Path,
    launch: Callable[..., subprocess.Popen[str]],
    timeout: float = 10.0,
) -> list[Capture]:
    """A tcpdump per {chip port: interface}, each listening before this returns.

    All are started first and then awaited, so bring-up waits about one
    start-up, not one per port. A tcpdump that ends or stays silent raises
    RuntimeError with its words; the caller stops the ones already running.
    """
    binary = check_tcpdump()
    captures = []
    for port, ifname in sorted(ports.items()):
        file = folder / pcap_name(port, ifname)
        process = launch(
            tcpdump_argv(ifname, file, binary),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        captures.append(Capture(port, ifname, file, process))
    deadline = time.monotonic() + timeout
    for capture in captures:
        _wait_listening(capture, deadline)
    return captures


def _wait_listening(capture: Capture, deadline: float) -> None:
    """Read tcpdump's stderr (raw, so nothing waits in a buffer select cannot see)
    until it says it listens."""
    stream = capture.process.stderr
    assert stream is not None
    fd = stream.fileno()
    said = b""
    while LISTENING.encode() not in said:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            words = said.decode(errors="replace").strip()
            raise RuntimeError(f"tcpdump on {capture.ifname} did not start listening: {words}")
        chunk = os.read(fd, 4096)
        if not chunk:
            capture.process.wait()
            words = said.decode(errors="replace").strip()
            raise RuntimeError(
                f"tcpdump on {capture.ifname} exited ({capture.process.returncode}): {words}"
            )
        said += chunk


# A pcap file starts with a 24-byte global header: anything shorter holds no capture.
PCAP_HEADER_BYTES = 24


def stop_captures(captures: Sequence[Capture], grace: float = 2.0) -> list[str]:
    """SIGTERM each (tcpdump then closes its file), SIGKILL what outlives `grace`;
    returns one line per capture that did not record whole (a full disk left
    captures empty while `fabric up` said "pcap: 4 ports" and exited 0)."""
    for capture in captures:
        if capture.process.poll() is None:
            capture.process.terminate()
    problems = []
    for capture in captures:
        try:
            capture.process.wait(grace)
        except subprocess.TimeoutExpired:
            capture.process.kill()
            capture.process.wait()
        words = ""
        if capture.process.stderr is not None:
            words = _remaining(capture.process.stderr.fileno())
            capture.process.stderr.close()
        problem = capture_problem(capture.file, words)
        if problem is not None:
            problems.append(f"port {capture.port} ({capture.file.name}): {problem}")
    return problems


def capture_problem(file: Path, words: str) -> str | None:
    """Why a capture's file is not a whole recording, from the file and tcpdump's
    last words; None when it is.

    >>> capture_problem(Path("/nonexistent.pcap"), "")
    'no file was written'
    >>> capture_problem(Path("/dev/null"), "tcpdump: /x: No space left on device")
    'empty (no pcap header): tcpdump: /x: No space left on device'
    """
    try:
        size = file.stat().st_size if file.is_file() else 0
    except OSError:
        size = 0
    errors = [line for line in words.splitlines() if "error" in line.lower() or "space" in line]
    if not file.exists():
        return "no file was written"
    if size < PCAP_HEADER_BYTES:
        return f"empty (no pcap header){': ' + errors[-1] if errors else ''}"
    if errors:
        return f"cut short: {errors[-1]}"
    return None


def _remaining(fd: int) -> str:
    """What a finished tcpdump still had to say on stderr (it has exited: no wait)."""
    chunks = []
    while select.select([fd], [], [], 0)[0]:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")
