"""A command run on a pseudo-terminal, driven as a user at a keyboard would.

Ctrl-C typed at a terminal is a SIGINT to the terminal's foreground
process group, which a pipe cannot give: `PtySession` starts the command as
the leader of a new session whose controlling terminal is a pty, so writing
b"\\x03" to it is a real Ctrl-C. Only the standard library (`pty`, `os`).
"""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import time
from collections.abc import Sequence


class PtySession:
    """`argv` on a pty: `expect` a pattern in what it prints, `send` keys, `close`."""

    def __init__(self, argv: Sequence[str], cwd: str | None = None) -> None:
        pid, fd = pty.fork()
        if pid == 0:  # the child: a session leader whose controlling tty is the pty
            try:
                if cwd is not None:
                    os.chdir(cwd)
                os.execv(argv[0], list(argv))
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        self.output = ""  # everything printed so far
        self.seen = 0  # where the next `expect` starts looking
        self.returncode: int | None = None

    def _read(self, timeout: float) -> bool:
        """Read what is there within `timeout`; False once the pty is closed."""
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: the other side is closed
            return False
        if not data:
            return False
        self.output += data.decode(errors="replace").replace("\r\n", "\n")
        return True

    def expect(self, pattern: str, timeout: float) -> re.Match[str]:
        """The first match of `pattern` after the previous match; AssertionError with
        what was printed if it does not come within `timeout` seconds."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            match = regex.search(self.output, self.seen)
            if match:
                self.seen = match.end()
                return match
            left = deadline - time.monotonic()
            open_ = left > 0 and self._read(min(left, 0.2))
            if not open_ and not regex.search(self.output, self.seen):
                raise AssertionError(
                    f"no {pattern!r} within {timeout:g} s; printed:\n{self.output[-4000:]}"
                )

    def send(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float) -> int:
        """The exit status (negative: a signal) once the command ends, reading its output."""
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"still running after {timeout:g} s:\n{self.output[-4000:]}")
            self._read(0.1)
        while self._read(0.05):
            if not select.select([self.fd], [], [], 0)[0]:
                break
        assert self.returncode is not None
        return self.returncode

    def close(self) -> None:
        """End the command if it still runs (SIGTERM, then SIGKILL), close the pty."""
        if self.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.wait(30.0)
            except AssertionError:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
        os.close(self.fd)
