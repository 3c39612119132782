"""What did each port of the software target receive, send and lose?

Every loss is counted somewhere, per port, by cause: frames the kernel
dropped before the switch read them (receive overruns), frames too short
or with a broken IPv4 header (malformed), frames no forwarding entry
matched (forwarding misses), frames forwarded to a port the switch does
not have, WRED drops of non-ECT frames, and tail drops at the queue limit
or the shared buffer. `PortCounters` folds those causes into the
interface counters switches serve over gNMI
(`/interfaces/interface/state/counters`, as OpenConfig and Stratum name
them) and keeps the causes beside them.

`STAT_NAMES` is the one list of per-port statistics the packet path
publishes (the order of the rows of its shared statistics array).
`QueueCounters` are the same per egress queue (port, queue class), from the
traffic manager's class counters, as gNMI serves them under /qos.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from topologies.port_names import port_name

from .tm_config import QUEUE_CLASSES

# Per-port statistics of the packet path, in the order they are published.
STAT_NAMES: tuple[str, ...] = (
    "rx_packets",  # frames that entered the pipeline (what port_rx counts)
    "rx_bytes",
    "tx_packets",  # frames that left (what port_tx counts)
    "tx_bytes",
    "ecn_marked",  # frames that left CE-marked by this port's WRED
    "wred_dropped",  # non-ECT frames WRED dropped where it would have marked
    "tail_dropped",  # queue limit or shared buffer full
    "forward_misses",  # no logical_forward entry for (ingress_port, dst_mac)
    "to_unknown_port",  # the entry names a port this switch does not have
    "malformed",  # shorter than an Ethernet header, or a broken IPv4 header
    "rx_overruns",  # dropped by the kernel before we read them (PACKET_STATISTICS)
    "send_errors",  # the host socket refused a finished frame (buffer full, link down)
    "pfc_received",  # PFC and 802.3x PAUSE frames consumed by the MAC
    "mac_control_ignored",  # other MAC-control frames consumed by the MAC
    "pfc_pauses_sent",  # PFC pause frames sent to hosts (refreshes included); one per pause on a cable
    "pfc_resumes_sent",  # zero-quanta (XON) frames sent; one per resume on a cable
    "pfc_paused_us",  # time the port's ingress was held paused (XOFF to XON), in us
    "rx_broadcast",  # of rx_packets: sent to ff:ff:ff:ff:ff:ff
    "rx_multicast",  # of rx_packets: sent to another group address
    "port_down",  # 1 once the packet loop found the port's interface gone
)
# The statistics the P4 counters (port_rx, port_tx, ecn_marked, wred_dropped) also count.
P4_COUNTED_STATS = frozenset(
    {"rx_packets", "rx_bytes", "tx_packets", "tx_bytes", "ecn_marked", "wred_dropped"}
)


@dataclass(frozen=True)
class PortCounters:
    """One port's interface counters (gNMI leaf names in the comments) and loss causes."""

    port: int
    name: str  # the port's name for controllers (topologies.port_names), not its Linux interface
    oper_status: str  # oper-status: "DOWN" once the packet loop found the interface gone
    in_unicast_pkts: int  # in-unicast-pkts: neither broadcast nor multicast (OpenConfig)
    in_broadcast_pkts: int  # in-broadcast-pkts
    in_multicast_pkts: int  # in-multicast-pkts
    in_octets: int  # in-octets
    in_discards: int  # in-discards: forwarding misses, unknown egress ports, receive overruns
    in_errors: int  # in-errors: malformed frames
    out_unicast_pkts: int  # out-unicast-pkts
    out_octets: int  # out-octets
    out_discards: int  # out-discards: tail drops and WRED drops
    out_errors: int  # out-errors: send errors toward the host
    tail_dropped: int
    wred_dropped: int
    ecn_marked: int
    forward_misses: int
    to_unknown_port: int
    rx_overruns: int
    malformed: int
    pfc_received: int
    pfc_pauses_sent: int
    pfc_resumes_sent: int
    pfc_paused_us: int


