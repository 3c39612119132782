"""Which job class does each job get, and which entries tell the data plane?

The P4 program counts bytes, packets and CE marks per (egress port, job
class) (`CassiniEgress.job_tx`, `job_ecn_marked`, at index port * 16 + class).
A packet's class comes from two tables the control plane fills with the same
entries: `job_by_dst` (the packet's destination address and L4 port) and, on a
miss, `job_by_src` (its source). (our choice) A job is known by its workers'
listening sockets, unique in a run (emulation/jobs/launch.py gives worker i
port 47000 + i) where a host address is not (one server may run replicas of
two jobs): a ring's data flows toward a listening socket and its ACKs come
back from it, and the other end's port is an ephemeral one nobody knows in
advance. See the header comment of p4src/cassini.p4.

Class 0 is traffic of no job (named OTHER); jobs get 1..15 in the order given.
The tables are run-time ones (`program.RUNTIME_TABLES`): a run writes these
entries and removes them at its end; programming the topology leaves them alone.

>>> jobs = [JobSockets("vgg19-0", (("10.0.0.1", 47000), ("10.0.0.2", 47001)))]
>>> [(e.table, dict(e.match), dict(e.params)) for e in job_class_entries(jobs)][:2]
[('CassiniEgress.job_by_dst', {'dst_addr': 167772161, 'dst_port': 47000}, {'job_class': 1}), \
('CassiniEgress.job_by_src', {'src_addr': 167772161, 'src_port': 47000}, {'job_class': 1})]
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from topologies.errors import UserInputError

from .entries import TableEntry
from .p4names import JOB_BY_DST_TABLE, JOB_BY_SRC_TABLE, JOB_CLASS_ACTION

# A 4-bit class (p4src/cassini.p4): 16 classes, 0 for traffic of no job.
JOB_CLASSES = 16
OTHER = "other"


@dataclass(frozen=True)
class JobSockets:
    """One job's workers as the network sees them: (IPv4 address, listening port) each."""

    job: str
    sockets: tuple[tuple[str, int], ...]


def assign_job_classes(jobs: Sequence[str]) -> dict[str, int]:
    """Job name -> class, 1.. in the order given (0 is OTHER).

    >>> assign_job_classes(["a", "b"])
    {'a': 1, 'b': 2}
    """
    if len(set(jobs)) != len(jobs):
        twice = sorted({j for j in jobs if list(jobs).count(j) > 1})
        raise UserInputError(f"job {twice[0]!r} is listed twice")
    if len(jobs) > JOB_CLASSES - 1:
        raise UserInputError(
            f"{len(jobs)} jobs at once: the data plane counts at most {JOB_CLASSES - 1} "
            "(a 4-bit job class, 0 for traffic of no job)"
        )
    if OTHER in jobs:
        raise UserInputError(f"a job may not be named {OTHER!r}: it names traffic of no job")
    return {job: i for i, job in enumerate(jobs, start=1)}


def class_names(classes: dict[str, int]) -> list[str]:
    """Name of each class by its number (OTHER for class 0 and for unused ones).

    >>> class_names({"a": 1})[:3]
    ['other', 'a', 'other']
    """
    names = [OTHER] * JOB_CLASSES
    for job, job_class in classes.items():
        names[job_class] = job
    return names


def job_class_entries(jobs: Sequence[JobSockets]) -> list[TableEntry]:
    """The job_by_dst and job_by_src entries of `jobs` (one per worker socket in each)."""
    classes = assign_job_classes([j.job for j in jobs])
    owner: dict[tuple[int, int], str] = {}
    entries: list[TableEntry] = []
    for job in jobs:
        for address, port in job.sockets:
            addr = _ipv4(job.job, address)
            if not 0 < port < 65536:
                raise UserInputError(f"job {job.job!r}: port {port} is not a TCP/UDP port")
            other = owner.setdefault((addr, port), job.job)
            if other != job.job:
                raise UserInputError(
                    f"jobs {other!r} and {job.job!r} both listen on {address}:{port}"
                )
            params = {"job_class": classes[job.job]}
            entries.append(
                TableEntry(
                    JOB_BY_DST_TABLE, {"dst_addr": addr, "dst_port": port}, JOB_CLASS_ACTION, params
                )
            )
            entries.append(
                TableEntry(
                    JOB_BY_SRC_TABLE, {"src_addr": addr, "src_port": port}, JOB_CLASS_ACTION, params
                )
            )
    return entries


def _ipv4(job: str, address: str) -> int:
    try:
        return int(ipaddress.IPv4Address(address))
    except ValueError:
        raise UserInputError(f"job {job!r}: {address!r} is not an IPv4 address") from None
