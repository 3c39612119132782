"""The job model: what training jobs send, when they arrive, and how links share it.

Everything above (Cassini, the schedulers, the simulator) reads jobs through
this package. One question per module:

- types: the data that crosses the scheduler's boundary (`Phase`, `Profile`, `Job`, `Schedule`)
- profiles: communication profiles from model data (`build_profile`, `load_models`)
- up_slack: how long a measured Up phase runs at worst, and what is planned with
- traces: which jobs arrive when (the paper's workloads, as files)
- traffic: which server pairs a job's traffic runs between, over which links
- max_min: how links share capacity among flows (max-min fairness)
- sharing_model: what n jobs sending through one link get, measured on the fabric
"""
