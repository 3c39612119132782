"""What does the compiled protobuf buy the control plane? (issue 24, run by hand)

Every figure is measured twice in one run, before (pure-Python protobuf:
PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python in the environment of the
processes measured) and after (the compiled upb implementation `.venv`
installs), in pairs whose order alternates from round to round, so both
sides meet the same machine:

1. encode: the default testbed's 1,728 entries built, serialised and parsed
   as WriteRequests (`controlplane_measure.py encode`); goal >= 20x.
2. program: `cassini program` of the default testbed (pipeline + 1,728
   entries) against a fresh software switch, client and switch both under
   the implementation measured: wall time of the command.
3. poll: what one interval of `controlplane/counter_watch.py` reads from the
   fabric's switch (the P4 counters of the chip's 72 ports, a gNMI Get of
   every interface), back to back, alone and together; the figure is the
   switch service's CPU per poll; goal: both under 10 ms.
4. 10 Hz: both polled 10 times a second for `--window` seconds: the
   service's CPU in share of one core; goal under 10%.
5. latency: meanwhile, the one-way latency of a 1 kHz probe stream through
   the switch, measured by `bench_latency.py`'s own window (`run_window`);
   goal p99 under 2 ms (that benchmark's also: max under 10 ms, no loss).

The switch is `cassini switch serve` set up as the fabric sets it up for the
default testbed (`emulation_profile` at the default scale: its 24 server
ports on veths, the 48 cabled ports inside it), started afresh for each
measurement pair member; two server ports carry the probes (one extra
forwarding entry for them). Parts 2-5 need root; `--encode-only` runs part 1
alone. Everything created is removed on exit, also on Ctrl-C.

    sudo .venv/bin/python benchmarks/bench_controlplane.py [--rounds 2] [--window 20]
    .venv/bin/python benchmarks/bench_controlplane.py --encode-only
    sudo .venv/bin/python benchmarks/bench_controlplane.py --json

Prints the machine's load before and after, and a Markdown table with, per
figure, before, after, the ratio (median of the pairs' ratios, their range)
and the goal.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))
from controlplane_measure import TOPOLOGY  # noqa: E402  (beside this file)

if TYPE_CHECKING:
    from bench_latency import Row, SwitchProcess

    from emulation.fabric.netns import NetnsLab

PURE_ENV = "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"
IMPLEMENTATIONS = ("python", "upb")  # before, after
MEASURE = [sys.executable, str(HERE / "controlplane_measure.py")]
PROBE_SERVERS = ("s01", "s02")  # two server ports of one ToR carry the latency probes
QUIET_S = 5.0  # how long the service's CPU is taken without polls
GOAL_ENCODE_RATIO = 20.0
GOAL_POLL_MS = 10.0
GOAL_CPU_SHARE = 0.10
GOAL_P99_MS = 2.0
# What the protobuf_runtime check prints when a process is not on upb: how the
# switch's log shows which implementation it runs.
SLOW_NOTICE = "protobuf runs its 'python' implementation"


# --- pure helpers ---------------------------------------------------------------


@dataclass(frozen=True)
class Paired:
    """One figure, before and after: medians over the rounds and the pairs' ratios.

    `ratio` is before / after for a cost (seconds, CPU), after / before for a
    rate, so > 1 always means the compiled protobuf is better.
    """

    before: float
    after: float
    ratio: float  # median of the per-round ratios
    ratio_low: float
    ratio_high: float


def paired(before: Sequence[float], after: Sequence[float], rate: bool = False) -> Paired:
    """Summarise rounds measured in pairs (before[i] beside after[i]).

    >>> p = paired([2.0, 4.0], [1.0, 1.0])
    >>> (p.before, p.after, p.ratio, p.ratio_low, p.ratio_high)
    (3.0, 1.0, 3.0, 2.0, 4.0)
    """
    if not before or len(before) != len(after):
        raise ValueError(f"need pairs: {len(before)} before, {len(after)} after")
    ratios = [_ratio(a, b) if rate else _ratio(b, a) for b, a in zip(before, after, strict=True)]
    return Paired(
        statistics.median(before),
        statistics.median(after),
        statistics.median(ratios),
        min(ratios),
        max(ratios),
    )


def _ratio(num: float, den: float) -> float:
    return num / den if den else float("inf")


def order(round_index: int) -> tuple[str, str]:
    """Which implementation goes first in a round: alternate, so neither always meets
    the machine first (before first in round 0)."""
    return IMPLEMENTATIONS if round_index % 2 == 0 else IMPLEMENTATIONS[::-1]


def environment(impl: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a process measured under `impl` ('python' or 'upb')."""
    env = dict(os.environ if base is None else base)
    env.pop(PURE_ENV, None)
    if impl == "python":
        env[PURE_ENV] = "python"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def met(value: float, goal: float, below: bool) -> str:
    """'met' or 'missed' for a value against a goal (below it, or at least it)."""
    return "met" if (value < goal if below else value >= goal) else "missed"


