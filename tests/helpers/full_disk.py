"""A real full disk for a test: a tmpfs of a few KB, mounted and filled (root only)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def tiny_tmpfs(mount: Path, size: str = "64k") -> Iterator[Path]:
    """`mount` as a tmpfs of `size`, unmounted afterwards; writes past it fail ENOSPC."""
    mount.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(folder: Path) -> None:
    """Fill the file system `folder` is on, leaving no block free."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (65536, 4096, 512, 1):
            while True:
                try:
                    os.write(fd, b"x" * size)
                except OSError:
                    break
    finally:
        os.close(fd)
