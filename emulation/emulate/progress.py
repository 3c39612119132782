"""How does a running `cassini emulate` show its progress: a bar on a terminal, lines elsewhere?

The runner reports each scheduler's run through a callback (`Live`); these
are the two callbacks the command line uses. Without a terminal (a log, a
pipe, CI) a line comes when a run (or a segment of it) starts, then one every
`PROGRESS_EVERY_S` of it; on a terminal, rich draws a bar per scheduler.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from emulation.emulate.report import Report
    from emulation.emulate.runner import EmulateSettings, Live

# Without a terminal: a progress line this often (our choice).
PROGRESS_EVERY_S = 5.0


def to_stderr(line: str) -> None:
    """Progress and notes go to stderr, so stdout holds only the result (and `--json`)."""
    print(line, file=sys.stderr, flush=True)


@dataclass
class ProgressLines:
    """Progress without a terminal: a line when a scheduler's run (or a segment of it)
    starts, then one every `every_s` of it, by the run's own elapsed time, so callbacks
    that come a little late or early still print."""

    every_s: float = PROGRESS_EVERY_S
    write: Callable[[str], None] = to_stderr
    # scheduler -> (elapsed_s of its last callback, elapsed_s its next line is due)
    _seen: dict[str, tuple[float, float]] = field(default_factory=dict)

    def __call__(self, live: Live) -> None:
        p = live.progress
        if p is None:
            return
        last, due = self._seen.get(live.scheduler, (math.inf, 0.0))
        restarted = p.elapsed_s < last  # a new segment counts its time from 0
        if not restarted and p.elapsed_s < due:
            self._seen[live.scheduler] = (p.elapsed_s, due)
            return
        self._seen[live.scheduler] = (p.elapsed_s, p.elapsed_s + self.every_s)
        self.write(
            f"[{live.index + 1}/{live.total}] {live.scheduler}: {p.records}/{p.expected} "
            f"iterations, {live.marks_per_s:.0f} ECN marks/s, {p.elapsed_s:.0f} s"
        )


def emulate_with_bar(
    settings: EmulateSettings, out: Path, final: Path
) -> tuple[Report, str | None]:
    """`emulate` with a rich progress bar per scheduler on stderr (a terminal)."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from emulation.emulate.runner import emulate

    with Progress(
        TextColumn("{task.description:12s}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[marks]:>8.0f} marks/s"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        transient=False,
        console=Console(stderr=True),  # where the lines go without a terminal, and the check
    ) as bar:
        tasks = {name: bar.add_task(name, total=None, marks=0.0) for name in settings.schedulers}

        def on_progress(live: Live) -> None:
            p = live.progress
            if p is not None:
                bar.update(
                    tasks[live.scheduler],
                    completed=p.records,
                    total=p.expected,
                    marks=live.marks_per_s,
                )

        return emulate(settings, out, on_progress, say=bar.console.print, final_dir=final)
