"""How fast may a RoCE flow send, and when does its receiver answer a CE mark with a CNP?

DCQCN (Zhu et al., "Congestion Control for Large-Scale RDMA Deployments",
SIGCOMM 2015, section 3, the NP and RP algorithms), with NVIDIA ConnectX's defaults
where they differ (the firmware settings `mlxconfig` and
/sys/class/net/IF/ecn/roce_rp|roce_np name; values as ConnectX-4 and later
firmware report them and NVIDIA's "DCQCN Parameters" page lists them).

- Notification point (NP, the receiver): a CE-marked packet of a flow is
  answered with a CNP unless one went to that flow less than
  `min_time_between_cnps_s` ago (paper section 3: N = 50 us; NIC: 4 us).
- Reaction point (RP, the sender), rates Rc (current) and Rt (target):
  - on a CNP: Rt <- Rc, Rc <- Rc (1 - alpha/2), alpha <- (1-g) alpha + g;
    the rate-increase timer, byte counter and both stage counters restart;
  - alpha <- (1-g) alpha after each alpha period without a CNP;
  - a rate-increase event each `time_reset_s` (timer, T += 1) and each
    `byte_reset` bytes sent (byte counter, BC += 1): while max(T, BC) <= F,
    fast recovery Rc <- (Rt + Rc)/2; once min(T, BC) > F, hyper increase
    Rt += i R_HAI with i = min(T, BC) - F; otherwise additive increase
    Rt += R_AI; after an increase of Rt, Rc <- (Rt + Rc)/2 as well.
    (our reading of the RP algorithm: the stage that an event's counter reaches
    decides, so the first F events are fast recovery.)

Pure: frozen dataclasses in, new ones out, time passed by the caller as
`now` (seconds, any epoch); timers fire inside `rp_advance` at their exact
deadlines, so a fake clock drives it in tests and the C data path can be
checked against it event by event.

Scaling: the emulation runs rates x S at wall-clock speed; `scaled` gives
the settings for either way to keep the timers (see its docstring).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import Enum
from typing import Literal

Mbps = 1e6
us = 1e-6


@dataclass(frozen=True)
class DcqcnSettings:
    """Every DCQCN parameter, with its source. Rates in bit/s, times in seconds.

    Defaults are ConnectX's (NVIDIA, DCQCN parameters, firmware defaults as
    `mlxconfig -d DEV query` prints them); `paper_settings` gives the paper's.

    >>> s = DcqcnSettings(line_rate_bps=50e9)
    >>> round(s.g * 1024), s.threshold, s.time_reset_s
    (5, 1, 0.0003)
    """

    # The NIC's line rate (the topology's link capacity; rpg_max_rate 0 = line rate).
    line_rate_bps: float
    # rpg_min_rate: the lowest rate a cut may set, 1 Mb/s (paper: not given).
    min_rate_bps: float = 1 * Mbps
    # Alpha's EWMA gain g. ConnectX dce_tcp_g = 1019 in 1/1024 is the weight of the
    # old alpha: g = (1024 - 1019)/1024 = 5/1024 (paper 5.3: g = 1/256).
    g: float = 5 / 1024
    # Alpha's update period K: dce_tcp_rtt = 1 us (paper section 3: K = 55 us). (our choice)
    # The NIC's per-period update is folded into the paper's event form: the increase
    # applies at the CNP, the decay after each K without one; with K = 1 us they differ
    # by less than one period.
    alpha_period_s: float = 1 * us
    # initial_alpha_value = 1023 in 1/1024: alpha at a flow's first CNP (paper: 1).
    initial_alpha: float = 1023 / 1024
    # rpg_gd = 11: the cut is Rc * alpha_fixed / 2^rpg_gd with alpha_fixed = alpha * 1024,
    # i.e. Rc * alpha / 2^(rpg_gd - 10) = Rc * alpha / 2, the paper's cut.
    rpg_gd: int = 11
    # rpg_min_dec_fac = 50 %: a cut keeps at least this share of Rc (paper: no bound).
    min_dec_fac: float = 0.5
    # rate_reduce_monitor_period = 4 us: at most one cut per period per flow; a CNP
    # inside it cuts at its end (paper: every CNP cuts at once; 0 here).
    rate_reduce_monitor_period_s: float = 4 * us
    # rate_to_set_on_first_cnp = 0 (off): otherwise Rc = Rt = this rate on the first CNP.
    rate_on_first_cnp_bps: float = 0.0
    # clamp_tgt_rate = 0: Rt <- Rc on every cut only if set (the paper always does it);
    # clamp_tgt_rate_after_time_inc = 1: Rt <- Rc also when the last increase since the
    # previous cut came from the timer; without either, only after a byte-counter one.
    # A cut with no increase since the previous cut keeps Rt (our reading of NVIDIA's text).
    clamp_tgt_rate: bool = False
    clamp_tgt_rate_after_time_inc: bool = True
    # rpg_time_reset = 300 us: the rate-increase timer (paper 5.3: T = 55 us).
    time_reset_s: float = 300 * us
    # rpg_byte_reset = 32767 B: the byte counter (paper 5.3: B = 10 MB).
    byte_reset: float = 32767
    # rpg_threshold = 1: F, the fast-recovery stages (paper, Table 2: F = 5).
    threshold: int = 1
    # rpg_ai_rate = 5 Mb/s: R_AI (paper 5.3: 40 Mb/s at 40 Gb/s).
    ai_rate_bps: float = 5 * Mbps
    # rpg_hai_rate = 50 Mb/s: R_HAI.
    hai_rate_bps: float = 50 * Mbps
    # min_time_between_cnps = 4 us, per flow, at the NP (paper section 3: N = 50 us). Firmware
    # versions differ: some report 2 us.
    min_time_between_cnps_s: float = 4 * us
    # cnp_dscp = 48, cnp_802p_prio = 6: how a CNP is marked (a high-priority class of its own).
    cnp_dscp: int = 48
    cnp_802p_prio: int = 6

    def __post_init__(self) -> None:
        if not self.line_rate_bps > 0:
            raise ValueError(f"DCQCN line_rate_bps={self.line_rate_bps} must be positive")
        if not 0 < self.min_rate_bps <= self.line_rate_bps:
            raise ValueError(
                f"DCQCN min_rate_bps={self.min_rate_bps} must be in (0, line rate "
                f"{self.line_rate_bps}]"
            )
        if not 0 < self.g <= 1:
            raise ValueError(f"DCQCN g={self.g} must be in (0, 1]")
        if not (self.alpha_period_s > 0 and self.time_reset_s > 0 and self.byte_reset > 0):
            raise ValueError("DCQCN alpha_period_s, time_reset_s and byte_reset must be positive")
        if self.threshold < 0:
            raise ValueError(f"DCQCN threshold={self.threshold} must be >= 0")

    @property
    def rate_decrease_share(self) -> float:
        """The share of alpha a cut takes: 1/2 with rpg_gd = 11."""
        return 2.0 ** (10 - self.rpg_gd)


def paper_settings(line_rate_bps: float) -> DcqcnSettings:
    """The DCQCN paper's parameters (section 3; section 5.3 and Table 2 for the values).

    What the paper leaves open keeps the NIC's value: R_HAI (50 Mb/s, ten
    times the NIC's R_AI as QCN has it; our choice, the paper gives no
    number) and the minimum rate. The paper's RP cuts on every CNP with no
    floor, always sets Rt <- Rc, and starts alpha at 1.
    """
    return DcqcnSettings(
        line_rate_bps=line_rate_bps,
        g=1 / 256,
        alpha_period_s=55 * us,
        initial_alpha=1.0,
        min_dec_fac=0.0,
        rate_reduce_monitor_period_s=0.0,
        clamp_tgt_rate=True,
        time_reset_s=55 * us,
        byte_reset=10 * 2**20,
        threshold=5,
        ai_rate_bps=40 * Mbps,
        min_time_between_cnps_s=50 * us,
    )


def scaled(
    settings: DcqcnSettings, scale: float, keep: Literal["timers", "packets"] = "timers"
) -> DcqcnSettings:
    """The settings for an emulation whose rates are x `scale` while time runs at wall speed.

    Rates (line, minimum, R_AI, R_HAI, rate on first CNP) always scale by S,
    so a trajectory in shares of the line rate keeps its shape.

    - "timers" (default): every period stays as on the NIC and the byte
      counter shrinks to `byte_reset` x S. Preserved: the number of timer,
      byte-counter, alpha and CNP-interval events per second, hence per Up
      phase (whose length the profile fixes in wall time), and the rate as a
      share of the line rate over wall time after a given CNP. Lost: packets
      per period; at S = 0.001 a packet lasts 1000x longer than a 4 us CNP
      interval, so the NP answers nearly every marked packet with a CNP
      (at 50 Gb/s one CNP covers about 16 packets), and the byte counter
      fires several events per packet instead of one per 32 KB.
    - "packets": every period x 1/S, the byte counter as on the NIC.
      Preserved: packets and bytes per timer period, per alpha period and per
      CNP interval, hence CNPs per marked packet. Lost: wall time; recovery
      takes 1/S longer (a 300 us timer becomes 300 ms, longer than most Up
      phases), so a cut lasts through several iterations.

    Default "timers": Cassini's question is whether Up phases overlap in wall
    time, and the profile's phase lengths are wall time; the transport must
    cut and recover within a phase as the testbed's did.

    >>> s = scaled(DcqcnSettings(line_rate_bps=50e9), 0.001)
    >>> s.line_rate_bps, s.ai_rate_bps, s.time_reset_s, round(s.byte_reset, 3)
    (50000000.0, 5000.0, 0.0003, 32.767)
    >>> scaled(DcqcnSettings(line_rate_bps=50e9), 0.001, "packets").time_reset_s
    0.3
    """
    if not 0 < scale <= 1:
        raise ValueError(f"scale {scale} must be in (0, 1]")
    rated = replace(
        settings,
        line_rate_bps=settings.line_rate_bps * scale,
        min_rate_bps=settings.min_rate_bps * scale,
        ai_rate_bps=settings.ai_rate_bps * scale,
        hai_rate_bps=settings.hai_rate_bps * scale,
        rate_on_first_cnp_bps=settings.rate_on_first_cnp_bps * scale,
    )
    if keep == "timers":
        return replace(rated, byte_reset=settings.byte_reset * scale)
    if keep == "packets":
        return replace(
            rated,
            alpha_period_s=settings.alpha_period_s / scale,
            rate_reduce_monitor_period_s=settings.rate_reduce_monitor_period_s / scale,
            time_reset_s=settings.time_reset_s / scale,
            min_time_between_cnps_s=settings.min_time_between_cnps_s / scale,
        )
    raise ValueError(f"keep={keep!r}: choose 'timers' or 'packets'")


# --- notification point -------------------------------------------------------------


@dataclass(frozen=True)
class NpFlow:
    """One flow at its receiver: when its last CNP left, and counts for the reports."""

    last_cnp_at: float | None = None
    marked: int = 0
    cnps: int = 0


def np_on_packet(
    settings: DcqcnSettings, flow: NpFlow, ce: bool, now: float
) -> tuple[NpFlow, bool]:
    """A data packet of `flow` arrived at `now`: (the flow after it, whether to send a CNP).

    >>> s = DcqcnSettings(line_rate_bps=1e9)  # CNP interval 4 us
    >>> f, cnp = np_on_packet(s, NpFlow(), True, 0.0); cnp
    True
    >>> np_on_packet(s, f, True, 3e-6)[1], np_on_packet(s, f, True, 4e-6)[1]
    (False, True)
    """
    if not ce:
        return flow, False
    marked = flow.marked + 1
    if flow.last_cnp_at is not None and now - flow.last_cnp_at < settings.min_time_between_cnps_s:
        return replace(flow, marked=marked), False
    return NpFlow(last_cnp_at=now, marked=marked, cnps=flow.cnps + 1), True


# --- reaction point -----------------------------------------------------------------


class Increase(Enum):
    """What drove the last rate increase since the last cut (for clamp_tgt_rate)."""

    NONE = "none"
    TIMER = "timer"
    BYTES = "bytes"


@dataclass(frozen=True)
class RpState:
    """One flow's sender: rates, alpha, the increase stages and the timers' deadlines.

    `limited` turns true at the first CNP (the NIC creates the flow's rate
    limiter then); before it nothing runs. `timer_at` is None while Rc and Rt
    both sit at line rate: increases would change nothing (our choice: the
    timer stops instead of counting stages no cut will read before resetting them).
    """

    rc: float
    rt: float
    alpha: float
    limited: bool = False
    timer_stage: int = 0
    byte_stage: int = 0
    bytes_counted: float = 0.0
    timer_at: float | None = None
    alpha_at: float | None = None
    last_cut_at: float | None = None
    cut_pending: bool = False
    last_increase: Increase = Increase.NONE
    cuts: int = 0
    cnps: int = 0


def rp_start(settings: DcqcnSettings) -> RpState:
    """A new flow: line rate, no limiter yet."""
    line = settings.line_rate_bps
    return RpState(rc=line, rt=line, alpha=settings.initial_alpha)


def _decay_alpha(settings: DcqcnSettings, st: RpState, until: float) -> RpState:
    """Alpha's decays whose deadlines are at or before `until`, in closed form."""
    if st.alpha_at is None or st.alpha_at > until:
        return st
    n = math.floor((until - st.alpha_at) / settings.alpha_period_s) + 1
    return replace(
        st,
        alpha=st.alpha * (1 - settings.g) ** n,
        alpha_at=st.alpha_at + n * settings.alpha_period_s,
    )


