"""How much may the gRPC clients of one software switch hold or ask for at once?

Sync gRPC serves each RPC on a thread of one pool, and a streaming RPC keeps
its thread for as long as it is open. So every kind of RPC that can stay open
(StreamChannel, gNMI Subscribe, a Read streaming its results) has a cap of
its own, the pool holds all of them at their caps plus `unary_workers`
more, and Capabilities, Write, Get and the rest always find a free thread.
An RPC past its cap is refused with RESOURCE_EXHAUSTED saying which cap.

Every default is our choice; `ServiceLimits()` is what `cassini switch serve`
runs with, and tests pass smaller ones.

>>> ServiceLimits().workers
84
"""

from __future__ import annotations

from dataclasses import dataclass

from controlplane.p4info import P4InfoIndex

# Arbitrated StreamChannels at once (spec 5.4 lets a target refuse more); one more,
# the spare, is kept only for a client that becomes the primary of its role. A
# stream that has not arbitrated gives its slot to a new stream that needs it.
MAX_STREAMS = 16
# Streams that have not arbitrated yet hold slots of their own (each a thread of
# the pool), so they never take an arbitrated client's; past this many the oldest
# is closed. Twice the arbitrated slots: a client opening more silent streams than
# this at once can again close a controller's stream before it arbitrates.
SILENT_STREAMS = 2 * (MAX_STREAMS + 1)
# A stream that has not sent its first MasterArbitrationUpdate this long after
# opening is closed, so silent streams cannot hold their slots for ever.
FIRST_ARBITRATION_S = 5.0
# Messages waiting to be sent on one stream; a client that lets more pile up
# does not read its stream and is dropped (its RPC cancelled).
OUTBOX_MESSAGES = 256
# gNMI Subscribe RPCs open at once (each holds a thread, POLL ones while idle), and
# how many more are kept for the harness's own client (`gnmi_subscriptions`).
MAX_SUBSCRIPTIONS = 8
HARNESS_SUBSCRIPTIONS = 1
# A POLL subscription with no Poll this long is ended; a STREAM whose response has
# waited this long to be sent (its client does not read) is cancelled.
POLL_IDLE_S = 60.0
STREAM_STALL_S = 10.0
# Read RPCs in progress at once, and how many of them build messages at once:
# building is pure Python, so one builder leaves the interpreter to Writes.
MAX_READS = 8
READ_BUILDERS = 1
# Entities one ReadRequest may return, counted before any is built, is the
# installed pipeline's `read_capacity` unless a test passes a number: one Read
# of every table and every counter then always fits (the Cassini pipeline's:
# 287,296), and a Read asking for the same table many times does not.
# Paths in one gNMI GetRequest or SubscriptionList, and bytes in one response.
MAX_GNMI_PATHS = 1_000
MAX_GNMI_RESPONSE_BYTES = 4 << 20
# Threads for the short RPCs (Capabilities, Write, Get, ...), past all the caps above.
UNARY_WORKERS = 16


@dataclass(frozen=True)
class ServiceLimits:
    """The caps of one switch's P4Runtime and gNMI service (see the module constants)."""

    max_streams: int = MAX_STREAMS
    silent_streams: int = SILENT_STREAMS
    first_arbitration_s: float = FIRST_ARBITRATION_S
    outbox_messages: int = OUTBOX_MESSAGES
    max_subscriptions: int = MAX_SUBSCRIPTIONS
    harness_subscriptions: int = HARNESS_SUBSCRIPTIONS
    poll_idle_s: float = POLL_IDLE_S
    stream_stall_s: float = STREAM_STALL_S
    max_reads: int = MAX_READS
    read_builders: int = READ_BUILDERS
    max_read_entities: int | None = None  # None: the pipeline's read_capacity
    max_gnmi_paths: int = MAX_GNMI_PATHS
    max_gnmi_response_bytes: int = MAX_GNMI_RESPONSE_BYTES
    unary_workers: int = UNARY_WORKERS

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if value is not None and not value > 0:
                raise ValueError(f"service limit {name} must be positive, got {value}")

    @property
    def workers(self) -> int:
        """Threads of the gRPC pool: every long RPC at its cap (streams with the spare)
        and `unary_workers` more."""
        subscriptions = self.max_subscriptions + self.harness_subscriptions
        streams = self.max_streams + 1 + self.silent_streams
        return streams + subscriptions + self.max_reads + self.unary_workers


def read_capacity(p4info: P4InfoIndex) -> int:
    """Entities a Read of every table and every counter of `p4info` returns when its
    tables are full: each table's `size` plus each counter's cells (a table of size 0
    declares none and adds nothing). The software switch serves no other kind.

    >>> from controlplane.p4info import load_p4info
    >>> read_capacity(load_p4info())
    287296
    """
    message = p4info.p4info
    return sum(t.size for t in message.tables) + sum(c.size for c in message.counters)
