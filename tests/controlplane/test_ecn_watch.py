"""`cassini ecn watch`: what it prints, how it fails without gNMI, and a real
switch whose tail drops the CSV accounts for, interval by interval."""

from __future__ import annotations

import csv
import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from controlplane.telemetry import Interval, PortDelta
from emulation.cli import main
from emulation.cli.ecn_cmds import _print_interval
from emulation.softswitch.p4runtime_service import RunningServer, serve
from tests.helpers import CASSINI


def test_printed_drop_counts_every_loss(capsys: pytest.CaptureFixture[str]) -> None:
    rows = [
        PortDelta(time_s=1.0, interval_s=1.0, port=1, interface="veth1", lost_packets=5),
        PortDelta(
            time_s=1.0,
            interval_s=1.0,
            port=2,
            tx_packets=3,
            wred_dropped_packets=1,
            lost_packets=9,
            tail_dropped=8,
        ),
        PortDelta(time_s=1.0, interval_s=1.0, port=3),
    ]
    _print_interval(Interval(1, 1.0, "2024-01-01T00:00:01.000Z", rows, []), as_json=False)
    lines = capsys.readouterr().out.splitlines()
    assert "dropped=14" in lines[0]
    assert "port   1 veth1" in lines[1] and "drop=5" in lines[1]
    assert "drop=9" in lines[2]  # tail drops too, not only the WRED drop
    assert len(lines) == 3  # the idle port is recorded, not printed


@pytest.fixture
def bare_p4runtime() -> Iterator[RunningServer]:
    from controlplane.p4info import load_p4info
    from controlplane.session import P4RuntimeSession

    server = serve(device_id=3)  # no port_counters: no gNMI, like bmv2
    try:
        with P4RuntimeSession.connect(server.address, 3) as session:
            session.set_pipeline(load_p4info())
        yield server
    finally:
        server.stop()


