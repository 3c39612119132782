"""Does control-plane work stall the software switch's forwarding?

When the switch's P4Runtime service and its packet loop shared one process,
frames waited while a Write or a Read was parsed (pure-Python protobuf); the
loop now runs in a process of its own. This measures the one-way latency of a 1 kHz probe stream A -> switch -> B while
a controller does what controllers do, one scenario at a time:

- idle: nothing;
- counters: one wildcard counter Read per second (what `cassini ecn watch` does);
- write: a 3,000-update Write (entries for other MACs, one batch), alternately
  INSERT and DELETE, repeated every few seconds;
- read: a full Read of the forwarding table holding 4,096 entries (filled
  before the window), repeated every few seconds.

The switch is `cassini switch serve` in its own process (run as `python -m
emulation` from the tree this file belongs to, so the code measured is the
code next to it), programmed over P4Runtime with one forwarding entry. The
sender (namespace A) and the receiver (namespace B) are separate processes:
the sender stamps every frame with `time.time_ns()` just before `send()`,
the receiver takes the kernel's receive stamp (SO_TIMESTAMPNS, the same
clock), so neither the benchmark's own work nor a late wake-up of the
receiver shows up as latency. Needs root; everything it creates is removed
on exit, also on Ctrl-C.

    sudo .venv/bin/python benchmarks/bench_latency.py [--seconds 10] [--scenarios idle,write]
    sudo .venv/bin/python benchmarks/bench_latency.py --json

Prints a Markdown table (or JSON) with, per scenario, frames sent and
received, p50/p99/max latency, the share of frames delayed over 50 ms, and
whether the row meets the goal: p99 under 2 ms, max under 10 ms and (our
choice) no frame lost, since a lost probe is a delay without an end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

# (our choice) The sender and receiver probes run real-time, above the packet loop
# (root only): their own scheduling must not count as the switch's delay.
PROBE_PRIORITY = ("chrt", "-f", "20")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from latency_probe import MAC_A, MAC_B, probe_frame  # noqa: E402  (beside this file)

if TYPE_CHECKING:
    from controlplane.entries import Update
    from controlplane.session import P4RuntimeSession
    from emulation.fabric.netns import NetnsLab

SCENARIOS = ("idle", "counters", "write", "read")
GOAL_P99_MS = 2.0
GOAL_MAX_MS = 10.0
DELAYED_MS = 50.0
# (our choice) Entries in the table while the read scenario reads it whole: the table's
# size until it grew to 262,144 (p4src/README.md), kept so figures stay comparable.
TABLE_SIZE = 4096
# After the sender stops and the last control-plane call has returned, the
# receiver keeps listening this long for frames the switch still holds.
DRAIN_S = 1.0


# --- the switch and its controller ------------------------------------------------


class SwitchProcess:
    """`cassini switch serve` on two ports, its log drained so it never blocks on stderr."""

    def __init__(
        self,
        lab: NetnsLab,
        ports: dict[int, str],
        nice: int,
        timeout: float,
        extra_args: Sequence[str] = (),
        environment: dict[str, str] | None = None,
    ) -> None:
        """`extra_args` go after the ports (e.g. --tm-config FILE); `environment`
        replaces this process's (bench_controlplane.py runs the switch under either protobuf)."""
        from emulation.softswitch.switch import READY_PATTERN

        argv = ["nice", "-n", str(nice)] if nice else []
        argv += [sys.executable, "-m", "emulation", "switch", "serve", "--device-id", "1"]
        for port, ifname in sorted(ports.items()):
            argv += ["-i", f"{port}@{ifname}"]
        argv += ["--grpc-server-addr", "127.0.0.1:0", *extra_args]
        base = os.environ if environment is None else environment
        env = dict(base, PYTHONPATH=os.pathsep.join([str(ROOT), base.get("PYTHONPATH", "")]))
        self.process: subprocess.Popen[str] = lab.popen(
            None,
            argv,
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # Ctrl-C reaches the benchmark only; it stops the switch
        )
        self.log: deque[str] = deque(maxlen=50)
        found: list[str] = []
        ready = threading.Event()
        stream = self.process.stderr
        assert stream is not None

        def drain() -> None:
            for line in stream:
                self.log.append(line.rstrip())
                match = READY_PATTERN.search(line)
                if match and not found:
                    found.append(match.group(1))
                    ready.set()
            ready.set()

        threading.Thread(target=drain, name="switch-log", daemon=True).start()
        if not ready.wait(timeout) or not found:
            raise RuntimeError("the switch did not become ready:\n" + "\n".join(self.log))
        self.address = found[0]

    def check_alive(self) -> None:
        """Raise with the exit cause and the last log lines if the switch has died."""
        from emulation.fabric.switch_log import describe_exit

        if self.process.poll() is not None:
            time.sleep(0.2)  # let the log reader catch the last lines
            raise RuntimeError(
                describe_exit(
                    "the switch", self.process.pid, self.process.returncode, list(self.log)
                )
            )