def _cut(settings: DcqcnSettings, st: RpState, now: float) -> RpState:
    """One rate decrease at `now` (paper section 3: Rt <- Rc, Rc <- Rc (1 - alpha/2))."""
    if settings.rate_on_first_cnp_bps > 0 and st.cuts == 0:
        rc = rt = min(settings.rate_on_first_cnp_bps, settings.line_rate_bps)
    else:
        clamp = settings.clamp_tgt_rate or st.last_increase is Increase.BYTES
        if settings.clamp_tgt_rate_after_time_inc and st.last_increase is Increase.TIMER:
            clamp = True
        rt = st.rc if clamp else st.rt
        factor = max(1 - st.alpha * settings.rate_decrease_share, settings.min_dec_fac)
        rc = max(settings.min_rate_bps, st.rc * factor)
    return replace(
        st,
        rc=rc,
        rt=max(rt, rc),
        timer_stage=0,
        byte_stage=0,
        bytes_counted=0.0,
        timer_at=now + settings.time_reset_s,
        last_cut_at=now,
        cut_pending=False,
        last_increase=Increase.NONE,
        cuts=st.cuts + 1,
    )


def _increase(settings: DcqcnSettings, st: RpState, kind: Increase) -> RpState:
    """One rate-increase event; its counter (T or BC) is already advanced."""
    f = settings.threshold
    line = settings.line_rate_bps
    t, bc = st.timer_stage, st.byte_stage
    rt = st.rt
    if max(t, bc) <= f:
        pass  # fast recovery: Rt stays
    elif min(t, bc) > f:
        rt = min(line, rt + (min(t, bc) - f) * settings.hai_rate_bps)  # hyper increase
    else:
        rt = min(line, rt + settings.ai_rate_bps)  # additive increase
    rc = min(line, (rt + st.rc) / 2)
    # (our choice) Once Rc reaches the line rate to within a millionth, it is the line
    # rate: halving the gap would approach it forever, a hardware limiter has finite steps.
    if line - rc <= line * 1e-6:
        rc = line
    timer_at = st.timer_at
    if rc >= line and rt >= line:
        timer_at = None
    return replace(st, rc=rc, rt=rt, last_increase=kind, timer_at=timer_at)


