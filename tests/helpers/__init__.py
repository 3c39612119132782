"""Helpers the tests share: not tests themselves (pytest collects no test_* here)."""

import sys
from pathlib import Path

CASSINI = str(Path(sys.executable).parent / "cassini")  # the command line of this venv
