"""The host witness's limits: when a replica woke late, and which Up phases are judged slow.

Its own module because both sides use them: the replica (which phases it measures) and
the run's summary (`run_result.host_lateness`).
"""

from __future__ import annotations

# (our choice) A wake-up later than this is late: 5 ms is twenty frame times at
# S = 0.001 (a 1500-byte frame takes 0.24 ms at 50 Mbit/s), 2.5% of a 200 ms
# iteration. 2 ms (eight frame times) was tried: on the 2-core machine the
# shift benchmark's quiet cases (a ResNet50 job alone within 3% of its
# profile) woke later than that in 7-12% of iterations, p99 4.0-4.5 ms.
HOST_LATE_MS = 5.0
# (our choice) An Up phase below this fraction of its pacing rate is slow. 90%
# was tried: the job alone ran a third of its phases below it (median 0.93:
# the ring's phase waits for its slowest worker's start and for the pipeline
# to fill), none below 75%.
SLOW_PACE = 0.75
# (our choice) An Up phase paced shorter than this is not judged: one wake-up just
# under HOST_LATE_MS would alone put it below SLOW_PACE (5 ms / (1 - 0.75) = 20 ms).
# Found: a 2-worker GPT-2 pipeline's micro-batch phases (8.4 KB at S = 0.001, about
# 1.3 ms) measured 0.28-2.85 of their pace, and flagged whole runs of every scheduler.
MIN_JUDGED_PHASE_MS = HOST_LATE_MS / (1 - SLOW_PACE)
