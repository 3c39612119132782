"""Which P4 objects does Python code refer to by name?

The control plane compiles entries for the tables, the software target
implements those tables and fills the counters, and the telemetry reads the
counters back. Each name is written here once, as the P4Info spells it;
`check_p4_names` answers a name the P4Info lacks with the names that exist,
and the tests (and the software switch at start-up) run it against the
shipped P4Info, so a rename in the P4 program fails loudly instead of
silently not forwarding.
"""

from __future__ import annotations

from topologies.errors import UserInputError, did_you_mean

from .p4info import P4InfoIndex

FORWARD_TABLE = "CassiniIngress.logical_forward"
FORWARD_ACTION = "CassiniIngress.set_egress_port"
WRED_TABLE = "CassiniEgress.wred_profile"
WRED_ACTION = "CassiniEgress.set_wred"
# A packet's job class: by its destination socket, then by its source socket.
JOB_BY_DST_TABLE = "CassiniEgress.job_by_dst"
JOB_BY_SRC_TABLE = "CassiniEgress.job_by_src"
JOB_CLASS_ACTION = "CassiniEgress.set_job_class"
# A packet's queue class (strict priority, 7 first): by its 5-tuple, then by its DSCP.
QUEUE_CLASS_TABLE = "CassiniIngress.queue_class"
QUEUE_CLASS_BY_FLOW_TABLE = "CassiniIngress.queue_class_by_flow"
QUEUE_CLASS_ACTION = "CassiniIngress.set_queue_class"
TABLES = (
    FORWARD_TABLE,
    WRED_TABLE,
    JOB_BY_DST_TABLE,
    JOB_BY_SRC_TABLE,
    QUEUE_CLASS_TABLE,
    QUEUE_CLASS_BY_FLOW_TABLE,
)
ACTIONS = (FORWARD_ACTION, WRED_ACTION, JOB_CLASS_ACTION, QUEUE_CLASS_ACTION)

PORT_RX = "CassiniIngress.port_rx"
PORT_TX = "CassiniEgress.port_tx"
ECN_MARKED = "CassiniEgress.ecn_marked"
WRED_DROPPED = "CassiniEgress.wred_dropped"
# Per (egress port, job class), at index port * JOB_CLASSES + class.
JOB_TX = "CassiniEgress.job_tx"
JOB_ECN_MARKED = "CassiniEgress.job_ecn_marked"
PORT_COUNTERS = (PORT_RX, PORT_TX, ECN_MARKED, WRED_DROPPED)
JOB_COUNTERS = (JOB_TX, JOB_ECN_MARKED)
COUNTERS = PORT_COUNTERS + JOB_COUNTERS
# The deepest queue (enq_qdepth) each egress port saw since its reader last reset it.
MAX_QDEPTH = "CassiniEgress.max_qdepth"


def check_p4_names(index: P4InfoIndex) -> None:
    """Raise UserInputError (with a 'did you mean') for a name above the P4Info lacks."""
    for lookup, names in (
        (index.table, TABLES),
        (index.action, ACTIONS),
        (index.counter, COUNTERS),
    ):
        for name in names:
            found = lookup(name).name
            if found != name:  # found by its alias only
                raise UserInputError(f"the P4Info names {name!r} {found!r}")
    registers = [r.preamble.name for r in index.p4info.registers]
    if MAX_QDEPTH not in registers:
        raise UserInputError(did_you_mean(MAX_QDEPTH, registers, "register"))
