"""Job replicas on the emulated fabric: the traffic of training jobs, paced by agents.

- `agent`: when does iteration k start, and when has a job drifted (pure, no clock)?
- `ring_plan`: how many bytes each step of a ring AllReduce moves (pure).
- `header`: the stop and skip wishes each step's header byte carries (pure).
- `ring`: a worker's TCP connections to its job's others, and the ring's cut-through relay.
- `exchange`: one step of any other pattern over those connections.
- `patterns`: who sends how many bytes to whom in each step of an Up phase (pure).
- `transport`: the TCP set-up: cubic, ECN, pacing at the scaled NIC rate.
- `ce_count`: CE-marked segments a worker received, counted in its host.
- `records`: what one iteration of one worker records (and how it is written).
- `replica`: the process per worker (`python -m emulation.jobs.replica`).
- `run_settings`: how one schedule runs (iterations, deadline, drift rule, polling).
- `supervisor`: a schedule's replicas started, watched and stopped on a running fabric.
- `run_result`: what that run measured, per job and in all (pure summaries).
- `job_telemetry`: a run's job classes on the switch and its 10 ms samples collected.
- `telemetry_rows`: telemetry.csv and queues.csv rows, and the overlap metric (pure).
- `run_folder`: the files the run leaves.
"""
