"""How does a network policy's plan (Crux, EchelonFlow) reach the switch's priority queues?

At each run of a schedule (each scheduler decision's segment) the supervisor
asks the policy (`scheduler.policies`) for its `NetworkPlan` over the placed
jobs: a queue class per flow, a flow being a job's (src server, dst server)
pair. The switch picks a packet's class in ingress by
`CassiniIngress.queue_class_by_flow`, an exact match on the whole 5-tuple
(`controlplane.queue_classes`).

(our choice) The 5-tuple includes the connecting side's ephemeral port, which
the kernel picks at connect time, so no entry can be written before the
replicas connect. The supervisor reads each server's established TCP
connections (the kernel's table as a replica process sees it,
`/proc/<pid>/net/tcp`: no process started per look) while the replicas
connect and installs, per connection
toward a worker's listening socket, two entries: the data direction (src
ephemeral -> dst listening) and its reverse (the ACKs), both in the flow's
class. Until a connection is seen its bytes ride class 0 (the connect and the
start barrier). Classes are not carried in DSCP: that would need the replicas
to mark their sockets, and RoCE's DSCP already selects its PFC class.

RoCE is refused (`emulation.cli.fabric_run_cmds.fabric_policy`, `RunSettings`):
its data must stay in the PFC class the switch and hosts agree on, which a
per-flow class would move.

The flow from a connection: its destination socket names the job and the
destination worker's server; its source address names the source server.

>>> workers = [WorkerSocket("a", "s01", "10.0.0.1", 47000),
...            WorkerSocket("a", "s03", "10.0.0.3", 47001)]
>>> seen = [Flow("10.0.0.1", "10.0.0.3", "tcp", 40000, 47001)]
>>> sorted((f.src_port, f.dst_port, c) for f, c in
...        connection_classes({("a", "s01", "s03"): 7}, workers, seen).items())
[(40000, 47001, 7), (47001, 40000, 7)]
"""

from __future__ import annotations

import contextlib
import ipaddress
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from controlplane.entries import Update, UpdateType
from controlplane.p4names import QUEUE_CLASS_BY_FLOW_TABLE
from controlplane.queue_classes import Flow, queue_class_entries
from scheduler.policies import NetworkPlan, PolicyInput, make_policy

from .launch import JobPlan, Placed

if TYPE_CHECKING:
    from controlplane.session import P4RuntimeSession
    from emulation.fabric.emulated import EmulatedFabric
    from topologies.model import Topology

FlowKey = tuple[str, str, str]  # (job, src server, dst server), as `NetworkPlan.classes`
# (our choice) An election id above the run's job-class writes (0, 2): both are short
# sessions opened per write, so the ids only order them.
ELECTION_ID = (0, 3)


@dataclass(frozen=True)
class WorkerSocket:
    """One worker as the network sees it: its job, server and listening socket."""

    job: str
    server: str
    address: str
    port: int


def worker_sockets(placed: Sequence[Placed]) -> tuple[WorkerSocket, ...]:
    """Every replica's listening socket, with its job and server."""
    return tuple(
        WorkerSocket(p.spec.job, p.server, me.host, me.port)
        for p in placed
        for me in (p.spec.peers[p.spec.worker],)
    )


def plan_for(policy: str, topology: Topology, jobs: Sequence[JobPlan]) -> NetworkPlan:
    """The policy's plan for `jobs` as placed (every job on its own profile)."""
    inp = PolicyInput.of(
        topology, {j.name: j.servers for j in jobs}, {j.name: j.profile for j in jobs}
    )
    return make_policy(policy).plan(inp)


def parse_proc_tcp(text: str) -> list[Flow]:
    """Established IPv4 TCP connections from /proc/net/tcp (addresses little-endian hex).

    >>> line = "0: 0100000A:9C40 0300000A:B799 01 0:0 0:0 0 0 0 1 0"
    >>> parse_proc_tcp("header\\n" + line)
    [Flow(src='10.0.0.1', dst='10.0.0.3', protocol='tcp', src_port=40000, dst_port=47001)]
    """
    out = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 4 or fields[3] != "01":  # TCP_ESTABLISHED
            continue
        (src, src_port), (dst, dst_port) = _proc_socket(fields[1]), _proc_socket(fields[2])
        out.append(Flow(src, dst, "tcp", src_port, dst_port))
    return out


def _proc_socket(text: str) -> tuple[str, int]:
    address, _, port = text.partition(":")
    return str(ipaddress.IPv4Address(int(address, 16).to_bytes(4, "little"))), int(port, 16)


def connection_classes(
    classes: Mapping[FlowKey, int], workers: Sequence[WorkerSocket], seen: Iterable[Flow]
) -> dict[Flow, int]:
    """The queue class of every seen connection between two servers of one job, both
    directions; a connection seen from either end counts once. A planned flow absent
    from `classes` is in class 0 (an entry all the same: the record says so)."""
    listening = {(w.address, w.port): w for w in workers}
    server_of = {w.address: w.server for w in workers}
    out: dict[Flow, int] = {}
    for flow in seen:
        if (flow.dst, flow.dst_port) in listening:
            data = flow
        elif (flow.src, flow.src_port) in listening:
            data = _reverse(flow)
        else:
            continue
        dst = listening[(data.dst, data.dst_port)]
        src = server_of.get(data.src)
        if src is None or src == dst.server:
            continue  # not a worker's host, or inside one server (never crosses the switch)
        queue_class = classes.get((dst.job, src, dst.server), 0)
        out[data] = queue_class
        out[_reverse(data)] = queue_class
    return out