# --- children ---------------------------------------------------------------------


def run_json(argv: Sequence[str], env: dict[str, str], timeout: float) -> Any:
    """Run a child to completion and parse the one JSON line it prints."""
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv[1:3])} failed ({done.returncode}):\n{done.stderr[-2000:]}"
        )
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure_encode(rounds: int, seconds: float) -> dict[str, list[dict[str, Any]]]:
    """Part 1: each implementation `rounds` times, in alternating pairs."""
    found: dict[str, list[dict[str, Any]]] = {i: [] for i in IMPLEMENTATIONS}
    for r in range(rounds):
        for impl in order(r):
            result = run_json(
                [*MEASURE, "encode", "--seconds", str(seconds)], environment(impl), 600
            )
            if result["implementation"] != impl:
                raise RuntimeError(
                    f"asked for protobuf {impl!r}, the child ran {result['implementation']!r}"
                )
            found[impl].append(result)
    return found


# --- the switch ---------------------------------------------------------------------


def start_switch(lab: NetnsLab, ports: dict[int, str], tm_file: Path, impl: str) -> SwitchProcess:
    """`cassini switch serve` on the fabric's ports under `impl`, checked by its own log."""
    from bench_latency import SwitchProcess

    switch = SwitchProcess(
        lab,
        ports,
        nice=0,
        timeout=120.0,
        extra_args=["--tm-config", str(tm_file)],
        environment=environment(impl),
    )
    slow = any(SLOW_NOTICE in line for line in switch.log)
    if slow != (impl == "python"):
        stop_switch(switch)
        raise RuntimeError(f"the switch does not run protobuf {impl!r}:\n" + "\n".join(switch.log))
    return switch


def stop_switch(switch: SwitchProcess) -> None:
    """SIGTERM (the switch stops within a second), then SIGKILL if it does not."""
    process = switch.process
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)  # its own session: the packet loop too
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)


