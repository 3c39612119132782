"""A 2:1 incast under RoCE: do two DCQCN flows into one server converge to fair shares?

Brings up a fabric of three servers on one leaf at scale S, starts a RoCE
receiver in s03 (one QP per sender, `_roce.transfer`) and one sender in s01
and, `--stagger` seconds later, one in s02, each with `--megabytes` to move at
the NIC's rate, DCQCN and PFC on as the replicas run them (`jobs.roce_links`).
A packet socket in s03 bins each flow's wire bytes per `--bin-ms`; a bin is
fair when both flows are within `--tolerance` of half the link. Reports when
the pair first stayed fair for `--hold-s` and the share of fair bins after it,
the share of fair bins over the whole time both run, the senders' and the
switch's counts (CNPs, cuts, pauses, retransmits, marks), and writes the
trajectories (CSV and PNG) and summary.json to `--out`. As in a RoCE run of the
replicas, RoCE's DSCP and its queue class both come from the switch's PFC
priority, and the DSCP -> class entries (`jobs.roce_classes`) are installed for
the flows and removed after. Needs root.

    sudo .venv/bin/python benchmarks/bench_roce_incast.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from controlplane.telemetry import Snapshot, deltas  # noqa: E402
from emulation.fabric.emulated import EmulatedFabric  # noqa: E402
from emulation.fabric.options import FabricOptions  # noqa: E402
from emulation.jobs.roce_classes import RoceClasses  # noqa: E402
from emulation.softswitch.tm_config import TmConfig  # noqa: E402
from topologies.library import load_topology  # noqa: E402

PORT = 4791
SENDER = """
import json, socket, sys
from emulation.jobs.roce_links import OVERHEAD, PAYLOAD, RTO_S, open_pause_socket
from emulation.jobs.transport import PACING_SHARE
from emulation.roce.dcqcn import DcqcnSettings, scaled
from emulation.roce.native import compiled, settings_tuple
from emulation.roce.pfc import data_tos
ifname, src, dst, qpn, nic_bps, scale, nbytes, keep, honour, prio = sys.argv[1:11]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, data_tos(int(prio)))
s.bind((src, 0)); s.connect((dst, 4791))
rate = scaled(DcqcnSettings(line_rate_bps=float(nic_bps)), float(scale), keep)
line, *rest = settings_tuple(rate)
link = float(nic_bps) * float(scale)
pause = open_pause_socket(ifname)  # held: its fd must stay open through the transfer
r = compiled.transfer((line * PACING_SHARE, *rest), PAYLOAD, OVERHEAD, RTO_S, 16, 30.0,
                      rate.min_time_between_cnps_s, -1,
                      [(s.fileno(), int(qpn), 0, bytearray(compiled.RP_STATE_BYTES), [int(nbytes)])],
                      [], 0, False, (pause.fileno(), int(prio), link, 0.0) if honour == "1" else None)
sent = r[8][0]
print(json.dumps({"status": r[0], "pause_frames": r[5], "paused_s": r[6], "packets": sent[0],
                  "cnps": sent[1], "cuts": sent[2], "retransmits": sent[3], "timeouts": sent[4],
                  "naks": sent[5], "min_rc": sent[7]}))
"""
RECEIVER = """
import json, socket, sys
from emulation.jobs.roce_links import OVERHEAD, PAYLOAD, receive_buffer
from emulation.roce.dcqcn import DcqcnSettings, scaled
from emulation.roce.native import compiled, settings_tuple
from emulation.roce.pfc import reply_tos
addr, nbytes, scale, keep = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, reply_tos())  # ACKs, CNPs: as roce_links
s.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)  # SO_RCVBUFFORCE
s.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
s.bind((addr, 4791))
rate = scaled(DcqcnSettings(line_rate_bps=50e9), scale, keep)
r = compiled.transfer(settings_tuple(rate), PAYLOAD, OVERHEAD, 1.0, 16, 30.0,
                      rate.min_time_between_cnps_s, s.fileno(), [],
                      [(0x100, 0, [nbytes]), (0x101, 0, [nbytes])], 0, False, None)
