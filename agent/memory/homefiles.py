"""Private, crash-safe files under the home for memories and skills.

Writes go through `sessiondb.base.outfile.private_output` (a 0600 temp file,
fsync, rename over the target, fsync of the directory), so a crash leaves
the old file or the new one, never a torn one. Directories are 0700.
Read-modify-write cycles hold an exclusive ``flock`` on a lock file in the
directory, so two processes (two chats, a chat and a review) never lose
each other's entries.
"""
from __future__ import annotations

import errno
import fcntl
import os
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from sessiondb import FILE_MODE, ensure_private_dir, private_output

from ..errors import HomeFileError

LOCK_NAME = ".lock"


def private_dir(path: Path) -> Path:
    """``path`` as a 0700 directory (parents created 0700 where we create them)."""
    try:
        return ensure_private_dir(path)
    except Exception as e:  # InvalidInput: a file in the way
        raise HomeFileError(str(e), path=str(path)) from e


@contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Hold the directory's exclusive lock (blocks until the other writer is done)."""
    private_dir(directory)
    try:
        fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    except OSError as e:
        raise HomeFileError(f"cannot lock {directory}: {e.strerror}", path=str(directory)) from e
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the flock


def read_text(path: Path) -> str:
    """The file's text, or "" when it does not exist yet. Only a regular file
    is read: a symlink (or FIFO, device) put where a memory or skill file of
    ours belongs is refused, so no other file's text reaches the model."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return ""
    except OSError as e:
        why = ("it is a symbolic link; hermes reads only files it wrote"
               if e.errno == errno.ELOOP else e.strerror or str(e))
        raise HomeFileError(f"cannot read {path}: {why}", path=str(path)) from e
    try:
        with os.fdopen(fd, encoding="utf-8") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise HomeFileError(f"cannot read {path}: not a regular file", path=str(path))
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise HomeFileError(f"cannot read {path}: {e}", path=str(path)) from e


def write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` crash-safely (0600)."""
    private_dir(path.parent)
    try:
        with private_output(path, force=True) as f:
            f.write(text)
    except Exception as e:  # OutputError from sessiondb
        raise HomeFileError(str(e), path=str(path)) from e


def clean_stale_temps(path: Path) -> int:
    """Remove temp files a crashed writer of ``path`` left behind. Call only
    under the directory's lock: then no writer is mid-way through one."""
    removed = 0
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        try:
            tmp.unlink()
            removed += 1
        except OSError:
            pass
    return removed