def forward_entry(port: int, mac: int | str, egress: int) -> Any:
    """(ingress port, destination MAC) -> egress port, as the control plane writes it."""
    from controlplane.compile import FORWARD_ACTION, FORWARD_TABLE
    from controlplane.entries import TableEntry

    return TableEntry(
        FORWARD_TABLE, {"ingress_port": port, "dst_mac": mac}, FORWARD_ACTION, {"port": egress}
    )


def other_entries(count: int, base: int) -> list[Any]:
    """`count` entries for MACs nobody sends to (ingress port 1, locally administered)."""
    return [forward_entry(1, (0x06 << 40) | (base + i), 2) for i in range(count)]


def updates(kind: str, entries: Sequence[Any]) -> list[Update]:
    from controlplane.entries import Update, UpdateType

    return [Update(UpdateType[kind], e) for e in entries]


@dataclass
class Operation:
    """One control-plane call made during a window (times relative to the window's start)."""

    what: str
    start_s: float
    duration_s: float
    max_latency_ms: float | None = None  # worst probe sent while the call ran


@dataclass
class Row:
    """One scenario's result: what the table prints and --json carries."""

    scenario: str
    sent: int
    received: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    delayed_share: float  # received frames later than DELAYED_MS
    meets_goal: bool
    sender_late_max_ms: float
    operations: list[Operation] = field(default_factory=list)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values: percentile([1, 2, 3, 4], 0.5) == 2."""
    rank = max(1, min(len(sorted_values), int(-(-q * len(sorted_values) // 1))))
    return sorted_values[rank - 1]


def summarize(
    scenario: str,
    sent: int,
    samples: Sequence[Sequence[int]],
    late_ms: float,
    ops: list[Operation],
    t0: float,
) -> Row:
    """Latency figures of one window; each operation gets the worst probe sent while it ran."""
    latencies = sorted(s[2] / 1e6 for s in samples)
    for op in ops:
        begin_ns = (t0 + op.start_s) * 1e9
        end_ns = begin_ns + op.duration_s * 1e9
        during = [s[2] / 1e6 for s in samples if begin_ns <= s[1] <= end_ns]
        op.max_latency_ms = max(during) if during else None
    if not latencies:
        return Row(scenario, sent, 0, None, None, None, 0.0, False, late_ms, ops)
    p99, worst = percentile(latencies, 0.99), latencies[-1]
    return Row(
        scenario,
        sent,
        len(latencies),
        percentile(latencies, 0.5),
        p99,
        worst,
        sum(v > DELAYED_MS for v in latencies) / len(latencies),
        p99 < GOAL_P99_MS and worst < GOAL_MAX_MS and len(latencies) == sent,
        late_ms,
        ops,
    )


def _read_json_line(stream: IO[str], what: str) -> Any:
    line = stream.readline()
    if not line:
        raise RuntimeError(f"the {what} ended without a result")
    return json.loads(line)


def run_window(
    lab: NetnsLab,
    ns_a: str,
    if_a: str,
    ns_b: str,
    if_b: str,
    scenario: str,
    seconds: float,
    interval: float,
    schedule: Sequence[tuple[float, str, Callable[[], object]]],
    run_id: int,
) -> Row:
    """Probe for `seconds` while calling each (at s, name, call) of `schedule` in turn."""
    # The probes are the instrument: a sender preempted between stamping a frame
    # and sending it would charge its own scheduling delay to the switch.
    me = [*PROBE_PRIORITY, sys.executable, str(Path(__file__).with_name("latency_probe.py"))]
    rx = lab.popen(
        ns_b,
        [*me, "receive", "--ifname", if_b, "--run-id", str(run_id)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert rx.stdout is not None and rx.stdin is not None
    if rx.stdout.readline().strip() != "ready":
        raise RuntimeError("the receiver did not start")
    t0 = time.time() + 0.5
    tx = lab.popen(
        ns_a,
        [*me, "send", "--ifname", if_a, "--run-id", str(run_id), "--frame", probe_frame().hex(),
         "--start", repr(t0), "--seconds", str(seconds), "--interval", str(interval)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )  # fmt: skip
    assert tx.stdout is not None
    ops: list[Operation] = []
    for at, what, call in schedule:
        delay = t0 + at - time.time()
        if delay > 0:
            time.sleep(delay)
        began = time.time()
        call()
        ops.append(Operation(what, began - t0, time.time() - began))
    sent_info = _read_json_line(tx.stdout, "sender")
    tx.wait()
    time.sleep(DRAIN_S)
    rx.stdin.close()
    got = _read_json_line(rx.stdout, "receiver")
    rx.wait()
    return summarize(scenario, sent_info["sent"], got["samples"], sent_info["late_max_ms"], ops, t0)


def schedule_for(
    scenario: str,
    session: P4RuntimeSession,
    seconds: float,
    write_updates: int,
    state: dict[str, bool],
) -> list[tuple[float, str, Callable[[], object]]]:
    """When to call what during one window (seconds after its start)."""
    from controlplane.compile import FORWARD_TABLE

    if scenario == "idle":
        return []
    if scenario == "counters":
        return [
            (k + 0.5, "read counters (wildcard)", session.read_counters)
            for k in range(int(seconds))
        ]
    if scenario == "write":
        entries = other_entries(write_updates, base=0)
        inserts, deletes = updates("INSERT", entries), updates("DELETE", entries)

        def write_once() -> None:
            batch = deletes if state["inserted"] else inserts
            session.write(batch, batch_size=len(batch))
            state["inserted"] = not state["inserted"]

        times = [1.0 + 3.0 * k for k in range(max(1, int((seconds - 1.5) // 3.0) + 1))]
        return [
            (t, f"write {write_updates} updates (one batch)", write_once)
            for t in times
            if t < seconds
        ]
    if scenario == "read":
        times = [1.0 + 2.5 * k for k in range(max(1, int((seconds - 1.5) // 2.5) + 1))]

        def read_table() -> None:
            session.read_table(FORWARD_TABLE)

        return [(t, f"read table ({TABLE_SIZE} entries)", read_table) for t in times if t < seconds]
    raise ValueError(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}")


def measure(
    scenarios: Sequence[str], seconds: float, interval: float, write_updates: int, nice: int
) -> list[Row]:
    """Build the two hosts and the switch, program it, and run every scenario's window."""
    from controlplane.p4info import load_p4info
    from controlplane.session import P4RuntimeSession
    from emulation.fabric.netns import NetnsLab
    from emulation.housekeeping.prefixes import new_prefix

    rows: list[Row] = []
    with NetnsLab(prefix=new_prefix("cas")) as lab:
        ns_a, ns_b = lab.namespace("a"), lab.namespace("b")
        if_a, sw_a = lab.veth("ha", "sa", ns_a=ns_a, mac_a=MAC_A)
        sw_b, if_b = lab.veth("sb", "hb", ns_b=ns_b, mac_b=MAC_B)
        switch = SwitchProcess(lab, {1: sw_a, 2: sw_b}, nice, timeout=60.0)
        with P4RuntimeSession.connect(switch.address, 1, timeout=120.0) as session:
            session.set_pipeline(load_p4info())
            session.write(updates("INSERT", [forward_entry(1, MAC_B, 2)]))
            state = {"inserted": False}
            for run_id, scenario in enumerate(scenarios, start=1):
                if scenario == "read":
                    # 4,096 entries in all: ours plus the others, inserted before the window.
                    if state["inserted"]:
                        session.write(updates("DELETE", other_entries(write_updates, 0)))
                        state["inserted"] = False
                    session.write(updates("INSERT", other_entries(TABLE_SIZE - 1, base=1 << 20)))
                schedule = schedule_for(scenario, session, seconds, write_updates, state)
                row = run_window(
                    lab, ns_a, if_a, ns_b, if_b, scenario, seconds, interval, schedule, run_id
                )
                switch.check_alive()
                rows.append(row)
                if scenario == "read":
                    session.write(updates("DELETE", other_entries(TABLE_SIZE - 1, base=1 << 20)))
                if state["inserted"]:
                    session.write(updates("DELETE", other_entries(write_updates, 0)))
                    state["inserted"] = False
    return rows


