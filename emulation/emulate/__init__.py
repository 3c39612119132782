"""`cassini emulate`: a trace placed by each scheduler, run as replicas on the fabric, reported.

- `plan`: what each scheduler decides for the trace and what the fluid
  simulator predicts for those decisions (one scheduling code path: the
  simulator's own schedulers, through `scheduler.simulator.decisions`).
- `fidelity`: whether the emulator kept up, and the verdict a report states.
- `report`: the files a run leaves (summary.json, CSVs, PNGs, report.md/html), through
  `report_csv` (the CSVs), `report_figures` (the plots) and `report_text` (report.md/html).
- `segments`: a trace with arrivals as one stretch per arrival decision.
- `results`: one scheduler's run as plain data, and the figures of it.
- `runner`: one fabric, every scheduler in turn, the replicas, the counters.
"""
