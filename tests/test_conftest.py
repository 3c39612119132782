"""The root hook of tests/conftest.py: a root-marked test skips, with the reason, unless root."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT_REASON

ROOT = Path(__file__).resolve().parents[1]
TESTS = """
import pytest

@pytest.mark.root
def test_needs_root() -> None:
    pass

def test_needs_nothing() -> None:
    pass
"""


def _run_as(euid: int, folder: Path) -> subprocess.CompletedProcess[str]:
    """pytest with the project's settings and hook, in a process that sees `euid`."""
    test_file = folder / "test_marked.py"
    test_file.write_text(TESTS)
    # The hook asks os.geteuid(); faking it tests the hook on any machine, root or not.
    code = (
        f"import os, sys, pytest; os.geteuid = lambda: {euid}; sys.exit(pytest.main(sys.argv[1:]))"
    )
    argv = ["-c", str(ROOT / "pyproject.toml"), "-p", "tests.conftest", "-p", "no:cacheprovider"]
    return subprocess.run(
        [sys.executable, "-c", code, *argv, "-q", "-rs", str(test_file)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(("euid", "summary"), [(65534, "1 passed, 1 skipped"), (0, "2 passed")])
def test_a_root_marked_test_skips_with_the_reason_unless_root(
    tmp_path: Path, euid: int, summary: str
) -> None:
    result = _run_as(euid, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert summary in result.stdout, result.stdout
    skip_line = rf"^SKIPPED \[1\] \S*test_marked\.py:\d+: {re.escape(ROOT_REASON)}$"
    assert bool(re.search(skip_line, result.stdout, re.M)) == (euid != 0), result.stdout
