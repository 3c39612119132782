"""What did the switch's process say, and why did it end?

A switch process nobody listens to dies unnoticed, and one that dies says
why only in its last lines. `SwitchLog` reads a process's output on a
thread of its own until the process ends: it keeps the last lines (a
failure report quotes them), copies every line to a file when asked (the
fabric's `log_dir`: a new file, never one a link points to) and hands over
the address a readiness line names. A copy that fails (a full disk) stops
copying, not reading: the switch is still heard, and `problem` says why the
file is cut short.
`describe_exit` turns a return code and those lines into one sentence.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from emulation.housekeeping.signals import exit_cause
from topologies.outputs import create_file

# How many of the switch's last log lines a failure report quotes.
FAILURE_LOG_LINES = 10
# How many it keeps while the process runs (our choice: enough for a report with context).
TAIL_LINES = 200


def describe_exit(
    what: str,
    pid: int,
    returncode: int,
    log_tail: Sequence[str] = (),
    lines: int = FAILURE_LOG_LINES,
) -> str:
    """Why a process ended, in one sentence, then its last log lines, then the sentence
    again: the first line is the cause for a caller that keeps one line, and the last
    line on a screen is the cause too, not the tenth log line (our choice).

    A negative return code is a signal (subprocess's convention), named so the
    reader need not look it up:

    >>> print(describe_exit("the switch", 4242, -9, ["ready: device 1"]))
    the switch (pid 4242) was killed by SIGKILL (signal 9); last log lines:
      ready: device 1
    so: the switch (pid 4242) was killed by SIGKILL (signal 9)
    >>> describe_exit("the switch", 4242, 3)
    'the switch (pid 4242) exited with code 3 (no log output)'
    """
    cause = exit_cause(returncode)
    tail = [line for line in log_tail if line.strip()][-lines:] if lines > 0 else []
    if not tail:
        return f"{what} (pid {pid}) {cause} (no log output)"
    quoted = "\n".join(f"  {t}" for t in tail)
    return f"{what} (pid {pid}) {cause}; last log lines:\n{quoted}\nso: {what} (pid {pid}) {cause}"


class SwitchLog:
    """A switch process's output, read until it ends (`follow`), then closed (`close`)."""

    def __init__(self) -> None:
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self._found: list[str] = []
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._copy: IO[str] | None = None
        self.problem: str | None = None  # why the copy is cut short, if it is

    def follow(
        self, stream: IO[str], copy_to: Path | None = None, ready: re.Pattern[str] | None = None
    ) -> None:
        """Read `stream` on a thread: keep its tail, copy it to `copy_to`, and note the
        address the first line matching `ready` names (its group 1)."""
        if copy_to is not None:
            self._copy = create_file(copy_to)

        def drain() -> None:
            copy = self._copy
            for line in stream:
                self.tail.append(line.rstrip())
                if copy is not None:
                    try:
                        copy.write(line)
                        copy.flush()
                    except OSError as err:
                        name = copy_to.name if copy_to is not None else "the copy"
                        self.problem = f"{name} cut short ({err.strerror or err})"
                        copy = None
                match = ready.search(line) if ready is not None else None
                if match and not self._ready.is_set():
                    self._found.append(match.group(1))
                    self._ready.set()
            self._ready.set()  # the process ended

        self._thread = threading.Thread(target=drain, name="fabric-switch-log", daemon=True)
        self._thread.start()

    def ready_address(self, timeout: float) -> str | None:
        """The address the readiness line named; None when the process ended or
        `timeout` passed first."""
        if not self._ready.wait(timeout) or not self._found:
            return None
        return self._found[0]

    def text(self) -> str:
        """The kept lines, for an error message."""
        return "\n".join(self.tail) or "(no output)"

    def settle(self, timeout: float = 1.0) -> None:
        """Wait briefly for the reader to reach the end of a process that has exited, so
        a report quotes its last words."""
        if self._thread is not None:
            self._thread.join(timeout=timeout)

    def close(self) -> None:
        """Stop waiting for the reader and close the copy (idempotent)."""
        if self._thread is not None:
            self._thread.join(timeout=2.0)
            self._thread = None
        if self._copy is not None:
            with contextlib.suppress(OSError):  # a full disk: `problem` says so already
                self._copy.close()
            self._copy = None
