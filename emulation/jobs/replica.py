"""What does one worker of a training job do on the emulated fabric, iteration by iteration?

`python -m emulation.jobs.replica --job vgg19-0 --model vgg19 --worker 1
--peers 10.0.0.1:47000,10.0.0.2:47000 --iterations 40 --out w1.jsonl`,
started inside the worker's server namespace. It connects to the workers
its job's pattern talks to (`patterns`: the ring for data, tensor and
hybrid parallel jobs; stages and the ring for pipeline ones), agrees with
them on the start (a barrier over the ring), then follows the profile phase
by phase: Down phases sleep, Up phases run the pattern's steps with the
phase's bytes x S, over connections paced at the scaled NIC rate
(`transport`). The agent (`agent`) decides when each iteration starts;
every iteration is written as an `IterationRecord`, with the CE-marked
segments this worker received on its job's flows in it (`ce_count`).

The record carries the replica's own lateness too (the fidelity monitor's
host witness): how much later than asked it woke from each sleep of the
iteration (the agent's slot, each Down phase: `sleep_until`), and for each
Up phase of the ring (the AllReduce's; a pipeline stage waits for other
stages by design, so its phases are not judged) the rate it achieved over
its pacing rate (`pace_fraction`: the least time its sends take at the rates
the kernel paces its connections at, `pacing_ms`, over the time the phase
took). A starved host shows as late wake-ups and as phases below their
pacing rate with nothing in their way.

A lost peer ends the replica with exit code 3 and one line naming the job,
the worker and the peer; its sockets close, so its neighbours fail the same
way within one socket timeout at most: nothing hangs.
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from emulation.roce.mltcp import MltcpSettings
from scheduler.workloads.profiles import build_profile
from scheduler.workloads.types import Phase
from topologies.errors import UserInputError

from .agent import (
    DEFAULT_DRIFT_FRACTION,
    AgentState,
    Pacing,
    apply_skip,
    observe_comm_start,
    parse_drift_threshold,
    plan_start,
)
from .ce_count import CeCounter, interface_with_address
from .exchange import agree, exchange
from .header import Header
from .patterns import (
    PatternStep,
    neighbours,
    pacing_shares,
    phase_plan,
    ring_steps,
    validate_pattern,
)
from .records import IterationRecord, write_record
from .ring import Address, PeerLost, Ring
from .ring_plan import TCP_PAYLOAD_SHARE, phase_bytes
from .roce_links import ROCE_PAYLOAD_SHARE, RoceCounts, RoceLinks
from .transport import (
    CONGESTION_CONTROL,
    PACING_SHARE,
    SO_MAX_PACING_RATE,
    available_congestion_controls,
    ecn_requested,
)
from .witness_limits import MIN_JUDGED_PHASE_MS

EXIT_PEER_LOST = 3
EXIT_USAGE = 2
MODULE = "emulation.jobs.replica"


@dataclass(frozen=True)
class ReplicaSpec:
    """Everything one replica process needs; `argv()` is its command line."""

    job: str
    model: str
    worker: int
    peers: tuple[Address, ...]
    phases: tuple[Phase, ...]
    out: str
    iterations: int = 10
    deadline_ms: float | None = None  # epoch ms; the job stops after the iteration running then
    scale: float = 0.001
    shift_ms: float = 0.0
    period_ms: float | None = None  # None: unpaced
    drift_fraction: float | None = DEFAULT_DRIFT_FRACTION
    timeout_s: float = 10.0
    # epoch ms every job of a run anchors its grid to (shifts are relative to
    # one another only on a shared grid); None: the job's own barrier start
    epoch_ms: float | None = None
    parallelism: str = "data"  # the traffic pattern (`patterns`)
    # the server NIC's unscaled rate: connections are paced at S x this x their
    # share (`transport.pace`); None: not paced
    nic_gbps: float | None = 50.0
    count_ce: bool = True  # count received CE segments per iteration (needs CAP_NET_RAW)
    congestion_control: str = CONGESTION_CONTROL
    transport: str = "tcp"  # "roce": the collectives' bytes as RoCEv2 (`roce_links`)
    pfc_priority: int = 3  # the class RoCE data rides (the switch's TmConfig.pfc.priority)
    honour_pfc: bool = True  # RoCE stops on the switch's pause frames for that class
    mltcp: bool = False  # RoCE: DCQCN's increase grows with the iteration's sent share

    @property
    def iteration_ms(self) -> float:
        return sum(p.duration_ms for p in self.phases)

    @property
    def comm_offset_ms(self) -> float:
        """Where the first Up phase starts within an iteration."""
        offset = 0.0
        for phase in self.phases:
            if phase.gbps > 0:
                return offset
            offset += phase.duration_ms
        return offset

    def argv(self, python: str = sys.executable) -> list[str]:
        """The command line that starts this replica (inside its namespace)."""
        args = [python, "-m", MODULE, "--job", self.job, "--model", self.model]
        args += ["--worker", str(self.worker), "--peers", ",".join(map(str, self.peers))]
        args += ["--phases", format_phases(self.phases), "--out", self.out]
        args += ["--iterations", str(self.iterations), "--scale", repr(self.scale)]
        args += ["--shift-ms", repr(self.shift_ms), "--timeout", repr(self.timeout_s)]
        drift = "off" if self.drift_fraction is None else repr(self.drift_fraction)
        args += ["--drift", drift]
        if self.period_ms is not None:
            args += ["--period-ms", repr(self.period_ms)]
        if self.deadline_ms is not None:
            args += ["--deadline-ms", repr(self.deadline_ms)]
        if self.epoch_ms is not None:
            args += ["--epoch-ms", repr(self.epoch_ms)]
        args += ["--parallelism", self.parallelism]
        args += ["--no-pacing"] if self.nic_gbps is None else ["--nic-gbps", repr(self.nic_gbps)]
        if not self.count_ce:
            args += ["--no-ce-count"]
        args += ["--congestion-control", self.congestion_control]
        args += ["--transport", self.transport, "--pfc-priority", str(self.pfc_priority)]
        if not self.honour_pfc:
            args += ["--ignore-pfc"]
        if self.mltcp:
            args += ["--mltcp"]
        return args


def format_phases(phases: Sequence[Phase]) -> str:
    """'100:0,132.9:50' (duration_ms:gbps per phase), the --phases syntax."""
    return ",".join(f"{p.duration_ms!r}:{p.gbps!r}" for p in phases)


def parse_phases(text: str) -> tuple[Phase, ...]:
    """The inverse of `format_phases`.

    >>> parse_phases("100:0,132.9:50")
    (Phase(duration_ms=100.0, gbps=0.0), Phase(duration_ms=132.9, gbps=50.0))
    """
    phases = []
    for item in text.split(","):
        duration, sep, gbps = item.partition(":")
        try:
            phase = Phase(float(duration), float(gbps))
        except ValueError:
            phase = None
        if not sep or phase is None or phase.duration_ms < 0 or phase.gbps < 0:
            raise UserInputError(
                f"--phases item {item!r} is not DURATION_MS:GBPS like 100:0 or 132.9:50"
            )
        phases.append(phase)
    return tuple(phases)


def parse_args(argv: Sequence[str]) -> ReplicaSpec:
    """A `ReplicaSpec` from the command line (the profile from --phases, else the model's)."""
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__.split("\n")[0])
    parser.add_argument("--job", required=True)
    parser.add_argument("--model", required=True, help="model name (its profile if no --phases)")
    parser.add_argument("--worker", type=int, required=True, help="index in placement order")
    parser.add_argument("--peers", required=True, help="HOST:PORT of every worker, in order")
    parser.add_argument("--phases", help="the profile as DURATION_MS:GBPS,...")
    parser.add_argument(
        "--nic-gbps", type=float, default=50.0, help="NIC rate: the model's profile, pacing x S"
    )
    parser.add_argument("--no-pacing", action="store_true", help="send at memory speed")
    parser.add_argument("--parallelism", help="data, pipeline, tensor, hybrid (default: model's)")
    parser.add_argument("--no-ce-count", action="store_true", help="do not count CE segments")
    parser.add_argument(
        "--congestion-control", default=CONGESTION_CONTROL, help="TCP's (default: %(default)s)"
    )
    parser.add_argument("--transport", default="tcp", help="tcp (default) or roce")
    parser.add_argument("--pfc-priority", type=int, default=3, help="RoCE's PFC class (0-7)")
    parser.add_argument("--ignore-pfc", action="store_true", help="RoCE ignores pause frames")
    parser.add_argument(
        "--mltcp", action="store_true", help="RoCE: MLTCP's iteration-aware DCQCN increase"
    )
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--deadline-ms", type=float, help="stop at this epoch time (ms)")
    parser.add_argument("--scale", type=float, default=0.001, help="emulation scale S")
    parser.add_argument("--shift-ms", type=float, default=0.0)
    parser.add_argument("--period-ms", type=float, help="pace on this grid (default: unpaced)")
    parser.add_argument(
        "--epoch-ms", type=float, help="grid origin shared by the run's jobs (default: barrier)"
    )
    parser.add_argument("--drift", default="5%", help="re-align threshold: off, 5%%, 0.1 ...")
    parser.add_argument("--timeout", type=float, default=10.0, help="socket timeout (s)")
    parser.add_argument("--out", required=True, help="JSON-lines file of iteration records")
    args = parser.parse_args(argv)
    peers = tuple(Address.parse(p) for p in args.peers.split(","))
    if not 0 <= args.worker < len(peers):
        raise UserInputError(f"--worker {args.worker}: the job has workers 0..{len(peers) - 1}")
    if args.iterations < 1 or args.timeout <= 0 or args.scale <= 0:
        raise UserInputError("--iterations, --timeout and --scale must be > 0")
    if args.nic_gbps <= 0:
        raise UserInputError(f"--nic-gbps {args.nic_gbps}: must be > 0")
    if args.transport not in ("tcp", "roce"):
        raise UserInputError(f"--transport {args.transport!r}: tcp or roce")
    if args.mltcp and args.transport != "roce":
        raise UserInputError(f"--mltcp needs --transport roce, not {args.transport!r}")
    if not 0 <= args.pfc_priority <= 7:
        raise UserInputError(f"--pfc-priority {args.pfc_priority}: must be 0..7")
    if args.phases:
        phases = parse_phases(args.phases)
        parallelism = args.parallelism or "data"
    else:
        profile = build_profile(
            args.model, len(peers), parallelism=args.parallelism, nic_gbps=args.nic_gbps
        )
        phases, parallelism = profile.phases, profile.parallelism
    parallelism = validate_pattern(parallelism, len(peers))
    available = available_congestion_controls()
    if args.congestion_control not in available:
        raise UserInputError(
            f"--congestion-control {args.congestion_control!r}: this kernel offers "
            + ", ".join(available)
        )
    try:
        drift = parse_drift_threshold(args.drift)
    except ValueError as err:
        raise UserInputError(f"--drift: {err}") from None
    return ReplicaSpec(
        job=args.job, model=args.model, worker=args.worker, peers=peers, phases=phases,
        out=args.out, iterations=args.iterations, deadline_ms=args.deadline_ms,
        scale=args.scale, shift_ms=args.shift_ms, period_ms=args.period_ms,
        drift_fraction=drift, timeout_s=args.timeout, epoch_ms=args.epoch_ms,
        parallelism=parallelism, nic_gbps=None if args.no_pacing else args.nic_gbps,
        count_ce=not args.no_ce_count, congestion_control=args.congestion_control,
        transport=args.transport, pfc_priority=args.pfc_priority, honour_pfc=not args.ignore_pfc,
        mltcp=args.mltcp,
    )  # fmt: skip


