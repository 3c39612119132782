"""A standard P4Runtime client (p4runtime-shell) drives the software target.

p4runtime-shell runs as a user runs it: its own program in its own environment
(.venv-p4rt-shell, protobuf<3.21 as it pins) over gRPC; the target runs in the
test process, which lets the test check the DataplaneState the shell's writes
produced.
"""

from __future__ import annotations

import subprocess
import textwrap
import time
from pathlib import Path

from controlplane.p4info import DEFAULT_P4INFO
from emulation.softswitch.p4runtime_service import serve
from tests.helpers.client_envs import P4RUNTIME_SHELL, start_client

SHELL_SCRIPT = textwrap.dedent(
    """
    import os
    import sys
    import time
    import p4runtime_sh.shell as sh
    from p4runtime_sh.p4runtime import P4RuntimeWriteException

    address, p4info_path, bin_path, go_file = sys.argv[1:5]
    sh.setup(device_id=1, grpc_addr=address, election_id=(0, 1),
             config=sh.FwdPipeConfig(p4info_path, bin_path), verbose=False)
    try:
        entry = sh.TableEntry("logical_forward")(action="set_egress_port")
        entry.match["ingress_port"] = "3"
        entry.match["dst_mac"] = "02:00:00:00:00:0a"
        entry.action["port"] = "17"
        entry.insert()
        print("INSERTED")
        try:
            entry.insert()
        except P4RuntimeWriteException as err:
            print("DUPLICATE", str(err).replace("\\n", " "))
        for found in sh.TableEntry("logical_forward").read():
            message = found.msg()
            print("READ", message.match[0].exact.value.hex(), message.match[1].exact.value.hex(),
                  message.action.action.params[0].value.hex())
        # The pipeline push zeroed the counters; the test counts packets now.
        deadline = time.monotonic() + 20
        while not os.path.exists(go_file) and time.monotonic() < deadline:
            time.sleep(0.02)
        counter = sh.CounterEntry("port_rx")
        counter.index = 3
        for cell in counter.read():
            print("COUNTER", cell.msg().index.index, cell.msg().data.packet_count,
                  cell.msg().data.byte_count)
    finally:
        sh.teardown()
    print("DONE")
    from google.protobuf.internal import api_implementation
    print("PROTOBUF", api_implementation.Type())
    """
)


def test_p4runtime_shell_inserts_reads_and_counts(tmp_path: Path) -> None:
    empty_bin = tmp_path / "cassini.bin"
    empty_bin.write_bytes(b"")
    p4info_file = tmp_path / DEFAULT_P4INFO.name  # the shell wants a file path
    p4info_file.write_bytes(DEFAULT_P4INFO.read_bytes())
    go_file = tmp_path / "counted"
    with serve(device_id=1) as running:
        shell = start_client(
            P4RUNTIME_SHELL,
            SHELL_SCRIPT,
            running.address,
            str(p4info_file),
            str(empty_bin),
            str(go_file),
            cwd=tmp_path,
        )
        try:
            deadline = time.monotonic() + 30
            while (
                not running.state.forward and time.monotonic() < deadline and shell.poll() is None
            ):
                time.sleep(0.02)
            running.state.counter("CassiniIngress.port_rx")[3] += (12, 9000)
            go_file.touch()
            stdout, stderr = shell.communicate(timeout=60)
        finally:
            if shell.poll() is None:
                shell.kill()
                shell.wait()
        result = subprocess.CompletedProcess(shell.args, shell.returncode, stdout, stderr)
        output = result.stdout
        assert result.returncode == 0, result.stderr[-2000:]
        assert "INSERTED" in output and "DONE" in output
        # Its own environment: the pure-Python protobuf 3.20 it pins, not ours.
        assert "PROTOBUF python" in output, output
        # p4runtime-shell decoded our per-update error details.
        assert "DUPLICATE" in output and "ALREADY_EXISTS" in output, output
        # Canonical bytestrings: port 3, the MAC without leading zero bytes, port 17.
        assert "READ 03 02000000000a 11" in output, output
        assert "COUNTER 3 12 9000" in output, output
        assert running.state.forward == {(3, bytes.fromhex("02000000000a")): 17}
        # The stream closed at teardown: no client is primary any more.
        assert running.device.primary_election_id() is None
