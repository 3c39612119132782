"""The P4Runtime control plane: one question per module.

- p4info: which P4 objects exist (names, ids, widths) and how values are encoded
- p4names: which P4 objects the Python code names (spelled once, checked against the P4Info)
- entries: a table entry / counter sample as a frozen value
- settings: which thresholds to program (WRED, PFC, queues), from one config
- compile: which entries a topology and its chip map need
- fit: whether a topology fits a target (table sizes, ports, limits), before anything is built
- job_classes: which class each job gets and the entries that count per job
- reconcile: what must change on a device (pure diff) and writing it
- protobuf_runtime: whether messages go through the compiled (upb) protobuf
- proto/: the P4Runtime stubs, generated at build time (scripts/gen_protos.py)
- session: talking to one device (arbitration, pipeline, batched writes, reads)
- channels: closing a gRPC channel whole, even when a stop signal interrupts the close
- write_errors: which updates of a failed Write failed, and why, said once
- tls: which certificates a client or the switch presents and trusts
- program: bringing a device to a topology's entries (push pipeline, reconcile)
- gnmi: a device's interface counters (every loss by cause) over gNMI
- telemetry: per-port and per-link ECN/traffic/loss time series from counters
- counter_watch: polling a device's counters into those series (`ecn watch`, the runner)
- job_samples: per-(port, job) counts every 10 ms, from the gNMI STREAM or counter reads
- p4/: the P4 programs (bmv2 and Tofino) and the P4Info, shipped as package data
- tofino / bmv2: what each target needs beyond P4Runtime
- tofino_sram: how many of a Tofino 1's SRAM blocks and stages an exact-match table takes
"""
