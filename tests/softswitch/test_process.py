"""The packet loop in its own process: the control plane cannot stall it, lose its
counts, or outlive it.

Each test here failed on the single-process switch (service and packet loop
under one interpreter lock): a rolled-back Write restored every counter from
its snapshot and emptied the forwarding table for a moment; SIGTERM during a
large Write waited for the parse to finish; a dead packet loop went unnoticed.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import grpc
import pytest

from controlplane.entries import TableEntry, Update, UpdateType
from controlplane.p4info import load_p4info
from controlplane.p4names import PORT_RX, PORT_TX
from controlplane.proto.p4.v1 import p4runtime_pb2
from controlplane.session import P4RuntimeSession, WriteError
from emulation.fabric.netns import NetnsLab
from emulation.softswitch.switch import READY_PATTERN, SoftwareSwitch
from tests.helpers import CASSINI
from tests.helpers.hosts import mac_of, make_hosts, udp
from tests.helpers.leftovers import leftovers
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.root


def _forward(ingress: int, mac: bytes, port: int) -> TableEntry:
    return TableEntry(
        "logical_forward", {"ingress_port": ingress, "dst_mac": mac.hex(":")}, "set_egress_port",
        {"port": port},
    )  # fmt: skip


def test_rolled_back_writes_lose_no_counts_and_never_stop_forwarding(lab: NetnsLab) -> None:
    """3,000 frames while three large batches are rolled back: every frame arrives, and
    port_rx / port_tx count each one (the old rollback restored the counters' snapshot)."""
    h1, h2 = make_hosts(lab, 2)
    with SoftwareSwitch(1, {1: h1.switch_ifname, 2: h2.switch_ifname}, "127.0.0.1:0") as switch:
        assert switch.grpc_address is not None
        with P4RuntimeSession.connect(switch.grpc_address, 1) as session:
            session.set_pipeline(load_p4info())
            session.write([Update(UpdateType.INSERT, _forward(1, h2.mac, 2))])
            sent = 3000
            received: list[int] = []
            reader = threading.Thread(
                target=lambda: received.append(len(h2.received(quiet=0.5, deadline=60, expect=sent)))
            )
            reader.start()

            def send() -> None:
                for i in range(sent):
                    h1.send(udp(h1, h2.mac, size=100, seq=i))
                    if i % 10 == 0:
                        time.sleep(1e-3)

            sender = threading.Thread(target=send)
            sender.start()
            batch = [
                Update(UpdateType.INSERT, _forward(1, mac_of(0x10 + i % 200), 2 + i // 200))
                for i in range(600)
            ]
            batch.append(Update(UpdateType.INSERT, _forward(1, h2.mac, 2)))  # exists: fails
            rollbacks = 0
            while rollbacks < 3:
                with pytest.raises(WriteError) as failed:
                    session.write(batch, batch_size=len(batch), atomicity="ROLLBACK_ON_ERROR")
                assert len(failed.value.details) == len(batch)  # 600 ABORTED + the duplicate
                rollbacks += 1
            sender.join()
            reader.join()
            assert rollbacks == 3
            assert received == [sent]
            assert wait_for(lambda: switch.counter(PORT_TX)[2, 0] == sent)
            assert switch.counter(PORT_RX)[1, 0] == sent
            assert len(session.read_table('logical_forward')) == 1


def _start_serve(
    lab: NetnsLab, ports: dict[int, str], env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], str]:
    argv = [CASSINI, "switch", "serve", "--grpc-server-addr", "127.0.0.1:0"]
    for port, ifname in ports.items():
        argv += ["-i", f"{port}@{ifname}"]
    environ = {**os.environ, **(env or {})}
    process = lab.popen(None, argv, stderr=subprocess.PIPE, text=True, env=environ)
    assert process.stderr is not None
    seen = []
    for line in process.stderr:
        seen.append(line)
        match = READY_PATTERN.search(line)
        if match:
            return process, match.group(1)
    raise AssertionError("".join(seen))


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found += [int(c) for c in text]
    return found


def test_sigterm_during_a_large_write_stops_without_waiting_for_the_parse(
    lab: NetnsLab,
) -> None:
    """A 12 MB Write takes the pure-Python parser many seconds; SIGTERM must not wait for it.

    The compiled protobuf parses it in a fraction of a second, so the switch runs
    the pure-Python one here: a parse that outlasts the signal is the case to
    guard, and the switch must still run (and say so) without upb. The parse
    needs about 17 s of CPU (a third of this size took 5.6 s), so a switch that
    waited for it would stop 15 s or more after the signal even on an idle core;
    stopped at once it takes well under a second, a few beside busy processes."""
    h1, h2 = make_hosts(lab, 2)
    process, address = _start_serve(
        lab,
        {1: h1.switch_ifname, 2: h2.switch_ifname},
        env={"PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python"},
    )
    try:
        one = p4runtime_pb2.WriteRequest(device_id=1)
        one.election_id.low = 1
        update = one.updates.add()
        update.type = p4runtime_pb2.Update.INSERT
        update.entity.table_entry.table_id = load_p4info().table("logical_forward").id
        update.entity.table_entry.controller_metadata = 1 << 40
        base = p4runtime_pb2.WriteRequest(device_id=1)
        base.election_id.low = 1
        head = base.SerializeToString()
        field = one.SerializeToString()[len(head) :]  # one encoded `updates` field
        request = head + field * 600_000
        channel = grpc.insecure_channel(
            address, options=[("grpc.max_send_message_length", 64 << 20)]
        )
        write = channel.unary_unary(
            "/p4.v1.P4Runtime/Write",
            request_serializer=lambda raw: raw,
            response_deserializer=lambda raw: raw,
        )
        future = write.future(request, timeout=60)
        time.sleep(1.5)  # the server is parsing now
        assert not future.done()
        began = time.monotonic()
        process.send_signal(signal.SIGTERM)
        code = process.wait(60)
        took = time.monotonic() - began
        channel.close()
        assert code == 0
        assert took < 15 / 3, f"stopped {took:.1f} s after SIGTERM"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_dead_packet_loop_stops_the_switch_with_its_cause(lab: NetnsLab) -> None:
    h1, h2 = make_hosts(lab, 2)
    process, _address = _start_serve(lab, {1: h1.switch_ifname, 2: h2.switch_ifname})
    try:
        (loop,) = _children(process.pid)
        assert "emulation.softswitch.datapath_process" in Path(f"/proc/{loop}/cmdline").read_text()
        assert f"process {loop}" in leftovers(lab.prefix)  # `cassini clean` would find it
        began = time.monotonic()
        subprocess.run(["kill", "-KILL", str(loop)], check=True)
        code = process.wait(60)
        # It looks every 0.2 s (WATCH_INTERVAL_S) and ran on for ever before the change.
        assert time.monotonic() - began < 10
        assert code == 1
        assert process.stderr is not None
        rest = process.stderr.read()
        assert re.search(rf"packet loop \(process {loop}\) was killed by SIGKILL", rest), rest
        assert "Traceback" not in rest
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert not [item for item in leftovers(lab.prefix) if item.startswith("process")]


def test_killing_the_switch_takes_its_packet_loop_with_it(lab: NetnsLab) -> None:
    h1, h2 = make_hosts(lab, 2)
    process, _address = _start_serve(lab, {1: h1.switch_ifname, 2: h2.switch_ifname})
    (loop,) = _children(process.pid)
    process.kill()
    process.wait()
    assert wait_for(lambda: not Path(f"/proc/{loop}").exists() or _zombie(loop))


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_write_returns_only_once_the_packet_path_has_it(lab: NetnsLab) -> None:
    """The first frame sent after Write returns is forwarded by the new entry."""
    h1, h2 = make_hosts(lab, 2)
    with SoftwareSwitch(1, {1: h1.switch_ifname, 2: h2.switch_ifname}, "127.0.0.1:0") as switch:
        assert switch.grpc_address is not None
        with P4RuntimeSession.connect(switch.grpc_address, 1) as session:
            session.set_pipeline(load_p4info())
            for i in range(20):
                mac = mac_of(0x40 + i)
                session.write([Update(UpdateType.INSERT, _forward(1, mac, 2))])
                h1.send(udp(h1, mac, seq=i))
            assert len(h2.received(expect=20)) == 20


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def test_an_interface_gone_under_the_switch_is_logged_marked_down_and_costs_no_cpu(
    lab: NetnsLab,
) -> None:
    # Its SCHED_FIFO loop spun at 44% of a core for ever, silently: ppoll kept reporting
    # the ring socket's error, which reading a ring never clears.
    h1, h2, h3 = make_hosts(lab, 3)
    ports = {1: h1.switch_ifname, 2: h2.switch_ifname, 3: h3.switch_ifname}
    process, address = _start_serve(lab, ports)
    try:
        (loop,) = _children(process.pid)
        subprocess.run(["ip", "link", "delete", h1.switch_ifname], check=True)
        assert process.stderr is not None
        seen = []
        for line in process.stderr:  # the switch says so, once
            seen.append(line)
            if "is gone" in line:
                break
        assert f"port 1: interface {h1.switch_ifname} is gone; the port is down" in seen[-1]
        time.sleep(0.5)
        before = _cpu_ticks(loop)
        time.sleep(2.0)
        used = (_cpu_ticks(loop) - before) / 2.0  # ticks per second: 100 is one core
        assert used < 10, f"the packet loop used {used:.0f}% of a core"
        assert process.poll() is None  # it goes on: the other ports still work
        # gNMI names a port of a switch served without a topology port<N>
        assert _oper_status(address, "port1") == "DOWN"
        assert _oper_status(address, "port2") == "UP"
        with P4RuntimeSession.connect(address, 1, (0, 1)) as session:
            session.set_pipeline(load_p4info())  # the service answers as before
            assert session.read_table() == []
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(10)


def _oper_status(address: str, name: str) -> str:
    """gNMI Get of one interface's oper-status, as a controller reads it."""
    from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc

    request = gnmi_pb2.GetRequest(encoding=gnmi_pb2.PROTO)
    path = request.path.add()
    path.elem.add(name="interfaces")
    path.elem.add(name="interface", key={"name": name})
    path.elem.add(name="state")
    path.elem.add(name="oper-status")
    with grpc.insecure_channel(address) as channel:
        reply = gnmi_pb2_grpc.gNMIStub(channel).Get(request, timeout=10)
    (update,) = reply.notification[0].update
    return str(update.val.string_val)
