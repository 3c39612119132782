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
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

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
    "pfc_pauses_sent",
    "pfc_resumes_sent",
)
# The statistics the P4 counters (port_rx, port_tx, ecn_marked, wred_dropped) also count.
P4_COUNTED_STATS = frozenset(
    {"rx_packets", "rx_bytes", "tx_packets", "tx_bytes", "ecn_marked", "wred_dropped"}
)


@dataclass(frozen=True)
class PortCounters:
    """One port's interface counters (gNMI leaf names in the comments) and loss causes."""

    port: int
    name: str  # the interface the port is attached to, or "cable<port>" for a cabled port
    in_unicast_pkts: int  # in-unicast-pkts
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


def port_counters(
    stats: Mapping[str, Mapping[int, int]], names: Mapping[int, str], ports: Iterable[int]
) -> list[PortCounters]:
    """PortCounters of `ports` from per-port statistics ({stat name: {port: value}}).

    >>> stats = {"rx_packets": {1: 10}, "forward_misses": {1: 2}, "rx_overruns": {1: 1}}
    >>> c = port_counters(stats, {1: "veth1"}, [1])[0]
    >>> (c.name, c.in_unicast_pkts, c.in_discards, c.out_discards)
    ('veth1', 10, 3, 0)
    """
    out = []
    for port in sorted(set(ports)):

        def get(stat: str, port: int = port) -> int:
            return int(stats.get(stat, {}).get(port, 0))

        out.append(
            PortCounters(
                port=port,
                name=names.get(port, f"cable{port}"),
                in_unicast_pkts=get("rx_packets"),
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
            )
        )
    return out