def port_counters(
    stats: Mapping[str, Mapping[int, int]], names: Mapping[int, str], ports: Iterable[int]
) -> list[PortCounters]:
    """PortCounters of `ports` from per-port statistics ({stat name: {port: value}});
    `names` are the ports' names for controllers (`port<N>` where it has none).

    >>> stats = {"rx_packets": {1: 10}, "rx_broadcast": {1: 1}, "forward_misses": {1: 2},
    ...          "rx_overruns": {1: 1}}
    >>> c, d = port_counters(stats, {1: "tor1-eth1"}, [1, 10])
    >>> (c.name, c.in_unicast_pkts, c.in_broadcast_pkts, c.in_discards, c.out_discards)
    ('tor1-eth1', 9, 1, 3, 0)
    >>> d.name
    'port10'
    """
    out = []
    for port in sorted(set(ports)):

        def get(stat: str, port: int = port) -> int:
            return int(stats.get(stat, {}).get(port, 0))

        out.append(
            PortCounters(
                port=port,
                name=port_name(port, names),
                oper_status="DOWN" if get("port_down") else "UP",
                in_unicast_pkts=get("rx_packets") - get("rx_broadcast") - get("rx_multicast"),
                in_broadcast_pkts=get("rx_broadcast"),
                in_multicast_pkts=get("rx_multicast"),
                in_octets=get("rx_bytes"),
                in_discards=get("forward_misses") + get("to_unknown_port") + get("rx_overruns"),
                in_errors=get("malformed"),
                out_unicast_pkts=get("tx_packets"),
                out_octets=get("tx_bytes"),
                out_discards=get("tail_dropped") + get("wred_dropped"),
                out_errors=get("send_errors"),
                tail_dropped=get("tail_dropped"),
                wred_dropped=get("wred_dropped"),
                ecn_marked=get("ecn_marked"),
                forward_misses=get("forward_misses"),
                to_unknown_port=get("to_unknown_port"),
                rx_overruns=get("rx_overruns"),
                malformed=get("malformed"),
                pfc_received=get("pfc_received"),
                pfc_pauses_sent=get("pfc_pauses_sent"),
                pfc_resumes_sent=get("pfc_resumes_sent"),
                pfc_paused_us=get("pfc_paused_us"),
            )
        )
    return out


@dataclass(frozen=True)
class QueueCounters:
    """One egress queue's counters (port, queue class), as gNMI serves them under
    /qos/interfaces/interface[interface-id=NAME]/output/queues/queue[name=CLASS]/state
    (leaf names in the comments; `controlplane.gnmi.QUEUE_LEAVES`)."""

    port: int
    name: str  # the port's name for controllers, as in PortCounters
    queue_class: int  # 0-7, 7 served first (tm_config.QUEUE_CLASSES)
    transmit_pkts: int  # transmit-pkts: frames the class sent
    transmit_octets: int  # transmit-octets
    dropped_pkts: int  # dropped-pkts: WRED drops of non-ECT frames and tail drops
    ecn_marked_pkts: int  # ecn-marked-pkts (ours): frames that left CE-marked by its WRED