def program(address: str, impl: str) -> float:
    """Wall seconds of `cassini program` of the default testbed against `address`."""
    argv = [
        sys.executable,
        "-m",
        "emulation",
        "program",
        "--grpc",
        address,
        "--topology",
        TOPOLOGY,
        "--timeout",
        "120",
        "--json",
    ]
    began = time.perf_counter()
    done = subprocess.run(argv, env=environment(impl), capture_output=True, text=True, cwd=ROOT)
    took = time.perf_counter() - began
    if done.returncode != 0:
        raise RuntimeError(f"cassini program failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return took


def quiet_cpu_share(pid: int, seconds: float) -> float:
    """The service's CPU over `seconds` in which nobody calls it, as a share of one core."""
    from controlplane_measure import cpu_seconds

    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    time.sleep(seconds)
    return (cpu_seconds(pid) - cpu0) / (time.perf_counter() - t0)


def add_probe_entry(address: str, port_a: int, port_b: int) -> None:
    """The probes' one forwarding entry (MAC_B arriving on port_a leaves on port_b)."""
    from bench_latency import forward_entry, updates
    from latency_probe import MAC_B

    from controlplane.session import P4RuntimeSession

    with P4RuntimeSession.connect(address, 1, timeout=60.0) as session:
        session.write(updates("INSERT", [forward_entry(port_a, MAC_B, port_b)]))


def poll_child(
    address: str,
    pid: int,
    impl: str,
    what: str,
    count: int | None,
    hz: float | None,
    seconds: float,
) -> dict[str, Any]:
    argv = [*MEASURE, "poll", "--grpc", address, "--switch-pid", str(pid), "--what", what]
    argv += (
        ["--count", str(count)]
        if count is not None
        else ["--hz", str(hz), "--seconds", str(seconds)]
    )
    result = run_json(argv, environment(impl), 600)
    if result["implementation"] != impl:
        raise RuntimeError(
            f"asked for protobuf {impl!r}, the poller ran {result['implementation']!r}"
        )
    return dict(result)


@dataclass
class SwitchRun:
    """Parts 2-5 for one implementation, one round."""

    impl: str
    program_s: float
    polls: dict[str, dict[str, Any]]  # part -> poll_child's result (back to back)
    polling: dict[str, Any]  # the 10 Hz poller's result
    hz: float
    quiet_cpu_share: float  # the service's CPU without polls, share of a core
    latency: Row
    idle: Row | None  # a window without polling (the first switch of the run only)


def measure_switch(
    rounds: int, poll_count: int, window: float, hz: float, interval: float
) -> list[SwitchRun]:
    """Parts 2-5, each implementation `rounds` times in alternating pairs, on one lab."""
    from bench_latency import run_window
    from latency_probe import MAC_A, MAC_B

    from emulation.fabric.netns import NetnsLab
    from emulation.fabric.scaling import DEFAULT_SCALE, emulation_profile
    from emulation.housekeeping.prefixes import new_prefix
    from emulation.softswitch.tm_config import tm_config_to_dict
    from topologies.chip_mapping import map_to_chip
    from topologies.library import load_topology

    topo = load_topology(TOPOLOGY)
    chip = map_to_chip(topo)
    tm = emulation_profile(topo, chip, DEFAULT_SCALE).tm
    runs: list[SwitchRun] = []
    with NetnsLab(prefix=new_prefix("cas")) as lab:
        tm_file = lab.tempdir("tm") / "tm.json"
        tm_file.write_text(json.dumps(tm_config_to_dict(tm)))
        ns_a, ns_b, ns_rest = lab.namespace("a"), lab.namespace("b"), lab.namespace("r")
        port_a, port_b = (chip.server_port[s] for s in PROBE_SERVERS)
        if_a, sw_a = lab.veth("ha", "sa", ns_a=ns_a, mac_a=MAC_A)
        sw_b, if_b = lab.veth("sb", "hb", ns_b=ns_b, mac_b=MAC_B)
        ports = {port_a: sw_a, port_b: sw_b}
        for name, port in sorted(chip.server_port.items()):
            if name not in PROBE_SERVERS:
                _, ports[port] = lab.veth(f"h{port}", f"p{port}", ns_a=ns_rest)
        run_id = 0
        for r in range(rounds):
            for impl in order(r):
                switch = start_switch(lab, ports, tm_file, impl)
                try:
                    pid, address = switch.process.pid, switch.address
                    took = program(address, impl)
                    add_probe_entry(address, port_a, port_b)
                    quiet = quiet_cpu_share(pid, QUIET_S)
                    polls = {
                        part: poll_child(address, pid, impl, part, poll_count, None, 0)
                        for part in ("counters", "gnmi", "both")
                    }
                    idle = None
                    if not runs:
                        run_id += 1
                        idle = run_window(
                            lab, ns_a, if_a, ns_b, if_b, "idle", window, interval, [], run_id
                        )
                    held: dict[str, Any] = {}

                    def poll_window(
                        impl: str = impl,
                        address: str = address,
                        pid: int = pid,
                        into: dict[str, Any] = held,
                    ) -> None:
                        into.update(poll_child(address, pid, impl, "both", None, hz, window - 0.5))

                    run_id += 1
                    row = run_window(
                        lab,
                        ns_a,
                        if_a,
                        ns_b,
                        if_b,
                        f"{hz:g} Hz polls ({impl})",
                        window,
                        interval,
                        [(0.0, "poll", poll_window)],
                        run_id,
                    )
                    switch.check_alive()
                    runs.append(SwitchRun(impl, took, polls, dict(held), hz, quiet, row, idle))
                finally:
                    stop_switch(switch)
    return runs


# --- the table ------------------------------------------------------------------------


def _series(runs: Sequence[SwitchRun], impl: str, pick: Any) -> list[float]:
    return [float(pick(r)) for r in runs if r.impl == impl]


def _pair(runs: Sequence[SwitchRun], pick: Any, rate: bool = False) -> Paired:
    return paired(_series(runs, "python", pick), _series(runs, "upb", pick), rate)


def _ms_per_poll(result: dict[str, Any]) -> float:
    return 1e3 * result["service_cpu_s"] / max(1, result["polls"])


def _median_ms(values: Sequence[float]) -> float:
    return 1e3 * statistics.median(values)


def table(encode: dict[str, list[dict[str, Any]]], runs: Sequence[SwitchRun]) -> list[list[str]]:
    """Rows: figure, before, after, ratio (range), goal, met or missed."""
    rows: list[list[str]] = []

    def row(what: str, p: Paired, fmt: str, goal: str = "", verdict: str = "") -> None:
        rng = f" ({p.ratio_low:.1f}-{p.ratio_high:.1f})" if p.ratio_low != p.ratio_high else ""
        rows.append(
            [
                what,
                format(p.before, fmt),
                format(p.after, fmt),
                f"{p.ratio:.1f}x{rng}",
                goal,
                verdict,
            ]
        )

    e = paired([x["per_s"] for x in encode["python"]], [x["per_s"] for x in encode["upb"]], True)
    n = encode["upb"][0]["entries"]
    row(
        f"entries built + serialised + parsed per s ({n}, WriteRequests of 500)",
        e,
        ",.0f",
        f">= {GOAL_ENCODE_RATIO:g}x",
        met(e.ratio, GOAL_ENCODE_RATIO, below=False),
    )
    d = paired(
        [x["per_s_with_decode"] for x in encode["python"]],
        [x["per_s_with_decode"] for x in encode["upb"]],
        True,
    )
    row("the same, and parsed back into TableEntry (from_proto)", d, ",.0f")
    if not runs:
        return rows
    row(f"`cassini program` of {TOPOLOGY}, wall s", _pair(runs, lambda r: r.program_s), ".2f")
    first = runs[0].polls
    cells, ifaces = first["counters"]["counter_cells"], first["gnmi"]["interfaces"]
    leaves = first["gnmi"].get("gnmi_leaves", 0)
    row(
        f"counter poll ({cells} cells of the chip's ports), service CPU ms per poll",
        _pair(runs, lambda r: _ms_per_poll(r.polls["counters"])),
        ".1f",
    )
    row(
        f"gNMI Get of all {ifaces} interfaces ({leaves} leaves), service CPU ms per poll",
        _pair(runs, lambda r: _ms_per_poll(r.polls["gnmi"])),
        ".1f",
    )
    both = _pair(runs, lambda r: _ms_per_poll(r.polls["both"]))
    row(
        "both (one counter_watch interval), service CPU ms per poll",
        both,
        ".1f",
        f"< {GOAL_POLL_MS:g} ms",
        met(both.after, GOAL_POLL_MS, below=True),
    )
    row(
        "both, client wall ms per poll (median)",
        _pair(runs, lambda r: sum(_median_ms(v) for v in r.polls["both"]["durations_s"].values())),
        ".1f",
    )
    share = _pair(runs, lambda r: 100 * r.polling["service_cpu_s"] / r.polling["wall_s"])
    hz = runs[0].hz
    row(
        "service CPU without polls, % of a core",
        _pair(runs, lambda r: 100 * r.quiet_cpu_share),
        ".1f",
    )
    row(
        f"{hz:g} Hz polling of both: service CPU, % of a core",
        share,
        ".1f",
        f"< {100 * GOAL_CPU_SHARE:g}%",
        met(share.after, 100 * GOAL_CPU_SHARE, below=True),
    )
    row(
        f"polls per s achieved (asked {hz:g})",
        _pair(runs, lambda r: r.polling["polls"] / r.polling["wall_s"], rate=True),
        ".1f",
    )
    # Where the poller fell behind (a busy machine, or a service slower than the period),
    # the share above is at a lower rate: the cost per poll x the rate asked says what
    # the rate asked would take.
    at_rate = _pair(runs, lambda r: _ms_per_poll(r.polls["both"]) * r.hz / 10)
    row(
        f"the same at {hz:g} Hz from the cost per poll, % of a core",
        at_rate,
        ".1f",
        f"< {100 * GOAL_CPU_SHARE:g}%",
        met(at_rate.after, 100 * GOAL_CPU_SHARE, below=True),
    )
    p99 = _pair(runs, lambda r: r.latency.p99_ms or float("nan"))
    row(
        "probe latency under that polling, p99 ms",
        p99,
        ".2f",
        f"< {GOAL_P99_MS:g} ms",
        met(p99.after, GOAL_P99_MS, below=True),
    )
    row(
        "probe latency under that polling, max ms",
        _pair(runs, lambda r: r.latency.max_ms or float("nan")),
        ".2f",
    )
    return rows


def markdown(rows: Sequence[Sequence[str]]) -> str:
    head = "| figure | before (pure Python) | after (upb) | ratio (range) | goal | |"
    return "\n".join(
        [head, "|---|---|---|---|---|---|", *("| " + " | ".join(r) + " |" for r in rows)]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="pairs per figure (default 2)")
    parser.add_argument(
        "--encode-seconds",
        type=float,
        default=3.0,
        help="encoding time per measurement (default 3)",
    )
    parser.add_argument(
        "--poll-count", type=int, default=30, help="back-to-back polls per part (default 30)"
    )
    parser.add_argument(
        "--window",
        type=float,
        default=20.0,
        help="seconds of 10 Hz polling and probes per switch (default 20)",
    )
    parser.add_argument("--hz", type=float, default=10.0, help="polls per second (default 10)")
    parser.add_argument("--interval-ms", type=float, default=1.0, help="probe interval (default 1)")
    parser.add_argument("--encode-only", action="store_true", help="part 1 only (no root needed)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.poll_count < 1 or args.window < 2 or args.hz <= 0:
        parser.error("--rounds and --poll-count must be >= 1, --window >= 2, --hz > 0")
    if not args.encode_only and os.geteuid() != 0:
        parser.error(
            "parts 2-5 need root (namespaces, veths, raw sockets); --encode-only runs part 1"
        )
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    began = time.time()
    try:
        encode = measure_encode(args.rounds, args.encode_seconds)
        runs = (
            []
            if args.encode_only
            else measure_switch(
                args.rounds, args.poll_count, args.window, args.hz, args.interval_ms / 1e3
            )
        )
    except KeyboardInterrupt:
        print("interrupted: namespaces, interfaces and processes removed", file=sys.stderr)
        return 130
    load_after = Path("/proc/loadavg").read_text().split()[:3]
    rows = table(encode, runs)
    facts = {
        "cpus": os.cpu_count(),
        "loadavg_before": load_before,
        "loadavg_after": load_after,
        "seconds": round(time.time() - began, 1),
        "rounds": args.rounds,
    }
    if args.json:
        print(
            json.dumps(
                {**facts, "rows": rows, "encode": encode, "runs": [asdict(r) for r in runs]},
                indent=1,
                default=str,
            )
        )
        return 0
    print(
        f"# control plane before (pure-Python protobuf) and after (upb): {facts['cpus']} CPUs, "
        f"load average {' '.join(load_before)} before, {' '.join(load_after)} after, "
        f"{facts['seconds']} s, {args.rounds} pairs per figure\n"
    )
    print(markdown(rows))
    for r in runs:
        lat, idle = r.latency, r.idle
        if idle is not None:
            print(
                f"- idle window ({r.impl} switch): p99 {idle.p99_ms} ms, max {idle.max_ms} ms, "
                f"{idle.received}/{idle.sent} received, sender late up to {idle.sender_late_max_ms:.1f} ms"
            )
        print(
            f"- {r.impl}: program {r.program_s:.2f} s; 10 Hz: {r.polling['polls']} polls, "
            f"{r.polling['missed_ticks']} ticks missed, service {r.polling['service_cpu_s']:.2f} CPU-s "
            f"in {r.polling['wall_s']:.1f} s; probes {lat.received}/{lat.sent}, p99 {lat.p99_ms} ms, "
            f"max {lat.max_ms} ms, sender late up to {lat.sender_late_max_ms:.1f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
