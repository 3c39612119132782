#!/usr/bin/env python3
"""Run a command beside N busy processes, to check it does not depend on an idle machine.

CI shares its cores with other work, so the test suite must pass while the
machine is busy. This starts N processes that each spin one core, runs the
command, then ends exactly the processes it started (by pid, also on Ctrl-C)
and exits with the command's status:

    python3 scripts/busy_beside.py --busy 2 -- make test
    python3 scripts/busy_beside.py --busy 2 --repeat 3 -- .venv/bin/python -m pytest -q -x

Each run's wall time and status are printed on stderr. Standard library only,
so it runs before the project's environment exists.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import subprocess
import sys
import time


def _spin(parent: int) -> None:
    """Keep one core busy until killed, or until the parent is gone (a parent killed
    with SIGKILL cannot end its children)."""
    x = 0
    while os.getppid() == parent:
        for _ in range(1_000_000):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF


def _stop(signum: int, frame: object) -> None:
    """SIGTERM and SIGHUP end the run as Ctrl-C does, so the finally below runs."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy", type=int, default=2, help="busy processes (default 2)")
    parser.add_argument("--repeat", type=int, default=1, help="run the command N times")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG ...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give a command after --")
    if args.busy < 0 or args.repeat < 1:
        parser.error("--busy must be >= 0 and --repeat >= 1")
    spinners = [
        multiprocessing.Process(target=_spin, args=(os.getpid(),), daemon=True)
        for _ in range(args.busy)
    ]
    for proc in spinners:
        proc.start()
    signal.signal(signal.SIGTERM, _stop)  # after the forks: a spinner dies of SIGTERM as is
    signal.signal(signal.SIGHUP, _stop)
    print(f"busy_beside: {args.busy} busy processes: {[p.pid for p in spinners]}", file=sys.stderr)
    status = 0
    child: subprocess.Popen[bytes] | None = None
    try:
        for run in range(1, args.repeat + 1):
            started = time.monotonic()
            child = subprocess.Popen(command)
            status = child.wait()
            took = time.monotonic() - started
            print(
                f"busy_beside: run {run}/{args.repeat}: exit {status} in {took / 60:.1f} min "
                f"beside {args.busy} busy processes",
                file=sys.stderr,
            )
            if status != 0:
                break
    except KeyboardInterrupt:
        status = 130
    finally:
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGINT)  # the suite's own Ctrl-C cleanup
            try:
                child.wait(timeout=60)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        for proc in spinners:
            if proc.pid is not None and proc.is_alive():
                os.kill(proc.pid, signal.SIGTERM)
            proc.join(timeout=5)
    return status


if __name__ == "__main__":
    sys.exit(main())