def now_ms() -> float:
    """The clock every replica shares (the machine's wall clock, in ms)."""
    return time.time() * 1e3


def sleep_until(
    target_ms: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None] = time.sleep,
) -> float | None:
    """Sleep until `target_ms` on `clock`; how much later than that it woke (ms), or
    None when the target had already passed (no sleep, so no wake-up to judge).

    >>> t = [100.0]
    >>> def late_sleep(s: float) -> None:  # a fake clock: every sleep wakes 1.5 ms late
    ...     t[0] += s * 1e3 + 1.5
    >>> sleep_until(110.0, lambda: t[0], late_sleep), t[0]
    (1.5, 111.5)
    >>> print(sleep_until(105.0, lambda: t[0], late_sleep))
    None
    """
    remaining = target_ms - clock()
    if remaining <= 0:
        return None
    sleep(remaining / 1e3)
    return max(0.0, clock() - target_ms)


def pacing_ms(plan: Sequence[PatternStep], rank: int, rates: Mapping[int, float]) -> float | None:
    """The least time `rank`'s sends of `plan` take at its connections' pacing rates
    (payload bytes/s per destination, as the kernel applies them): per step its
    slowest connection, the steps one after another (the relay cuts through the
    ring's steps, but on one connection, so the sum is the same); None when nothing
    is sent or a destination is not paced.

    >>> pacing_ms(phase_plan("data", 2, 1000), 0, {1: 125_000})  # 1000 B at 1 Mbit/s
    8.0
    """
    total = 0.0
    for step in plan:
        sends = {dst: size for dst, size in step.sends(rank).items() if size > 0}
        if any(rates.get(dst, 0) <= 0 for dst in sends):
            return None
        total += max((size * 1e3 / rates[dst] for dst, size in sends.items()), default=0.0)
    return total if total > 0 else None


