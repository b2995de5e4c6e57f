"""A real, small filesystem for full-disk and read-only tests: a tmpfs mount.

Mounting needs root (or CAP_SYS_ADMIN); where that is missing the fixtures
skip with that reason, except under CI (the ``CI`` variable set), which
runs as root and must run these tests: there they fail, as a missing
PostgreSQL does. `fill` takes every free byte with a filler file, as
another program filling the disk would.
"""
from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

SIZE = "2M"


def mount_tmpfs(where: Path, size: str = SIZE) -> bool:
    where.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs",
                          str(where)], capture_output=True, text=True)
    return res.returncode == 0


def cannot_mount(reason: str = "needs permission to mount a 2 MiB tmpfs "
                                "(root or CAP_SYS_ADMIN)") -> None:
    """Skip the test, or fail it under CI, where the tmpfs must be there."""
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the tmpfs tests: {reason}")
    pytest.skip(reason)


def unmount(where: Path) -> None:
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


def remount(where: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(where)], check=True,
                   capture_output=True)


def fill(where: Path, name: str = "filler") -> Path:
    """Write zeros until ENOSPC; returns the filler (delete it to free the space)."""
    path = where / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    block = b"\0" * 4096
    try:
        while True:
            try:
                os.write(fd, block)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                if len(block) == 1:
                    break
                block = block[: len(block) // 2]
    finally:
        os.close(fd)
    return path


def free_bytes(where: Path) -> int:
    st = os.statvfs(where)
    return st.f_bavail * st.f_frsize


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    where = tmp_path / "tinyfs"
    if not mount_tmpfs(where):
        cannot_mount()
    try:
        yield where
    finally:
        unmount(where)