# --- output ---------------------------------------------------------------------


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def markdown(rows: Sequence[Row]) -> str:
    """The table of the module docstring, one row per scenario."""
    lines = [
        f"| scenario | frames sent | received | p50 ms | p99 ms | max ms | > {DELAYED_MS:g} ms "
        f"| control-plane calls (mean s) | goal p99 < {GOAL_P99_MS:g} ms, max < {GOAL_MAX_MS:g} ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        calls = (
            f"{len(r.operations)} x {sum(o.duration_s for o in r.operations) / len(r.operations):.3f}"
            if r.operations
            else "-"
        )
        lines.append(
            f"| {r.scenario} | {r.sent:,} | {r.received:,} | {_ms(r.p50_ms)} | {_ms(r.p99_ms)} "
            f"| {_ms(r.max_ms)} | {r.delayed_share:.1%} | {calls} | {'yes' if r.meets_goal else 'NO'} |"
        )
    return "\n".join(lines)


def _protobuf_backend() -> str:
    try:
        from google.protobuf.internal import api_implementation

        return str(api_implementation.Type())
    except ImportError:
        return "unknown"


def _commit() -> str:
    """The commit measured, '+dirty' when the switch or control-plane code differs from it."""
    git = ["git", "-C", str(ROOT)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        return "unknown (not a git checkout)"
    status = subprocess.run(
        [*git, "status", "--porcelain", "--", "emulation", "controlplane"],
        capture_output=True,
        text=True,
    )
    return head.stdout.strip() + ("+dirty" if status.stdout.strip() else "")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--seconds", type=float, default=10.0, help="window per scenario (default 10)"
    )
    parser.add_argument(
        "--scenarios",
        default=",".join(SCENARIOS),
        help=f"comma-separated, from {', '.join(SCENARIOS)}",
    )
    parser.add_argument(
        "--interval-ms", type=float, default=1.0, help="probe interval (default 1 ms)"
    )
    parser.add_argument(
        "--write-updates", type=int, default=3000, help="updates per Write (default 3000)"
    )
    parser.add_argument(
        "--switch-nice", type=int, default=0, help="nice level of the switch (default 0)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = parser.parse_args(argv)
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown:
        parser.error(f"--scenarios: unknown {', '.join(unknown)}; known: {', '.join(SCENARIOS)}")
    if not 0 < args.write_updates < TABLE_SIZE:
        parser.error(f"--write-updates must be 1..{TABLE_SIZE - 1} (the read scenario fills {TABLE_SIZE})")
    load = os.getloadavg()[0]
    try:
        rows = measure(
            scenarios, args.seconds, args.interval_ms / 1e3, args.write_updates, args.switch_nice
        )
    except KeyboardInterrupt:
        print("interrupted: namespaces, interfaces and processes removed", file=sys.stderr)
        return 130
    facts = {
        "commit": _commit(),
        "cpus": os.cpu_count(),
        "load_average_at_start": round(load, 2),
        "seconds_per_scenario": args.seconds,
        "probe_interval_ms": args.interval_ms,
        "protobuf_backend": _protobuf_backend(),
        "goal": {"p99_ms": GOAL_P99_MS, "max_ms": GOAL_MAX_MS, "no_loss": True},
    }
    if args.json:
        print(json.dumps({**facts, "rows": [asdict(r) for r in rows]}, indent=1))
        return 0
    print(
        f"# one-way latency through the software switch under control-plane load: commit "
        f"{facts['commit']}, {facts['cpus']} CPUs, load average {load:.2f} at start, "
        f"{args.seconds:g} s per scenario, one probe every {args.interval_ms:g} ms, "
        f"protobuf backend {facts['protobuf_backend']}\n"
    )
    print(markdown(rows))
    print()
    for r in rows:
        worst = [o for o in r.operations if o.max_latency_ms is not None]
        if worst:
            top = max(worst, key=lambda o: o.max_latency_ms or 0.0)
            print(
                f"- {r.scenario}: slowest call {max(o.duration_s for o in r.operations):.3f} s; worst probe "
                f"during a call {top.max_latency_ms:.1f} ms ({top.what} at {top.start_s:.1f} s); "
                f"sender woke up at most {r.sender_late_max_ms:.1f} ms late"
            )
        else:
            print(f"- {r.scenario}: sender woke up at most {r.sender_late_max_ms:.1f} ms late")
    return 0


if __name__ == "__main__":
    sys.exit(main())