def pace_fraction(paced_ms: float | None, took_ms: float) -> float | None:
    """The rate an Up phase achieved over its pacing rate: its paced time over the
    time it took (1.0 at the pacing rate); None when it was not paced, or paced too
    short to judge (`run_result.MIN_JUDGED_PHASE_MS`: scheduling jitter, not the
    host's speed, decides a phase of a few ms).

    >>> pace_fraction(40.0, 50.0), pace_fraction(None, 10.0), pace_fraction(1.3, 4.0)
    (0.8, None, None)
    """
    if paced_ms is None or took_ms <= 0 or paced_ms < MIN_JUDGED_PHASE_MS:
        return None
    return round(paced_ms / took_ms, 4)


def kernel_pacing(ring: Ring) -> dict[int, int] | None:
    """Destination rank -> the payload bytes/s the kernel paces its connection at
    (`transport.pace` set it, with the share left for headers and ACKs); None when
    the ring's connections are not paced."""
    if not ring.pace_gbps:
        return None
    return {
        rank: ring.outgoing(rank).getsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE)
        for rank in ring.pace_gbps
    }


def pace_rates(spec: ReplicaSpec) -> dict[int, float] | None:
    """Destination rank -> the Gbit/s its connection is paced at: S x the NIC's rate x
    the connection's share of it (`pacing_shares`); None when unpaced."""
    if spec.nic_gbps is None:
        return None
    shares = pacing_shares(spec.parallelism, len(spec.peers), spec.worker)
    return {rank: spec.nic_gbps * spec.scale * share for rank, share in shares.items()}


