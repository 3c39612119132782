"""Job replicas on the emulated fabric: the traffic of training jobs, paced by agents.

- `agent`: when does iteration k start, and when has a job drifted (pure, no clock)?
- `collectives`: ring AllReduce (and any pattern's steps) over TCP between a job's workers.
- `patterns`: who sends how many bytes to whom in each step of an Up phase (pure).
- `transport`: the TCP set-up: cubic, ECN, pacing at the scaled NIC rate.
- `ce_count`: CE-marked segments a worker received, counted in its host.
- `records`: what one iteration of one worker records (and how it is written).
- `replica`: the process per worker (`python -m emulation.jobs.replica`).
"""
