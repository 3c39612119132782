"""Which secret tells the switch that a gNMI client is the harness's own?

(our choice) A random key in a file of the run folder (`run_files.run_dir`,
owner-only), made on first use and readable only by its user: the switch
reads it when it starts, and the harness's clients send it as the
`cassini-harness-key` metadata (`gnmi_subscriptions.HARNESS_KEY_METADATA`),
which gets them the Subscribe slot kept for the harness. A client of another
user cannot read it; loopback alone would not tell the two apart.
"""

from __future__ import annotations

import fcntl
import os
import secrets
from pathlib import Path

from emulation.housekeeping.run_files import run_dir

from .gnmi_subscriptions import HARNESS_KEY_METADATA

KEY_FILE = "harness.key"


def harness_key(folder: Path | None = None) -> str:
    """The key in `folder` (the run folder by default), made there if there is none."""
    path = (folder if folder is not None else run_dir()) / KEY_FILE
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW
    fd = os.open(path, flags, 0o600)
    with os.fdopen(fd, "r+") as handle:
        fcntl.flock(fd, fcntl.LOCK_EX)  # two switches starting at once make one key
        if os.fstat(fd).st_uid != os.geteuid() or os.fstat(fd).st_mode & 0o077:
            raise PermissionError(f"{path} must be readable by its owner alone")
        key = handle.read().strip()
        if not key:
            key = secrets.token_hex(16)
            handle.write(key + "\n")
    return key


def harness_metadata() -> tuple[tuple[str, str], ...]:
    """The gRPC metadata a harness client sends to be known as the harness (none when
    the key cannot be read: the client then competes for the shared slots)."""
    try:
        return ((HARNESS_KEY_METADATA, harness_key()),)
    except OSError:
        return ()