def make_ring(spec: ReplicaSpec) -> Ring | None:
    """The worker's connections for its job's pattern, paced at their NIC shares."""
    workers = len(spec.peers)
    if workers < 2:
        return None
    sends_to, receives_from = neighbours(spec.parallelism, workers, spec.worker)
    pace = pace_rates(spec)
    return Ring(
        spec.job, spec.worker, spec.peers, spec.timeout_s,
        sends_to=sends_to, receives_from=receives_from, pace_gbps=pace,
        congestion=spec.congestion_control,
    )  # fmt: skip


def open_ce_counter(spec: ReplicaSpec) -> CeCounter | None:
    """The CE counter on the interface holding this worker's address, for its
    listening port (where its job's flows arrive); None, said once, when it cannot."""
    me = spec.peers[spec.worker]
    ifname = interface_with_address(me.host)
    if ifname is None:
        _warn(spec, f"no interface holds {me.host} here: CE marks are not counted")
        return None
    try:
        return CeCounter(ifname, [me.port])
    except OSError as err:
        _warn(spec, f"cannot open a packet socket on {ifname} ({err}): CE marks are not counted")
        return None


def _warn(spec: ReplicaSpec, message: str) -> None:
    print(f"replica: job {spec.job} worker {spec.worker}: {message}", file=sys.stderr, flush=True)


