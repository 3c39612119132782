"""How much CPU did a process tree, and the whole machine, use over a stretch of time?

Fidelity figures of a run: the software switch must keep its core (its
service and packet loop are one process tree), and a machine whose cores
are busy or stolen by the hypervisor stretches every emulated phase. Read
from /proc; the arithmetic on two readings is pure.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()  # the name (field 2) may hold spaces


def process_tree(root: int) -> list[int]:
    """`root` and its living descendants."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None:
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of the processes (gone ones count 0)."""
    ticks = 0
    for pid in pids:
        fields = _stat_fields(pid)
        if fields is not None:
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class MachineCpu:
    """One reading of /proc/stat's first line, in clock ticks summed over all cores."""

    busy: int
    steal: int
    total: int
    cores: int


def machine_cpu() -> MachineCpu:
    """The machine's CPU counters now."""
    line = Path("/proc/stat").read_text().splitlines()[0].split()
    values = [int(v) for v in line[1:]]
    # user nice system idle iowait irq softirq steal guest guest_nice
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    steal = values[7] if len(values) > 7 else 0
    total = sum(values[:8])
    return MachineCpu(total - idle - steal, steal, total, os.cpu_count() or 1)


def machine_fractions(before: MachineCpu, after: MachineCpu) -> dict[str, float]:
    """Busy and stolen fractions of all cores between two readings.

    >>> machine_fractions(MachineCpu(0, 0, 0, 2), MachineCpu(50, 10, 200, 2))
    {'busy': 0.25, 'steal': 0.05}
    """
    total = after.total - before.total
    if total <= 0:
        return {"busy": 0.0, "steal": 0.0}
    return {
        "busy": round((after.busy - before.busy) / total, 4),
        "steal": round((after.steal - before.steal) / total, 4),
    }