print(json.dumps({"status": r[0], "flows": r[9]}))
"""


def capture(
    sock: socket.socket, sources: dict[str, int], bin_s: float, until: list[bool]
) -> list[list[int]]:
    """Wire bytes per bin per flow of RoCE data arriving on `sock` until `until[0]`."""
    wire = TmConfig().wire_overhead_bytes
    began = time.monotonic()
    bins: list[list[int]] = []
    sock.settimeout(0.05)
    while not until[0]:
        try:
            frame, meta = sock.recvfrom(2048)
        except TimeoutError:
            continue
        if meta[2] == socket.PACKET_OUTGOING or frame[12:14] != b"\x08\x00" or frame[23] != 17:
            continue
        if int.from_bytes(frame[36:38], "big") != PORT:
            continue
        flow = sources.get(socket.inet_ntoa(frame[26:30]))
        if flow is None:
            continue
        index = int((time.monotonic() - began) / bin_s)
        while len(bins) <= index:
            bins.append([0] * len(sources))
        bins[index][flow] += len(frame) + wire
    return bins


def converged(
    rates: list[tuple[float, float]], fair: float, tolerance: float, hold: int
) -> int | None:
    """The first bin from which both flows stay within `tolerance` of `fair` for `hold` bins."""
    ok = [abs(a - fair) <= tolerance * fair and abs(b - fair) <= tolerance * fair for a, b in rates]
    for i in range(len(ok) - hold + 1):
        if all(ok[i : i + hold]):
            return i
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", type=float, default=0.001)
    parser.add_argument("--megabytes", type=float, default=12.0, help="per flow")
    parser.add_argument("--stagger", type=float, default=0.5, help="s between the starts")
    parser.add_argument("--bin-ms", type=float, default=50.0)
    parser.add_argument("--tolerance", type=float, default=0.10)
    parser.add_argument("--hold-s", type=float, default=0.5, help="fair this long: converged")
    parser.add_argument(
        "--keep",
        choices=("timers", "packets"),
        default="timers",
        help="DCQCN's scaling (roce.dcqcn.scaled)",
    )
    parser.add_argument("--ignore-pfc", action="store_true", help="senders ignore pauses")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    import threading

    topo = load_topology("leaf-spine:1:1:3")
    nic_bps = topo.nic_gbps() * 1e9
    link_bps = nic_bps * args.scale
    nbytes = int(args.megabytes * 1e6)
    bin_s = args.bin_ms / 1e3
    args.out.mkdir(parents=True, exist_ok=True)
    with EmulatedFabric(topo, FabricOptions(scale=args.scale)) as fabric:
        h = fabric.hosts
        priority = fabric.profile.tm.pfc.priority  # one setting for switch and hosts
        classes = RoceClasses(fabric).start()  # RoCE in its PFC class, TCP in class 0
        sources = {h["s01"].ip: 0, h["s02"].ip: 1}
        reader = fabric.session().__enter__()
        before = Snapshot.of(time.monotonic(), reader.read_counters())
        sock = fabric.packet_socket("s03")
        done = [False]
        result: list[list[list[int]]] = []
        watcher = threading.Thread(
            target=lambda: result.append(capture(sock, sources, bin_s, done))
        )
        watcher.start()
        pipe = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
        rx = fabric.lab.popen(h["s03"].namespace, [sys.executable, "-c", RECEIVER, h["s03"].ip, str(nbytes), str(args.scale), args.keep], **pipe)  # fmt: skip
        time.sleep(1.0)
        senders = []
        for k, server in enumerate(("s01", "s02")):
            argv = [sys.executable, "-c", SENDER, h[server].ifname, h[server].ip, h["s03"].ip,
                    str(0x100 + k), str(nic_bps), str(args.scale), str(nbytes), args.keep, "0" if args.ignore_pfc else "1", str(priority)]  # fmt: skip
            senders.append(fabric.lab.popen(h[server].namespace, argv, **pipe))
            time.sleep(args.stagger)
        outs = [json.loads(p.communicate(timeout=300)[0] or "{}") for p in senders]
        rx_out = json.loads(rx.communicate(timeout=60)[0] or "{}")
        done[0] = True
        watcher.join()
        sock.close()
        time.sleep(0.2)
        ports = deltas(before, Snapshot.of(time.monotonic(), reader.read_counters()))
        reader.__exit__(None, None, None)
        classes.stop()
    bins = result[0]
    rates = [(a * 8 / bin_s, b * 8 / bin_s) for a, b in bins]
    # both flows running: from the second's first bytes to the first one's end
    both = [i for i, (a, b) in enumerate(rates) if a > 0 and b > 0]
    window = rates[both[0] : both[-1] + 1] if both else []
    fair = link_bps / 2
    hold = max(1, round(args.hold_s / bin_s))
    start = converged(window, fair, args.tolerance, hold)
    after = window[start:] if start is not None else []
    tol = args.tolerance * fair
    ok = [abs(a - fair) <= tol and abs(b - fair) <= tol for a, b in after]
    ok_all = [abs(a - fair) <= tol and abs(b - fair) <= tol for a, b in window]
    summary = {
        "link_mbps": link_bps / 1e6,
        "fair_mbps": fair / 1e6,
        "bin_ms": args.bin_ms,
        "both_running_s": len(window) * bin_s,
        "converged_after_s": None if start is None else round(start * bin_s, 3),
        "fair_share_of_bins_after": round(sum(ok) / len(ok), 3) if ok else None,
        "fair_share_of_bins_both_running": round(sum(ok_all) / len(ok_all), 3) if ok_all else None,
        "mean_mbps_after": [round(sum(r[i] for r in after) / len(after) / 1e6, 2) for i in (0, 1)]
        if after
        else None,
        "senders": outs,
        # the P4 counters (tail drops are not among them: the senders' retransmits say)
        "switch": {
            "ecn_marked": sum(p.ecn_marked_packets for p in ports),
            "wred_dropped": sum(p.wred_dropped_packets for p in ports),
        },
        "roce_classes": classes.record(),
        "receiver_status": rx_out.get("status"),
        "receiver_flows": rx_out.get("flows"),  # accepted, marked, cnps, naks, early
    }
    with (args.out / "rates.csv").open("w") as f:
        f.write("time_s,s01_mbps,s02_mbps\n")
        for i, (a, b) in enumerate(rates):
            f.write(f"{i * bin_s:.3f},{a / 1e6:.3f},{b / 1e6:.3f}\n")
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    plot(rates, bin_s, fair, args.tolerance, args.out / "rates.png")
    print(json.dumps(summary, indent=2))


def plot(
    rates: list[tuple[float, float]], bin_s: float, fair: float, tol: float, path: Path
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [i * bin_s for i in range(len(rates))]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.plot(t, [a / 1e6 for a, _ in rates], label="s01 -> s03")
    ax.plot(t, [b / 1e6 for _, b in rates], label="s02 -> s03")
    ax.axhspan(
        (1 - tol) * fair / 1e6, (1 + tol) * fair / 1e6, color="0.85", label="fair share +-10%"
    )
    ax.set_xlabel("time (s)")
    ax.set_ylabel("Mbit/s on the wire")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