def open_roce(spec: ReplicaSpec, ring: Ring) -> RoceLinks:
    """The worker's RoCE QPs beside its connected ring, honouring PFC on the interface
    holding its address (said once when it cannot read pause frames there)."""
    ifname = interface_with_address(spec.peers[spec.worker].host)
    honour = spec.honour_pfc and ifname is not None
    if spec.honour_pfc and ifname is None:
        _warn(spec, "no interface holds this worker's address: PFC pauses are not honoured")
    nic = spec.nic_gbps or 50.0
    mltcp = MltcpSettings() if spec.mltcp else None
    try:
        return RoceLinks(ring, nic, spec.scale, spec.pfc_priority, honour, ifname, mltcp=mltcp)
    except PermissionError:
        _warn(spec, "cannot read pause frames (needs CAP_NET_RAW): PFC is not honoured")
        return RoceLinks(ring, nic, spec.scale, spec.pfc_priority, False, None, mltcp=mltcp)


def roce_pacing(spec: ReplicaSpec, ring: Ring) -> dict[int, float]:
    """Destination rank -> the payload bytes/s a RoCE QP sends at its line rate."""
    rate = (spec.nic_gbps or 50.0) * 1e9 * spec.scale / 8 * PACING_SHARE * ROCE_PAYLOAD_SHARE
    return dict.fromkeys(ring.sends_to, rate)


