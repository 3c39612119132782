"""`cassini reproduce`: the paper's claims as scenarios, run in the simulator and the emulation.

- `scenarios`: the registry, one `Scenario` per claim (paper, checks, sizes, choices).
- `workloads`: what a scenario runs, as data (pairs, traces, the solver).
- `pair_plan`: a pair's two schedules, aligned and shifted by Cassini.
- `sim_cells` / `emu_cells`: what one simulator seed / one emulation run measures.
- `grid`: the cells, their keys, where they run (Dask, the `fabric` resource), retries.
- `stats`: mean and 95% t-interval; `verdicts`: the rules; `aggregate`: columns.
- `tables`: reproduction.json, .md and .html; `run`: `reproduce`, what the command calls.
"""