def rp_advance(settings: DcqcnSettings, st: RpState, now: float) -> RpState:
    """The flow at `now`: every timer deadline at or before it fired, in time order."""
    while st.limited:
        pending = (
            st.last_cut_at + settings.rate_reduce_monitor_period_s
            if st.cut_pending and st.last_cut_at is not None
            else None
        )
        deadlines = [d for d in (pending, st.timer_at) if d is not None and d <= now]
        if not deadlines:
            break
        at = min(deadlines)
        st = _decay_alpha(settings, st, at)
        if pending is not None and at == pending:
            st = _cut(settings, st, at)
        else:
            assert st.timer_at is not None
            st = replace(
                st, timer_stage=st.timer_stage + 1, timer_at=st.timer_at + settings.time_reset_s
            )
            st = _increase(settings, st, Increase.TIMER)
    return _decay_alpha(settings, st, now)


def rp_on_cnp(settings: DcqcnSettings, st: RpState, now: float) -> RpState:
    """A CNP for this flow arrived at `now`.

    The cut uses alpha as it stood before this CNP; alpha then takes the
    CNP's increase (the order of the paper's RP algorithm). Within the monitor period after a
    cut, the cut waits for the period's end (ConnectX).

    >>> s = paper_settings(40e9)
    >>> st = rp_on_cnp(s, rp_start(s), 0.0)
    >>> st.rc / 1e9, st.rt / 1e9, st.alpha
    (20.0, 40.0, 1.0)
    """
    st = rp_advance(settings, st, now)
    if not st.limited:
        st = replace(st, limited=True, alpha=settings.initial_alpha)
    period = settings.rate_reduce_monitor_period_s
    if st.last_cut_at is None or now - st.last_cut_at >= period:
        st = _cut(settings, st, now)
    else:
        st = replace(st, cut_pending=True)
    return replace(
        st,
        alpha=(1 - settings.g) * st.alpha + settings.g,
        alpha_at=now + settings.alpha_period_s,
        cnps=st.cnps + 1,
    )


def rp_on_sent(settings: DcqcnSettings, st: RpState, nbytes: int, now: float) -> RpState:
    """`nbytes` left at `now`: the byte counter's increase events (one per `byte_reset`)."""
    st = rp_advance(settings, st, now)
    if not st.limited or st.timer_at is None:
        return st
    counted = st.bytes_counted + nbytes
    while counted >= settings.byte_reset and st.timer_at is not None:
        counted -= settings.byte_reset
        st = replace(st, byte_stage=st.byte_stage + 1)
        st = _increase(settings, st, Increase.BYTES)
    return replace(st, bytes_counted=counted if st.timer_at is not None else 0.0)
