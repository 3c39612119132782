"""Does a wheel built from a clean checkout carry the P4Runtime stubs?

`controlplane/proto/` is generated (scripts/gen_protos.py), git-ignored and
never committed; the build generates it (setup.py's build_py). The wheel is
built as a user builds it, `pip wheel .` with build isolation, so the build
requirements of pyproject.toml (grpcio-tools, googleapis-common-protos, the
pinned finsy) come from the package index: this test needs it (about 10 s with
pip's cache warm).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STUBS = (
    "controlplane/proto/__init__.py",
    "controlplane/proto/p4/v1/p4runtime_pb2.py",
    "controlplane/proto/p4/v1/p4runtime_pb2_grpc.py",
    "controlplane/proto/p4/v1/p4runtime_pb2.pyi",
    "controlplane/proto/p4/v1/p4data_pb2.py",
    "controlplane/proto/p4/config/v1/p4info_pb2.py",
    "controlplane/proto/p4/config/v1/p4types_pb2.py",
)
P4INFO = "p4src/cassini.p4info.txtpb"


def _checkout(into: Path) -> None:
    """The files a clean checkout of this tree has: what git tracks or would track
    (as they are now), none of what it ignores (.venv, build/, controlplane/proto/)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.fail("needs git and the repository (a clean checkout is what git tracks)")
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():  # not a file deleted in the working tree
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)


def test_a_wheel_from_a_clean_checkout_has_the_stubs_and_the_p4info(tmp_path: Path) -> None:
    source, wheels = tmp_path / "src", tmp_path / "wheels"
    _checkout(source)
    assert (source / "setup.py").is_file() and (source / "scripts" / "gen_protos.py").is_file()
    assert not (source / "controlplane" / "proto").exists()  # the checkout has no stubs
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(source), "-w", str(wheels)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = wheels.glob("cassini_harness-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    missing = [n for n in (*STUBS, P4INFO) if n not in names]
    assert missing == [], f"not in {wheel.name}: {missing}"
    # The wheel's stubs load (compiled protobuf or not) and parse the wheel's P4Info.
    probe = (
        "import sys, zipfile\n"
        "from google.protobuf import text_format\n"
        "from controlplane.proto.p4.config.v1 import p4info_pb2\n"
        "from controlplane.proto.p4.v1 import p4runtime_pb2\n"
        "assert p4runtime_pb2.__file__.startswith(sys.argv[1]), p4runtime_pb2.__file__\n"
        f"text = zipfile.ZipFile(sys.argv[1]).read('{P4INFO}').decode()\n"
        "info = text_format.Parse(text, p4info_pb2.P4Info())\n"
        "request = p4runtime_pb2.SetForwardingPipelineConfigRequest(device_id=1)\n"
        "request.config.p4info.CopyFrom(info)\n"
        "print(len(info.tables), len(request.SerializeToString()))\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe, str(wheel)],
        capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
        env={"PYTHONPATH": str(wheel), "PATH": ""},
    )  # fmt: skip
    assert loaded.returncode == 0, loaded.stderr
    tables, size = (int(x) for x in loaded.stdout.split())
    assert tables > 0 and size > 1000