def test_a_target_without_gnmi_is_one_line_and_no_gnmi_works(
    bare_p4runtime: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    address = bare_p4runtime.address
    argv = ["ecn", "watch", "--grpc", address, "--device-id", "3", "--interval", "500ms"]
    assert main([*argv, "--duration", "0.5s"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert err.startswith(f"cassini: error: the target at {address} serves no gNMI")
    assert "--no-gnmi" in err

    out = tmp_path / "p4only.csv"
    # Intervals well above a read of 512 cells (a duration is the clock's: reads slower
    # than the interval would record fewer intervals, not run longer).
    assert main([*argv, "--duration", "1.5s", "--no-gnmi", "--out", str(out)]) == 0
    with out.open() as fh:
        rows = list(csv.DictReader(fh))
    # Every interval writes every counter index (no gNMI, no chip map), idle or not.
    per_interval: dict[str, int] = {}
    for r in rows:
        per_interval[r["time_s"]] = per_interval.get(r["time_s"], 0) + 1
        assert r["utc"].endswith("Z") and r["tail_dropped"] == ""
    # 3 intervals, or fewer on a machine busy enough to make a read outlast one.
    assert 1 <= len(per_interval) <= 3 and len(set(per_interval.values())) == 1


def _mac(i: int) -> bytes:
    return bytes.fromhex(f"0200000000{i:02x}")


@pytest.mark.root
def test_watch_accounts_for_every_tail_drop_of_a_slow_port(tmp_path: Path) -> None:
    from controlplane.entries import TableEntry, Update, UpdateType
    from controlplane.p4info import load_p4info
    from controlplane.session import P4RuntimeSession
    from emulation.fabric.netns import NetnsLab
    from emulation.housekeeping.prefixes import new_prefix
    from emulation.softswitch.switch import SoftwareSwitch
    from emulation.softswitch.tm_config import PortSettings, TmConfig
    from tests.helpers.leftovers import leftovers

    lab = NetnsLab(new_prefix())
    try:
        ifs: dict[int, str] = {}
        socks: dict[int, socket.socket] = {}
        for i in (1, 2):
            ns = lab.namespace(f"h{i}")
            host_if, switch_if = lab.veth(f"h{i}", f"s{i}", ns_a=ns, mac_a=_mac(i).hex(":"))
            ifs[i] = switch_if
            socks[i] = lab.packet_socket(ns, host_if)
        tm = TmConfig(ports={2: PortSettings(rate_gbps=0.001, queue_cells=40)})  # 1 Mbit/s
        with SoftwareSwitch(1, ifs, "127.0.0.1:0", tm) as switch:
            address = switch.grpc_address
            assert address is not None
            entry = TableEntry(
                "CassiniIngress.logical_forward",
                {"ingress_port": 1, "dst_mac": _mac(2).hex(":")},
                "CassiniIngress.set_egress_port",
                {"port": 2},
            )
            with P4RuntimeSession.connect(address, 1) as session:
                session.set_pipeline(load_p4info())
                session.write([Update(UpdateType.INSERT, entry)])
            out = tmp_path / "watch.csv"
            watcher = subprocess.Popen(
                [
                    CASSINI,
                    "ecn",
                    "watch",
                    "--grpc",
                    address,
                    "--interval",
                    "0.5s",
                    "--duration",
                    "2.5s",
                    "--out",
                    str(out),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            try:
                assert watcher.stdout is not None
                first = watcher.stdout.readline()  # the first interval is done: send now
                assert first.startswith("t="), (
                    first,
                    watcher.stderr.read() if watcher.stderr else "",
                )
                frame = bytes(
                    Ether(dst=_mac(2).hex(":"), src=_mac(1).hex(":"))
                    / IP(src="10.0.0.1", dst="10.0.0.2")
                    / UDP()
                    / (b"\x00" * 950)
                )
                for _ in range(60):
                    socks[1].send(frame)
                stdout, stderr = watcher.communicate(timeout=60)
            finally:
                if watcher.poll() is None:
                    watcher.kill()
                    watcher.wait()
            assert watcher.returncode == 0, stderr
            stats = switch.stats()
        with out.open() as fh:
            rows = list(csv.DictReader(fh))
        tail_dropped = sum(stats["tail_dropped"].values())
        assert tail_dropped > 20  # 60 frames into a 40-cell queue at 1 Mbit/s
        assert sum(int(r["tail_dropped"]) for r in rows) == tail_dropped
        by_time: dict[str, set[str]] = {}
        for r in rows:
            by_time.setdefault(r["time_s"], set()).add(r["port"])
            # gNMI's name of the port (no topology: its chip port), not the veth.
            assert r["utc"].endswith("Z") and r["interface"] == f"port{r['port']}"
        # 2.5 s of 0.5 s intervals: 5, or fewer when a busy machine makes reads slower than
        # the interval (a duration is the clock's); every interval holds both ports.
        assert 2 <= len(by_time) <= 5 and all(p == {"1", "2"} for p in by_time.values())
        port2 = [r for r in rows if r["port"] == "2"]
        assert sum(int(r["out_discards"]) for r in port2) == tail_dropped
        assert sum(int(r["lost_packets"]) for r in port2) == tail_dropped
        printed = [int(m) for m in re.findall(r"port +2 .* drop=(\d+)", stdout)]
        assert sum(printed) == tail_dropped  # what it prints is every loss, not only WRED's
    finally:
        lab.close()
        assert leftovers(lab.prefix) == []


@pytest.mark.root
def test_a_full_disk_stops_the_recording_in_one_line_and_keeps_what_was_written(
    bare_p4runtime: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A 20 s recording written only at the end was lost, with two tracebacks. Now the
    # rows go to disk every interval, and a full disk ends the watch in one line.
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(disk)], check=True)
    try:
        out = disk / "rec.csv"
        argv = ["ecn", "watch", "--grpc", bare_p4runtime.address, "--device-id", "3",
                "--no-gnmi", "--interval", "50ms", "--duration", "20s", "--out", str(out)]  # fmt: skip
        assert main(argv) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith(f"cassini: error: --out {out}: recording stopped after ")
        assert err[-1].endswith("No space left on device") and "Traceback" not in "\n".join(err)
        intervals = int(err[-1].split("after ")[1].split()[0])
        assert intervals >= 1
        with out.open() as fh:
            rows = list(csv.DictReader(fh))
        assert len({r["time_s"] for r in rows if r["utc"]}) >= intervals - 1  # whole intervals
        assert all(r["port"] != "" for r in rows)  # no row cut mid-line
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
