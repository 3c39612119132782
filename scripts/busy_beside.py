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


def _spin() -> None:
    """Keep one core busy until killed (SIGTERM from the parent)."""
    x = 0
    while True:
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF


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
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.busy)]
    for proc in spinners:
        proc.start()
    print(f"busy_beside: {args.busy} busy processes: {[p.pid for p in spinners]}", file=sys.stderr)
    status = 0
    try:
        for run in range(1, args.repeat + 1):
            started = time.monotonic()
            status = subprocess.call(command)
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
        for proc in spinners:
            if proc.pid is not None and proc.is_alive():
                os.kill(proc.pid, signal.SIGTERM)
            proc.join(timeout=5)
    return status


if __name__ == "__main__":
    sys.exit(main())
