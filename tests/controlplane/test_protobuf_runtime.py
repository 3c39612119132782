"""Does the project's environment build and parse messages with the compiled protobuf?"""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from controlplane import protobuf_runtime


def test_the_project_runs_the_compiled_protobuf() -> None:
    # setup.sh installs a protobuf with a compiled wheel; pure Python here is a failure.
    assert protobuf_runtime.implementation() == "upb"
    assert protobuf_runtime.check(io.StringIO())


def test_the_stubs_load_beside_pygnmis_and_googleapis() -> None:
    """Our P4Runtime stubs, googleapis' google.rpc and pygnmi's gNMI in one process."""
    from google.rpc import status_pb2
    from pygnmi.spec.v080 import gnmi_pb2

    from controlplane.proto.p4.v1 import p4runtime_pb2

    error = p4runtime_pb2.StreamMessageResponse(error=p4runtime_pb2.StreamError())
    error.error.canonical_code = 6
    status = status_pb2.Status(code=2)
    status.details.add().Pack(p4runtime_pb2.Error(canonical_code=6))
    assert status_pb2.Status.FromString(status.SerializeToString()) == status
    assert gnmi_pb2.GetRequest(prefix=gnmi_pb2.Path(target="x")).prefix.target == "x"
    # The P4Runtime stubs' google.rpc.Status is googleapis-common-protos' (one registration).
    uses = p4runtime_pb2.StreamError.DESCRIPTOR.file.dependencies
    assert "google/rpc/status.proto" in [d.name for d in uses]
    assert p4runtime_pb2.Error.DESCRIPTOR.file.pool.FindFileByName(
        "google/rpc/status.proto"
    ) is status_pb2.DESCRIPTOR


def test_pure_python_is_reported_once_and_carried_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(protobuf_runtime, "implementation", lambda: "python")
    monkeypatch.setattr(protobuf_runtime, "_checked", False)
    out = io.StringIO()
    assert not protobuf_runtime.check(out)
    assert not protobuf_runtime.check(out)
    assert out.getvalue().count("not 'upb'") == 1, out.getvalue()


def test_a_pure_python_process_says_so_and_still_works() -> None:
    env_code = (
        "from controlplane.session import P4RuntimeSession; "
        "from controlplane.proto.p4.v1 import p4runtime_pb2; "
        "print(p4runtime_pb2.WriteRequest(device_id=3).device_id)"
    )
    result = subprocess.run(
        [sys.executable, "-c", env_code],
        env={"PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "3"
    assert "'python' implementation, not 'upb'" in result.stderr
