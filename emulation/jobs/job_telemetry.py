"""How does a run on the fabric get its per-job 10 ms telemetry?

`RunTelemetry` is started before the replicas and stopped after them:

1. it installs the job-class entries of the jobs about to run
   (`controlplane.job_classes`: a job is known by its workers' listening
   sockets), after deleting whatever job-class entries an earlier run left;
2. it collects the switch's samples (`controlplane.job_samples.SampleCollector`:
   the gNMI STREAM of the software target, P4Runtime reads of the job
   counters on bmv2 or Tofino);
3. on stop, it removes its entries and turns the samples into the rows of
   `telemetry.csv` and `queues.csv` (`telemetry_rows`).

A failure to install or collect is reported in `error`, never raised: the
run goes on without telemetry.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from controlplane.entries import Update, UpdateType
from controlplane.job_classes import (
    JobSockets,
    assign_job_classes,
    class_names,
    job_class_entries,
)
from controlplane.job_samples import SampleCollector
from controlplane.p4names import JOB_BY_DST_TABLE, JOB_BY_SRC_TABLE
from emulation.softswitch.harness_key import harness_metadata

from .launch import Placed
from .telemetry_rows import QueueRow, TelemetryRow, link_names, series_rows

if TYPE_CHECKING:
    from controlplane.session import P4RuntimeSession
    from emulation.fabric.emulated import EmulatedFabric

# (our choice) The election id of the run's job-class writes: above the fabric's
# programming session (0, 1), which is closed by then, so a run's writes win.
ELECTION_ID = (0, 2)


def job_sockets(placed: Sequence[Placed]) -> list[JobSockets]:
    """Each job's workers' listening sockets, in the order the jobs were placed."""
    out: dict[str, JobSockets] = {}
    for p in placed:
        if p.spec.job not in out:
            peers = tuple((a.host, a.port) for a in p.spec.peers)
            out[p.spec.job] = JobSockets(p.spec.job, peers)
    return list(out.values())


def clear_job_classes(session: P4RuntimeSession) -> None:
    """Delete every job-class entry the switch holds."""
    held = [e for t in (JOB_BY_DST_TABLE, JOB_BY_SRC_TABLE) for e in session.read_table(t)]
    if held:
        session.write([Update(UpdateType.DELETE, e) for e in held])


@dataclass
class Series:
    """What `RunTelemetry.stop` returns: the rows and how they were measured."""

    rows: list[TelemetryRow] = field(default_factory=list)
    queues: list[QueueRow] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)


class RunTelemetry:
    """The job classes and the sample collection of one run (see the module docstring)."""

    def __init__(self, fabric: EmulatedFabric, placed: Sequence[Placed], gnmi: bool) -> None:
        self.fabric = fabric
        self.jobs = job_sockets(placed)
        self.gnmi = gnmi
        self.names = class_names(assign_job_classes([j.job for j in self.jobs]))
        self.error: str | None = None
        self._collector: SampleCollector | None = None

    def start(self) -> RunTelemetry:
        try:
            with self.fabric.session(ELECTION_ID) as session:
                clear_job_classes(session)
                session.write([Update(UpdateType.INSERT, e) for e in job_class_entries(self.jobs)])
            assert self.fabric.grpc_address is not None
            self._collector = SampleCollector(
                self.fabric.grpc_address,
                self.fabric.options.device_id,
                self.fabric.chip.ports(),
                gnmi=self.gnmi,
                timeout_s=self.fabric.timeout,
                metadata=harness_metadata(),
            ).start()
        except Exception as err:  # the run goes on without telemetry
            self.error = f"per-job telemetry: {err}"
        return self

    def stop(self) -> Series:
        """End the collection, remove the job classes, return the rows."""
        if self._collector is None:
            return Series(info={"error": self.error})
        collected = self._collector.stop()
        if self.fabric.switch_failure() is None:  # a dead switch would only time out
            with contextlib.suppress(Exception), self.fabric.session(ELECTION_ID) as session:
                clear_job_classes(session)
        rows, queues = series_rows(collected.samples, link_names(self.fabric.chip), self.names)
        intervals = [s.interval_s for s in collected.samples]
        info = {
            "source": collected.source,
            "samples": len(collected.samples),
            "lost_samples": collected.lost,
            "rate_hz": round(collected.rate_hz(), 2),
            "interval_s": round(sum(intervals) / len(intervals), 6) if intervals else None,
            "error": collected.error or self.error,
            "why_counters": collected.why_counters,
        }
        return Series(rows, queues, info)
