# Types of the compiled packet path (_fastpath.c); see fast_pipeline.py.
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

ROW_NAMES: tuple[str, ...]

class Pipeline:
    now: float
    buffered_cells: int
    late_max: float
    wakeup_max: float
    stamp_fallbacks: int
    truncated: int
    transmitted: list[tuple[int, bytes]]
    transmitted_due: list[float]
    control: list[tuple[int, bytes]]
    def __init__(
        self,
        n: int,
        seconds_per_byte: Sequence[float],
        queue_limit: Sequence[int],
        cable_peer: Sequence[int],
        cable_delay: Sequence[float],
        pause_seconds: Sequence[float],
        valid_ports: Iterable[int],
        pause_frames: Mapping[int, bytes],
        resume_frames: Mapping[int, bytes],
        wire_overhead: int,
        cell_bytes: int,
        buffer_cells: int,
        pfc_enabled: bool,
        xoff_cells: int,
        xon_cells: int,
        forward: dict[Any, Any],
        wred: dict[Any, Any],
        random: Callable[[], float],
        counts: Any,
        lateness: Any,
        wakeup: Any = None,
        job_by_dst: dict[int, int] | None = None,
        job_by_src: dict[int, int] | None = None,
        job_counts: Any = None,
        max_depth: Any = None,
        queue_by_dscp: dict[int, int] | None = None,
        queue_by_flow: dict[bytes, int] | None = None,
        class_limit: Sequence[int] | None = None,
        class_wred: Sequence[Any] | None = None,
        class_pfc: Sequence[tuple[bool, int, int]] | None = None,
        class_pause_frames: Mapping[int, bytes] | None = None,
        class_resume_frames: Mapping[int, bytes] | None = None,
        class_counts: Any = None,
    ) -> None: ...
    def receive(self, port: int, frame: bytes, stamp: float) -> None: ...
    def ingress(self, port: int, frame: bytes, now: float) -> None: ...
    def advance(self, now: float) -> None: ...
    def next_event_time(self) -> float | None: ...
    def read_ring(
        self,
        port: int,
        ring: Any,
        next_slot: int,
        slots: int,
        slot_bytes: int,
        limit: int,
        offset: float | None,
        read_time: float,
    ) -> tuple[int, int, int, float, int]: ...
    def send(self, fds: Sequence[int], now: float) -> int: ...
    def queue_cells(self, port: int) -> tuple[int, int]: ...
    def set_sampler(
        self, ring: Any, ports: Sequence[int], slots: int, interval: float, first_due: float
    ) -> None: ...
    def sample(self, loop_time: float, wall_time: float) -> None: ...
    def add_ring(self, port: int, ring: Any, slots: int, slot_bytes: int, next_slot: int) -> None: ...
    def release_rings(self) -> None: ...
    def run(
        self,
        poll_fds: Sequence[int],
        send_fds: Sequence[int],
        offset: float | None,
        until: float,
        busy_until: float,
        granularity: float = 0.0,
    ) -> tuple[int, int]: ...
