"""How does Mininet's `iperf` measure a pair of hosts on the fabric, bounded in time and
touching nothing but the two processes it starts?

Mininet's own `Mininet.iperf` runs `killall -9 iperf` on the whole machine
(other users' iperfs die with it), waits for its server through telnet, and
reads the server's shell until a pattern iperf 2.1 does not print as it
expects: it hung for ever here. `run_iperf` starts the server and the
client as processes of their own in the two hosts' namespaces
(`Node.popen`), bounds every wait, and ends the server by its pid. It
returns what Mininet's returns ([server rate, client rate], with the UDP
bandwidth first for UDP), so `net.iperf(...)` and the CLI's `iperf` and
`iperfudp` keep their meaning.
"""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
from typing import IO, Any

# (our choice) How long the server may take to listen, and to report once the client is done.
SERVER_START_S = 5.0
SERVER_REPORT_S = 3.0
# (our choice) What the client may take beyond its `-t` seconds (connection, final report).
CLIENT_GRACE_S = 10.0

LISTENING = re.compile(r"Server listening on (TCP|UDP) port")
RATE = re.compile(r"([\d.]+\s+\w+/sec)")


class _Lines:
    """A process's output, read on a thread, so a wait for a line has a deadline."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._drain, args=(stream,), daemon=True)
        self._thread.start()

    def _drain(self, stream: IO[str]) -> None:
        for line in stream:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()

    def wait_for(self, pattern: re.Pattern[str], timeout: float) -> bool:
        """Whether a line matching `pattern` came within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not any(pattern.search(line) for line in self.lines):
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    return any(pattern.search(line) for line in self.lines)
                self._changed.wait(min(left, 0.1))
        return True

    def text(self) -> str:
        self._thread.join(timeout=1.0)
        with self._changed:
            return "".join(self.lines)


def last_rate(output: str) -> str:
    """The last 'N unit/sec' iperf printed ('' if none), as Mininet's `_parseIperf`.

    >>> last_rate("[  1] 0.0-5.0 sec  5.9 MBytes  9.9 Mbits/sec\\n")
    '9.9 Mbits/sec'
    """
    found = RATE.findall(output)
    return found[-1] if found else ""


def stop_process(process: subprocess.Popen[str], wait_s: float = 2.0) -> None:
    """SIGINT (iperf prints its report), then SIGKILL: by pid, this process only."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(wait_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(wait_s)


def run_iperf(
    client: Any,
    server: Any,
    l4_type: str = "TCP",
    udp_bw: str = "10M",
    fmt: str | None = None,
    seconds: float = 5,
    port: int = 5001,
) -> list[str]:
    """iperf from `client` to `server` (Mininet hosts) for `seconds`: [server rate,
    client rate] (UDP: [udp_bw, server rate, client rate]). RuntimeError, naming the
    host and what iperf said, when a side does not start or finish in time."""
    if l4_type not in ("TCP", "UDP"):
        raise ValueError(f"l4_type must be TCP or UDP, not {l4_type!r}")
    args = ["iperf", "-p", str(port)] + (["-u"] if l4_type == "UDP" else [])
    args += ["-f", fmt] if fmt else []
    streams: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
    serving = server.popen([*args, "-s"], text=True, **streams)
    try:
        server_out = _Lines(serving.stdout)
        if not server_out.wait_for(LISTENING, SERVER_START_S):
            raise RuntimeError(
                f"iperf server on {server.name} did not start: {server_out.text().strip()!r}"
            )
        client_args = [*args, "-t", f"{seconds:g}", "-c", server.IP()]
        client_args += ["-b", udp_bw] if l4_type == "UDP" else []
        sending = client.popen(client_args, text=True, **streams)
        try:
            client_text, _ = sending.communicate(timeout=seconds + CLIENT_GRACE_S)
        except subprocess.TimeoutExpired:
            raise RuntimeError(
                f"iperf client on {client.name} did not finish within "
                f"{seconds + CLIENT_GRACE_S:g} s"
            ) from None
        finally:
            stop_process(sending)
        server_out.wait_for(RATE, SERVER_REPORT_S)
    finally:
        stop_process(serving)
    result = [last_rate(server_out.text()), last_rate(client_text)]
    return [udp_bw, *result] if l4_type == "UDP" else result
