"""How does a sweep tell its user where it is? Done / total, and every failure with its cell.

`SweepEvents` is what `run_sweep` calls; `RichProgress` draws a bar on
stderr (rich), `QuietProgress` only lists failures, for non-terminals.
"""

from __future__ import annotations

import sys
from typing import Any, Protocol

from .config import Cell


class SweepEvents(Protocol):
    def started(self, total: int, skipped: int, engine: str, dashboard: str | None) -> None: ...

    def finished(self, cell: Cell, error: BaseException | None) -> None: ...

    def closed(self) -> None: ...


def error_text(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


class QuietProgress:
    """Failures and the engine line on stderr, nothing per cell."""

    def __init__(self) -> None:
        self.done = self.failed = 0

    def started(self, total: int, skipped: int, engine: str, dashboard: str | None) -> None:
        dash = f", dashboard {dashboard}" if dashboard else ""
        print(
            f"{total - skipped} cells to run ({skipped} already done) on {engine}{dash}",
            file=sys.stderr,
        )

    def finished(self, cell: Cell, error: BaseException | None) -> None:
        self.done += 1
        if error is not None:
            self.failed += 1
            print(f"failed: {cell.label()}: {error_text(error)}", file=sys.stderr)

    def closed(self) -> None:
        pass


class RichProgress:
    """A rich bar: cells done / total (skipped ones count as done), failures printed above it."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.console = Console(stderr=True)
        self.bar = Progress(
            TextColumn("[bold]sweep"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[failed]} failed"),
            TimeElapsedColumn(),
            console=self.console,
        )
        self.task: Any = None
        self.failed = 0

    def started(self, total: int, skipped: int, engine: str, dashboard: str | None) -> None:
        dash = f", dashboard {dashboard}" if dashboard else ""
        self.console.print(
            f"{total - skipped} cells to run ({skipped} already done) on {engine}{dash}"
        )
        self.bar.start()
        self.task = self.bar.add_task("sweep", total=total, completed=skipped, failed=0)

    def finished(self, cell: Cell, error: BaseException | None) -> None:
        if error is not None:
            self.failed += 1
            self.console.print(
                f"[red]failed[/red]: {cell.label()}: {error_text(error)}",
                markup=True,
                highlight=False,
            )
        self.bar.update(self.task, advance=1, failed=self.failed)

    def closed(self) -> None:
        self.bar.stop()
