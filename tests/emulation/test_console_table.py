"""The lines `cassini emulate` prints after a run, from its summary alone (no fabric)."""

from __future__ import annotations

from typing import Any

from emulation.emulate.report_text import console_table


def _row(**changes: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "mean_iteration_ms": 309.46,
        "p99_iteration_ms": 476.9,
        "sim_mean_iteration_ms": 311.5,
        "ecn_marks": 2914,
        "ecn_marks_shared_links": 2900,
        "host_ce_marks": 2914,
        "trustworthy": True,
        "fidelity": {"reasons": [], "unmeasured": []},
    }
    row.update(changes)
    return row


def test_a_row_per_scheduler_with_its_trust_then_the_speedup() -> None:
    summary = {
        "schedulers": {
            "th+cassini": _row(),
            "themis": _row(
                mean_iteration_ms=333.1,
                host_ce_marks=None,
                trustworthy=False,
                fidelity={"reasons": ["frames late 3.1%", "CPU 1.9 cores"], "unmeasured": []},
            ),
            "random": _row(trustworthy=None, fidelity={"reasons": [], "unmeasured": ["cpu"]}),
        },
        "speedups": {
            "th+cassini": {"base": "themis", "mean": 333.1 / 309.46},
            "never": {"base": "themis", "mean": None},
        },
        "partial": True,
    }
    lines = console_table(summary)
    assert lines[0].split()[:3] == ["scheduler", "mean", "ms"]
    assert lines[1].split() == [
        "th+cassini", "309.5", "476.9", "311.5", "2914", "2900", "2914", "yes",
    ]  # fmt: skip
    assert lines[2].split()[6] == "-"  # no host count
    assert lines[2].endswith("NO: frames late 3.1%; CPU 1.9 cores")
    assert lines[3].endswith("unknown: not measured: cpu")
    assert lines[4] == "th+cassini vs themis: mean iteration time 1.08x"
    assert lines[5].startswith("PARTIAL:")
    assert len(lines) == 6  # a speed-up that was not measured prints nothing
