"""Measured profiles: each model alone on the fabric, its phases read from the 10 ms samples.

- `phases`: pure: the Up phases of a utilisation series, per iteration, their spread,
  and the agents' grid period from the measured iteration times;
- `measure`: a run's records and samples -> `MeasuredProfile`; `profile_models` runs
  each model alone on a fabric and measures it (`cassini profile`).
"""
