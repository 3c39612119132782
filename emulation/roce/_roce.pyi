# Types of the compiled DCQCN and go-back-N logic (_roce.c); see dcqcn.py and psn.py.
from collections.abc import Sequence

def dcqcn_replay(
    settings: tuple[float | int | bool, ...], events: Sequence[tuple[float, int, float]], /
) -> list[tuple[float, float, float, int, int, int, bool, bool]]: ...
def np_replay(min_interval: float, events: Sequence[tuple[float, bool]], /) -> list[bool]: ...
def gbn_rx_replay(
    expected: int, events: Sequence[tuple[int, bool]], /
) -> list[tuple[bool, int, int]]: ...
def gbn_tx_replay(
    first_psn: int, packets: int, rto: float, events: Sequence[tuple[int, float, int]], /
) -> list[tuple[int, int, int, int, int]]: ...
def sender(
    fd: int,
    settings: tuple[float | int | bool, ...],
    qpn: int,
    first_psn: int,
    packets: int,
    payload: int,
    overhead: int,
    rto: float,
    ack_every: int,
    timeout_s: float,
    /,
) -> tuple[int, int, int, int, int, int, int, int, float, float]: ...
def receiver(
    fd: int,
    cnp_interval: float,
    qpn: int,
    first_psn: int,
    packets: int,
    linger_s: float,
    timeout_s: float,
    drop: Sequence[int],
    /,
) -> tuple[int, int, int, int, int, int, int, int]: ...

RP_STATE_BYTES: int

def transfer(
    settings: tuple[float | int | bool, ...],
    payload: int,
    overhead: int,
    rto: float,
    ack_every: int,
    timeout_s: float,
    cnp_interval: float,
    recv_fd: int,
    senders: Sequence[tuple[int, int, int, bytearray, Sequence[int]]],
    receivers: Sequence[tuple[int, int, Sequence[int]]],
    header: int,
    relay: bool,
    pfc: tuple[int, int, float, float] | None,
    mltcp: tuple[float, float, float, float] | None = None,
    /,
) -> tuple[
    int,
    int,
    int,
    int,
    int,
    int,
    float,
    float,
    list[tuple[int, int, int, int, int, int, float, float]],
    list[tuple[int, int, int, int, int]],
]: ...
def pause_replay(frame: bytes, priority: int, link_bps: float, /) -> tuple[int, float] | None: ...
