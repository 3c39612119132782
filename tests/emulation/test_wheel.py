"""Does the project work installed from its wheel, away from the source tree?

The wheel is built from a copy of the tree and installed without dependencies
into a fresh venv. That venv sees the project's dependencies through a `.pth`
file whose one line is this interpreter's site-packages: a `.pth` line puts a
directory on sys.path without running the `.pth` files inside it, so the
editable install of the project there does not shadow the wheel (checked
below). Every command runs from a folder outside the repository.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from emulation.fabric.netns import NetnsLab
from emulation.housekeeping.prefixes import new_prefix
from emulation.softswitch.switch import READY_PATTERN
from tests.helpers.leftovers import leftovers

ROOT = Path(__file__).resolve().parents[2]
DEPENDENCIES = Path(sysconfig.get_paths()["purelib"])  # this interpreter's site-packages
PACKAGES = ("topologies", "scheduler", "controlplane", "emulation", "p4src")
# Not copied into the build: the tree's environments, caches and outputs.
NOT_SOURCE = shutil.ignore_patterns(
    ".venv", ".venv-*", ".git", "build", "results", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis"
)


@dataclass(frozen=True)
class Installed:
    venv: Path
    site_packages: Path
    cassini: Path
    outside: Path  # a working directory outside the repository
    env: dict[str, str]

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.cassini), *args],
            cwd=self.outside,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def _check(cmd: list[str], timeout: float) -> None:
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    assert result.returncode == 0, f"{' '.join(cmd)} failed:\n{result.stdout}\n{result.stderr}"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    base = tmp_path_factory.mktemp("wheel")
    source, wheels, venv = base / "src", base / "wheels", base / "venv"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCE)
    # Without build isolation the build uses this environment's setuptools and
    # wheel (the dev extra), so no index is needed.
    _check(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         str(source), "-w", str(wheels)],
        timeout=300,
    )  # fmt: skip
    (wheel,) = wheels.glob("cassini_harness-*.whl")
    _check([sys.executable, "-m", "venv", "--without-pip", str(venv)], timeout=120)
    python = venv / "bin" / "python"
    # This pip installs into the new venv; the .pth comes after, so pip never
    # sees the editable install as the one to replace.
    _check(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
         "--no-index", str(wheel)],
        timeout=300,
    )  # fmt: skip
    site_packages = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site_packages / "project-dependencies.pth").write_text(f"{DEPENDENCIES}\n")
    outside = base / "cwd"
    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return Installed(venv, site_packages, venv / "bin" / "cassini", outside, env)


def test_wheel_modules_and_p4_files_come_from_the_venv(installed: Installed) -> None:
    probe = (
        "import json, sys\n"
        f"import {', '.join(PACKAGES)}\n"
        "import emulation.cli, controlplane.p4info as p4info\n"
        "print(json.dumps({\n"
        "    'modules': sorted({m.__file__ for m in list(sys.modules.values())\n"
        "                       if getattr(m, '__file__', None)}),\n"
        "    'p4info': str(p4info.DEFAULT_P4INFO),\n"
        "    'p4': sorted(str(p) for p in p4info.P4_DIR.iterdir()),\n"
        "    'tables': len(p4info.load_p4info().tables),\n"
        "}))\n"
    )
    python = installed.venv / "bin" / "python"
    result = subprocess.run(
        [str(python), "-c", probe],
        cwd=installed.outside,
        env=installed.env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    from_tree = [
        f
        for f in seen["modules"]
        if Path(f).is_relative_to(ROOT) and not Path(f).is_relative_to(DEPENDENCIES)
    ]
    assert from_tree == [], f"imported from the source tree: {from_tree[:5]}"
    assert not any("__editable__" in f for f in seen["modules"]), "the editable finder ran"
    for package in PACKAGES:
        assert str(installed.site_packages / package / "__init__.py") in seen["modules"], package
    p4_dir = installed.site_packages / "p4src"
    assert seen["p4info"] == str(p4_dir / "cassini.p4info.txtpb")
    assert {Path(p).name for p in seen["p4"]} >= {
        "cassini.p4",
        "cassini_tna.p4",
        "cassini.p4info.txtpb",
        "include",
    }
    assert (p4_dir / "include" / "headers.p4").is_file()
    assert seen["tables"] > 0
    # The console script is the wheel's, on the venv's interpreter.
    assert installed.cassini.read_text().splitlines()[0] == f"#!{python}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_wheel_program_dry_run(installed: Installed) -> None:
    # Nothing listens there: a dry run then plans against an empty device.
    result = installed.run(
        "program", "--dry-run", "--json", "-t", "leaf-spine:2:1:2",
        "--grpc", f"127.0.0.1:{_free_port()}", "--timeout", "1",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["dry_run"] and not plan["device"]["reached"]
    assert set(plan["changes"]) == {"CassiniIngress.logical_forward", "CassiniEgress.wred_profile"}
    assert plan["desired"] == sum(c["insert"] for c in plan["changes"].values()) > 0


@pytest.mark.root
def test_wheel_switch_serve(installed: Installed) -> None:
    lab = NetnsLab(new_prefix())
    try:
        port_a, port_b = lab.veth("a", "b")
        process = lab.popen(
            None,
            [str(installed.cassini), "switch", "serve", "-i", f"1@{port_a}", "-i", f"2@{port_b}",
             "--grpc-server-addr", "127.0.0.1:0"],
            stderr=subprocess.PIPE, text=True, cwd=installed.outside, env=installed.env,
        )  # fmt: skip
        assert process.stderr is not None
        lines: list[str] = []
        ready = None
        end = time.monotonic() + 30
        while ready is None and time.monotonic() < end:
            line = process.stderr.readline()
            if not line:
                break
            lines.append(line)
            ready = READY_PATTERN.search(line)
        assert ready, "".join(lines)
        process.send_signal(signal.SIGTERM)
        assert process.wait(15) == 0, "".join(lines) + process.stderr.read()
        assert "Traceback" not in process.stderr.read()
    finally:
        lab.close()
        assert leftovers(lab.prefix) == []


@pytest.mark.root
def test_wheel_fabric_up_check(installed: Installed) -> None:
    result = installed.run(
        "fabric", "up", "--check", "-t", "leaf-spine:2:1:2", "--grpc-server-addr", "127.0.0.1:0",
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "check: 12/12 server pairs answered" in result.stdout + result.stderr
