"""How long does an 802.1Qbb pause frame stop a host's RoCE sender, and on which class?

IEEE 802.1Qbb (priority-based flow control): a MAC Control frame (ethertype
0x8808, opcode 0x0101) carries a class-enable vector and eight pause times in
quanta of 512 bit times at the link's rate; a time of 0 (XON) resumes the class
at once. A host's NIC stops sending on a paused priority; the kernel of a veth
in a namespace ignores these frames, so the RoCE sender reads them itself
(`_roce.c`, `read_pauses`, the C copy of these rules) from an AF_PACKET socket.

Scaling: the emulation runs every link at S x its rate with time at wall
speed, and the switch sends its pauses for quanta at the scaled port rate
(`softswitch.traffic_manager`, `pause_seconds`); the host counts them at the
same scaled rate, so a pause holds as many bytes as on the testbed and lasts
1/S times longer (65535 quanta: 0.67 ms at 50 Gbit/s, 0.67 s at 50 Mbit/s).

Which traffic rides the paused class: RoCE data is sent with DSCP
`dscp_for(priority)` (priority x 8 + 2: 26 for priority 3, ConnectX's default
RoCE DSCP, and priority = DSCP >> 3 as in the default DSCP-to-priority trust
map), the priority being the switch's `TmConfig.pfc.priority`: one setting for
both sides. TCP keeps DSCP 0 and ignores pauses: a lossy class. Pure.
"""

from __future__ import annotations

import struct

PAUSE_QUANTUM_BITS = 512
ETHERTYPE_MAC_CONTROL = 0x8808
PFC_OPCODE = 0x0101
_PFC = struct.Struct("!6s6sHHH8H")
ECT0 = 0b10
# (our choice) CNPs and ACKs leave on DSCP 48 (ConnectX's default `cnp_dscp`), off the
# paused class, and ECN-capable: a RoCE run maps DSCP 48 to a strict-priority class above
# the data's (`emulation.jobs.roce_classes`), as a NIC's CNPs ride one, and a switch
# without that entry, one queue per port, would WRED-drop a not-ECN-capable CNP where
# it marks data; a CE mark on a CNP or an ACK is ignored.
CNP_DSCP = 48


def reply_tos() -> int:
    """The IPv4 TOS byte of CNPs and ACKs.

    >>> hex(reply_tos())
    '0xc2'
    """
    return CNP_DSCP << 2 | ECT0


def pause_seconds(quanta: int, link_bps: float) -> float:
    """How long `quanta` pause a link of `link_bps`: quanta x 512 bit times.

    >>> pause_seconds(65535, 50e9)  # the switch's default quanta at 50 Gbit/s
    0.0006710784
    >>> pause_seconds(65535, 50e6)  # the same at S = 0.001
    0.6710784
    >>> pause_seconds(0, 50e6)  # XON
    0.0
    """
    if quanta < 0 or quanta > 0xFFFF or link_bps <= 0:
        raise ValueError(f"quanta {quanta} must be 0..65535 and link_bps {link_bps} > 0")
    return quanta * PAUSE_QUANTUM_BITS / link_bps


def pause_quanta(frame: bytes, priority: int) -> int | None:
    """The quanta a frame gives `priority`: None when it is no PFC frame or does not
    name that class (its bit in the class-enable vector clear)."""
    if len(frame) < _PFC.size:
        return None
    _dst, _src, ethertype, opcode, enabled, *times = _PFC.unpack_from(frame)
    if ethertype != ETHERTYPE_MAC_CONTROL or opcode != PFC_OPCODE or not enabled >> priority & 1:
        return None
    return int(times[priority])


def dscp_for(priority: int) -> int:
    """The DSCP RoCE data carries to ride `priority` (priority = DSCP >> 3).

    >>> dscp_for(3)
    26
    """
    if not 0 <= priority <= 7:
        raise ValueError(f"priority {priority} must be 0..7")
    return priority * 8 + 2


def data_tos(priority: int) -> int:
    """The IPv4 TOS byte of RoCE data: the class's DSCP and ECT(0).

    >>> hex(data_tos(3))
    '0x6a'
    """
    return dscp_for(priority) << 2 | ECT0
