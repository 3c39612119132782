"""The probes of `bench_latency.py`: a sender and a receiver, each run as its own
Python inside a network namespace (so neither the benchmark's work nor the
switch's shares their interpreter).

    python latency_probe.py send --ifname IF --run-id N --frame HEX --start T --seconds S --interval I
    python latency_probe.py receive --ifname IF --run-id N
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import struct
import sys
import time
from collections.abc import Sequence

MAGIC = 0xCA55_1A7E
PAYLOAD = struct.Struct("!IIIQ")  # magic, run id, sequence number, send time (ns, CLOCK_REALTIME)
HEADER_BYTES = 14 + 20 + 8  # Ethernet + IPv4 + UDP
MAC_A = "02:00:00:00:0a:01"
MAC_B = "02:00:00:00:0b:01"
SO_TIMESTAMPNS = 35  # also SCM_TIMESTAMPNS
PACKET_OUTGOING = 4


def probe_frame() -> bytes:
    """A minimum-size UDP frame A -> B whose payload the sender patches in place.

    The UDP checksum is 0 (none, legal for IPv4), so patching the payload
    keeps the frame valid; the IPv4 checksum covers the header only.
    """
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    frame = (
        Ether(dst=MAC_B, src=MAC_A)
        / IP(src="10.0.0.1", dst="10.0.0.2")
        / UDP(sport=40000, dport=40001, chksum=0)
        / (b"\x00" * PAYLOAD.size)
    )
    return bytes(frame).ljust(60, b"\x00")


def sender(
    ifname: str, frame: bytes, run_id: int, start: float, seconds: float, interval: float
) -> None:
    """Send one stamped frame every `interval` s from `start` (wall clock) for `seconds`.

    A late wake-up sends at once and keeps the schedule, without bursts to
    catch up; the JSON it prints says how late the worst wake-up was, so a
    disturbed sender can be told from a slow switch.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the benchmark stops us (SIGTERM)
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    sock.bind((ifname, 0))
    buf = bytearray(frame)
    seq, late_max = 0, 0.0
    slot = start
    end = start + seconds
    while True:
        now = time.time()
        if slot > now:
            time.sleep(slot - now)
            now = time.time()
        if now >= end:
            break
        late_max = max(late_max, now - slot)
        PAYLOAD.pack_into(buf, HEADER_BYTES, MAGIC, run_id, seq, time.time_ns())
        try:
            sock.send(buf)
            seq += 1
        except OSError:
            pass  # counted as not sent
        slot = max(slot + interval, now)  # no catch-up burst
    print(json.dumps({"sent": seq, "late_max_ms": late_max * 1e3}), flush=True)


def receiver(ifname: str, run_id: int) -> None:
    """Collect [seq, send ns, latency ns] of our probes until stdin closes; print them as JSON."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
    sock.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    sock.bind((ifname, 0x0003))
    stamp = struct.Struct("qq")
    samples: list[tuple[int, int, int]] = []
    seen: set[int] = set()
    duplicates = unstamped = 0
    print("ready", flush=True)
    stdin = sys.stdin.fileno()
    while True:
        readable, _, _ = select.select([sock, stdin], [], [], 1.0)
        if sock in readable:
            while True:
                try:
                    data, ancillary, _flags, address = sock.recvmsg(
                        2048, socket.CMSG_SPACE(stamp.size), socket.MSG_DONTWAIT
                    )
                except BlockingIOError:
                    break
                if address[2] == PACKET_OUTGOING or len(data) < HEADER_BYTES + PAYLOAD.size:
                    continue
                magic, rid, seq, sent_ns = PAYLOAD.unpack_from(data, HEADER_BYTES)
                if magic != MAGIC or rid != run_id:
                    continue
                rx_ns = None
                for level, kind, value in ancillary:
                    if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                        sec, nsec = stamp.unpack_from(value)
                        rx_ns = sec * 1_000_000_000 + nsec
                if rx_ns is None:
                    unstamped += 1
                    continue
                if seq in seen:
                    duplicates += 1
                    continue
                seen.add(seq)
                samples.append((seq, sent_ns, rx_ns - sent_ns))
        if stdin in readable and not os.read(stdin, 4096):
            break
    out = {"samples": samples, "duplicates": duplicates, "unstamped": unstamped}
    print(json.dumps(out), flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="a probe of bench_latency.py")
    parser.add_argument("role", choices=["send", "receive"])
    parser.add_argument("--ifname", required=True)
    parser.add_argument("--run-id", type=int, default=0)
    parser.add_argument("--frame")
    parser.add_argument("--start", type=float)
    parser.add_argument("--seconds", type=float)
    parser.add_argument("--interval", type=float)
    args = parser.parse_args(argv)
    if args.role == "send":
        sender(
            args.ifname,
            bytes.fromhex(args.frame),
            args.run_id,
            args.start,
            args.seconds,
            args.interval,
        )
    else:
        receiver(args.ifname, args.run_id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
