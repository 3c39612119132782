# Types of the compiled relay loop (_relay.c); see ring.Ring.relay.
from collections.abc import Sequence

def relay(
    left_fd: int,
    right_fd: int,
    send_at: Sequence[int],
    recv_at: Sequence[int],
    header: int,
    nap_bytes: int,
    nap_s: float,
    timeout_s: float,
    scratch: memoryview | bytearray,
    zeros: bytearray,
    /,
) -> tuple[int, int, int, int, int]: ...