def queue_counters(
    class_stats: Mapping[str, Mapping[tuple[int, int], int]],
    names: Mapping[int, str],
    ports: Iterable[int],
) -> list[QueueCounters]:
    """QueueCounters of every queue class of `ports` from the traffic manager's per
    (port, class) counters ({tm_config.CLASS_COUNTERS name: {(port, class): value}}).

    >>> stats = {"sent_packets": {(1, 7): 3}, "sent_bytes": {(1, 7): 300},
    ...          "dropped_packets": {(1, 0): 2}, "marked_packets": {(1, 7): 1}}
    >>> q = queue_counters(stats, {1: "tor1-eth1"}, [1])
    >>> len(q), q[7].name, q[7].transmit_pkts, q[7].transmit_octets, q[7].ecn_marked_pkts
    (8, 'tor1-eth1', 3, 300, 1)
    >>> q[0].dropped_pkts, q[0].transmit_pkts
    (2, 0)
    """
    out = []
    for port in sorted(set(ports)):
        name = port_name(port, names)
        for queue_class in range(QUEUE_CLASSES):

            def get(counter: str, key: tuple[int, int] = (port, queue_class)) -> int:
                return int(class_stats.get(counter, {}).get(key, 0))

            out.append(
                QueueCounters(
                    port=port,
                    name=name,
                    queue_class=queue_class,
                    transmit_pkts=get("sent_packets"),
                    transmit_octets=get("sent_bytes"),
                    dropped_pkts=get("dropped_packets"),
                    ecn_marked_pkts=get("marked_packets"),
                )
            )
    return out


# --- fidelity: did the packet loop keep up? ------------------------------------------
# Switch-wide log2 histograms the packet path publishes beside the per-port
# statistics (issue 16's fidelity monitor reads them): how late each frame was
# handed to its host socket after its scheduled departure (the end of its
# serialisation in the traffic manager), and how late the loop woke up for the
# next event it had slept toward. Bucket 0 holds lateness under 1 us, bucket b
# [2^(b-1), 2^b) us, the last bucket everything from 2^(LATENESS_BUCKETS-2) us
# (65 ms) on.
LATENESS_BUCKETS = 18
FIDELITY_NAMES: tuple[str, ...] = ("departure_lateness", "wakeup_lateness")
# (our choice) "Late" means 1.024 ms or more (a bucket edge): at the default scale
# a full-size frame takes 0.24 ms on a 50 Mbit/s link, so a frame this late has
# lost four frame times, and a queue the wire never had can appear downstream.
LATE_BUCKET = 11  # first bucket at or above the threshold: [1024, 2048) us
LATE_THRESHOLD_S = 1024e-6


def lateness_bucket(seconds: float) -> int:
    """The histogram bucket of a lateness (negative lateness is on time: bucket 0).

    >>> [lateness_bucket(s) for s in (0.0, 0.9e-6, 1e-6, 3e-6, 1.5e-3, 10.0)]
    [0, 0, 1, 2, 11, 17]
    """
    micros = int(seconds * 1e6) if seconds > 0 else 0
    return min(LATENESS_BUCKETS - 1, micros.bit_length())


@dataclass(frozen=True)
class Lateness:
    """Summary of one lateness histogram; quantiles are the upper edge of their bucket."""

    count: int
    p50_s: float
    p99_s: float
    max_s: float
    late: int  # at or above LATE_THRESHOLD_S

    def as_dict(self) -> dict[str, float | int]:
        return {
            "count": self.count,
            "p50_s": self.p50_s,
            "p99_s": self.p99_s,
            "max_s": self.max_s,
            "late": self.late,
            "late_threshold_s": LATE_THRESHOLD_S,
        }


def lateness_summary(histogram: Iterable[int], max_s: float) -> Lateness:
    """Count, p50, p99 (bucket upper edges, capped by the max), max and late count.

    >>> lateness_summary([90, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0], 1.3e-3)
    Lateness(count=100, p50_s=1e-06, p99_s=4e-06, max_s=0.0013, late=1)
    """
    counts = [int(c) for c in histogram]
    total = sum(counts)

    def quantile(q: float) -> float:
        if total == 0:
            return 0.0
        rank, seen = q * total, 0
        for bucket, count in enumerate(counts):
            seen += count
            if seen >= rank:
                return min(max_s, 1e-6 * 2**bucket) if bucket < len(counts) - 1 else max_s
        return max_s

    return Lateness(total, quantile(0.5), quantile(0.99), max_s, sum(counts[LATE_BUCKET:]))