def covered(classes: Mapping[Flow, int], workers: Sequence[WorkerSocket]) -> set[FlowKey]:
    """The (job, src server, dst server) keys the connections found so far carry."""
    listening = {(w.address, w.port): w for w in workers}
    server_of = {w.address: w.server for w in workers}
    keys = set()
    for flow in classes:
        dst = listening.get((flow.dst, flow.dst_port))
        if dst is not None:
            keys.add((dst.job, server_of[flow.src], dst.server))
    return keys


def expected_keys(placed_jobs: Sequence[JobPlan]) -> set[FlowKey]:
    """The cross-server flows the jobs send (`scheduler.workloads.traffic.job_flows`)."""
    from scheduler.workloads.traffic import job_flows

    return {
        (j.name, a, b) for j in placed_jobs for a, b in job_flows(j.servers, j.profile.parallelism)
    }


def clear_flow_classes(session: P4RuntimeSession) -> None:
    """Delete every queue_class_by_flow entry the switch holds."""
    held = session.read_table(QUEUE_CLASS_BY_FLOW_TABLE)
    if held:
        session.write([Update(UpdateType.DELETE, e) for e in held])


@dataclass
class PolicyClasses:
    """One run's flow classes: planned at start, installed as connections appear
    (`poll`), removed at `stop`; `record()` is summary.json's `network_policy`."""

    fabric: EmulatedFabric
    jobs: Sequence[JobPlan]
    placed: Sequence[Placed]
    policy: str
    plan: NetworkPlan | None = None
    installed: dict[Flow, int] = field(default_factory=dict)
    error: str | None = None
    workers: tuple[WorkerSocket, ...] = ()
    installed_at_ms: float | None = None  # epoch ms of the last write (bytes before: class 0)
    _session: P4RuntimeSession | None = field(default=None, repr=False)
    expected: set[FlowKey] = field(default_factory=set)

    def start(self) -> PolicyClasses:
        self.workers = worker_sockets(self.placed)
        self.expected = expected_keys(self.jobs)
        try:
            self.plan = plan_for(self.policy, self.fabric.topo, self.jobs)
            # (our choice) one session for the run: a connect per write came too late
            # for the replicas' first iterations; `stop` closes it
            self._session = self.fabric.session(ELECTION_ID)
            clear_flow_classes(self._session)
        except Exception as err:  # the run goes on in class 0, and says so
            self.error = f"network policy: {err}"
        return self

    @property
    def complete(self) -> bool:
        return self.error is not None or covered(self.installed, self.workers) >= self.expected

    def poll(self, pids: Mapping[str, int]) -> None:
        """Read the servers' connections (through one replica process a server, `pids`:
        server -> pid) and install the classes of the new ones."""
        if self.plan is None or self.complete:
            return
        try:
            seen: list[Flow] = []
            for pid in pids.values():
                with contextlib.suppress(OSError):  # a replica that has ended
                    seen += parse_proc_tcp(Path(f"/proc/{pid}/net/tcp").read_text())
            found = connection_classes(self.plan.classes, self.workers, seen)
            new = {f: c for f, c in found.items() if f not in self.installed}
            if new and self._session is not None:
                entries = queue_class_entries({}, new)
                self._session.write([Update(UpdateType.INSERT, e) for e in entries])
                self.installed.update(new)
                self.installed_at_ms = time.time() * 1e3
        except Exception as err:
            self.error = f"network policy: {err}"

    def stop(self) -> None:
        """Remove the run's entries and close the session (before the job classes'
        own session writes: this one, primary, would refuse it)."""
        session, self._session = self._session, None
        if session is None:
            return
        with contextlib.suppress(Exception):
            if self.fabric.switch_failure() is None:
                clear_flow_classes(session)
        with contextlib.suppress(Exception):
            session.close()

    def record(self) -> dict[str, Any]:
        """The policy, its classes per job flow, and what was installed."""
        plan = self.plan or NetworkPlan(self.policy)
        per_job: dict[str, dict[str, int]] = {}
        for job, a, b in sorted(self.expected):
            per_job.setdefault(job, {})[f"{a}->{b}"] = plan.classes.get((job, a, b), 0)
        missing = sorted(self.expected - covered(self.installed, self.workers))
        return {
            "policy": self.policy,
            "note": plan.note,
            "classes": per_job,
            "entries": len(self.installed),
            "installed_at_ms": self.installed_at_ms,
            "connections": [
                [f"{f.src}:{f.src_port}", f"{f.dst}:{f.dst_port}", c]
                for f, c in sorted(self.installed.items(), key=lambda fc: _flow_order(fc[0]))
            ],
            "missing": ["{}:{}->{}".format(*k) for k in missing],
            "error": self.error,
        }


def _reverse(flow: Flow) -> Flow:
    return Flow(flow.dst, flow.src, flow.protocol, flow.dst_port, flow.src_port)


def _flow_order(flow: Flow) -> tuple[str, int, str, int]:
    return (flow.src, flow.src_port, flow.dst, flow.dst_port)


def run_record(policy: str, segment: dict[str, Any] | None) -> dict[str, Any]:
    """summary.json's `network_policy` of one run: the policy and each segment's record."""
    return {"policy": policy, "segments": [segment] if segment is not None else []}


def merged_record(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The `network_policy` of runs one after another (a scheduler's segments).

    >>> merged_record([run_record("crux", {"entries": 4}), run_record("crux", {"entries": 2})])
    {'policy': 'crux', 'segments': [{'entries': 4}, {'entries': 2}]}
    """
    if not records:
        return {}
    return {
        "policy": records[-1].get("policy", "none"),
        "segments": [s for r in records for s in r.get("segments", [])],
    }
