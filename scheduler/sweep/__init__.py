"""Sweeps: many simulations over a grid of settings, on a distributed engine.

- `config`: what grid a sweep file names (`load_sweep_config`, `Cell`).
- `cells`: what one cell runs (`run_cell`) and its key (`cell_key`).
- `store`: which cells are done (`DIR/cells/`), and `runs.parquet`.
- `engine`: where cells run (Dask `LocalCluster`, a remote scheduler, inline).
- `aggregate`: the README's seed table from many runs.
- `plots`: CDFs and the ratio against load.
- `progress`: done / total and failures, for people.
- `run`: `run_sweep`, what `cassini sweep` and `benchmarks/seed_sweep.py` call.
"""

from __future__ import annotations

from .config import Cell, SweepConfig, load_sweep_config, parse_seeds, parse_sweep_config
from .driver import SweepResult, run_sweep
from .engine import DaskEngine, InlineEngine, make_engine

__all__ = [
    "Cell",
    "DaskEngine",
    "InlineEngine",
    "SweepConfig",
    "SweepResult",
    "load_sweep_config",
    "make_engine",
    "parse_seeds",
    "parse_sweep_config",
    "run_sweep",
]