def run_replica(spec: ReplicaSpec, clock: Callable[[], float] = now_ms) -> int:
    """Connect, agree on the start, run the iterations; returns the iterations done."""
    workers = len(spec.peers)
    ring = make_ring(spec)
    roce = spec.transport == "roce" and ring is not None
    counter = open_ce_counter(spec) if spec.count_ce and ring is not None and not roce else None
    links: RoceLinks | None = None
    share = ROCE_PAYLOAD_SHARE if roce else TCP_PAYLOAD_SHARE
    done = 0
    with open(spec.out, "a") as out:
        try:
            if ring is not None:
                ring.connect()
                if roce:
                    links = open_roce(spec, ring)
                elif not ecn_requested() or not ring.ecn_negotiated():
                    _warn(spec, "ECN is not negotiated: set net.ipv4.tcp_ecn=1 in the namespace")
                t0 = ring.barrier()
            else:
                t0 = clock()
            sleep_until(t0, clock)
            if counter is not None:
                counter.read()  # what arrived during the set-up is no iteration's
            pacing = Pacing(
                t0_ms=t0 if spec.epoch_ms is None else spec.epoch_ms,
                shift_ms=spec.shift_ms,
                period_ms=spec.period_ms,
                comm_offset_ms=spec.comm_offset_ms,
                iteration_ms=spec.iteration_ms,
                drift_fraction=spec.drift_fraction,
            )
            # On a shared epoch the first iteration takes the first grid point
            # still ahead (no adjustment is counted for it).
            state = AgentState(realign=spec.epoch_ms is not None)
            pace: Mapping[int, float] | None = None
            if ring is not None:
                pace = roce_pacing(spec, ring) if links is not None else kernel_pacing(ring)
            if links is not None:
                links.take()  # what the set-up did is no iteration's
            for k in range(spec.iterations):
                state, start = plan_start(pacing, state, k, clock())
                woke = [sleep_until(start.start_ms, clock)]  # each sleep's lateness (ms)
                up_pace: list[float] = []
                began = clock()
                if links is not None:
                    links.start_iteration()  # MLTCP's share of the iteration restarts
                want_stop = k == spec.iterations - 1 or (
                    spec.deadline_ms is not None and began >= spec.deadline_ms
                )
                header, sent, comm_ms, adjusted, first_up = Header(want_stop), 0, 0.0, False, True
                hops = 0  # steps the stop wish rode around the ring (every pattern holds it)
                for phase in spec.phases:
                    if phase.gbps <= 0 or ring is None:
                        woke.append(sleep_until(clock() + phase.duration_ms, clock))
                        continue
                    if first_up:
                        state, drift = observe_comm_start(pacing, state, k, clock())
                        adjusted, first_up = drift.adjusted, False
                        header = header.merge(Header(skip=drift.skip))
                    comm_began = time.monotonic()
                    size = phase_bytes(phase, spec.scale, share)
                    plan = phase_plan(spec.parallelism, workers, size)
                    relayed = ring_steps(plan, workers, spec.worker)
                    if relayed is not None:  # the AllReduce's steps, cut through
                        mover = ring if links is None else links
                        _, header = mover.relay(*relayed, header)
                        sent += sum(relayed[0])
                    else:
                        for step in plan:
                            sends, receives = step.sends(spec.worker), step.receives(spec.worker)
                            if links is None:
                                _, heard = exchange(ring, sends, receives, header)
                            else:
                                _, heard = links.exchange(sends, receives, header)
                            header = header.merge(heard)
                            sent += sum(sends.values())
                    hops += len(plan)
                    took_ms = (time.monotonic() - comm_began) * 1e3
                    comm_ms += took_ms
                    # (our choice) Only the ring's phases are judged: a worker of another
                    # pattern waits for other stages by design, not for its host.
                    paced = None if pace is None else pacing_ms(plan, spec.worker, pace)
                    fraction = pace_fraction(paced, took_ms) if relayed is not None else None
                    if fraction is not None:
                        up_pace.append(fraction)
                if (
                    ring is not None
                    and (spec.deadline_ms is not None or pacing.paced)
                    and hops < workers - 1
                ):
                    # a deadline or skip wish reaches every worker
                    header = agree(ring, header) if links is None else links.agree(header)
                state = apply_skip(state, header.skip)  # the job's decision, on every worker
                ended = clock()
                late = [w for w in woke if w is not None]
                roce_counts = None if links is None else links.take()
                marks = None if counter is None else counter.read()
                if roce_counts is not None:
                    marks = roce_counts.marked
                write_record(
                    out,
                    IterationRecord(
                        spec.job, spec.model, spec.worker, k, round(began, 3), round(ended, 3),
                        sent, round(comm_ms, 3), round(start.wait_ms, 3), adjusted,
                        marks, round(sum(late), 3), round(max(late, default=0.0), 3),
                        None if pace is None else tuple(up_pace),
                        *(() if roce_counts is None else roce_record(roce_counts)),
                    ),
                )  # fmt: skip
                done += 1
                if header.stop:
                    break
        finally:
            if links is not None:
                links.close()
            if ring is not None:
                ring.close()
            if counter is not None:
                counter.close()
    return done


def roce_record(c: RoceCounts) -> tuple[int, int, int, int, float]:
    """A RoCE iteration's record fields after `up_pace`: CNPs this worker's NP sent,
    rate cuts and retransmits at its senders, pause frames and paused ms."""
    return c.cnps_sent, c.cuts, c.retransmits, c.pause_frames, round(c.paused_s * 1e3, 3)


def main(argv: Sequence[str] | None = None) -> int:
    """The process: exit 0 when done, 3 on a lost peer, 2 on a usage error."""
    try:
        spec = parse_args(sys.argv[1:] if argv is None else argv)
    except UserInputError as err:
        print(f"replica: {err}", file=sys.stderr)
        return EXIT_USAGE
    Path(spec.out).parent.mkdir(parents=True, exist_ok=True)
    try:
        run_replica(spec)
    except PeerLost as err:
        print(f"replica: {err}", file=sys.stderr, flush=True)
        return EXIT_PEER_LOST
    return 0


if __name__ == "__main__":
    sys.exit(main())
