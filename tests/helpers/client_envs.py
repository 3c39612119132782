"""Where does a reference client (p4runtime-shell, finsy) run, and how does a test run one?

Each has an environment of its own that scripts/setup.sh makes (`.venv-p4rt-shell`,
`.venv-finsy`), with its own pins: p4runtime-shell 0.0.6 pins protobuf<3.21,
which the project's compiled protobuf has left behind; finsy 0.30 brings its
own protobuf, grpcio and stubs (whose google/rpc/status.proto clashes with
googleapis-common-protos' in one process). A test runs a client
as a user would, a separate program talking gRPC to the project's switch. A
missing environment is a failure, not a skip: setup.sh makes it on any machine.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
P4RUNTIME_SHELL = "p4rt-shell"
FINSY = "finsy"


def client_python(name: str) -> Path:
    """The interpreter of `.venv-NAME`; fails (with the fix) when setup.sh has not made it."""
    python = ROOT / f".venv-{name}" / "bin" / "python"
    assert python.is_file(), f"{python} missing: run `bash scripts/setup.sh` (it makes .venv-{name})"
    return python


def start_client(name: str, script: str, *args: str, cwd: Path) -> subprocess.Popen[str]:
    """Run `script` in the client's environment, away from the repository (cwd)."""
    return subprocess.Popen(
        [str(client_python(name)), "-c", script, *args],
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "HOME": str(cwd)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_client(
    name: str, script: str, *args: str, cwd: Path, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    client = start_client(name, script, *args, cwd=cwd)
    try:
        stdout, stderr = client.communicate(timeout=timeout)
    finally:
        if client.poll() is None:
            client.kill()
            client.communicate()
    return subprocess.CompletedProcess(client.args, client.returncode, stdout, stderr)
