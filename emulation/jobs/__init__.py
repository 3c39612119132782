"""Job replicas on the emulated fabric: the traffic of training jobs, paced by agents.

- `agent`: when does iteration k start, and when has a job drifted (pure, no clock)?
- `collectives`: ring AllReduce over TCP between a job's workers.
- `records`: what one iteration of one worker records (and how it is written).
- `replica`: the process per worker (`python -m emulation.jobs.replica`).
"""
