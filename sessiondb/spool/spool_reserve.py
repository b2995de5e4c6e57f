"""Space the spool holds ahead of need, so a full disk cannot take it first.

The spool is written exactly when the store's filesystem may be full; by
then the store's own ``-wal`` has taken whatever was free. So while space is
plentiful (when a store opens, after an import) ``<spool dir>/.reserve`` is
created: a 0600 file of size 0 with `RESERVE_BYTES` of blocks allocated past
its end (``fallocate(FALLOC_FL_KEEP_SIZE)``). A spool write that starts a new
spool file adopts the reserve by renaming it, and appends into those blocks:
no allocation needed. A write to an existing spool file releases the
reserve (unlinks it) right before it writes. Where the filesystem cannot
preallocate without changing the size, the reserve is a plain file of that
size and is only released, never adopted.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
from pathlib import Path
from typing import Literal

from ..base import StorageError, paths

log = logging.getLogger(__name__)

RESERVE_NAME = ".reserve"
RESERVE_BYTES = 256 << 10
_FALLOC_FL_KEEP_SIZE = 1

_libc: ctypes.CDLL | Literal[False] | None = None  # False: looked, unavailable


def _fallocate_keep_size(fd: int, length: int) -> bool:
    """Allocate ``length`` bytes past EOF without changing the size (Linux);
    False when the call is unavailable or the filesystem does not support it."""
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            _libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64,
                                        ctypes.c_int64]
        except (OSError, AttributeError):
            _libc = False
    if not _libc:
        return False
    if _libc.fallocate(fd, _FALLOC_FL_KEEP_SIZE, 0, length) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
        return False
    raise OSError(code, os.strerror(code))


def reserve_path(directory: Path) -> Path:
    return directory / RESERVE_NAME


def allocated(path: Path) -> int:
    """Bytes the filesystem holds for ``path`` (0 when it is missing)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return 0
    return st.st_blocks * 512


def ensure(directory: Path, size: int = RESERVE_BYTES) -> bool:
    """Make sure ``directory`` holds a reserve of ``size`` bytes; True when it
    does. Never raises for a full or read-only disk: it just cannot reserve."""
    path = reserve_path(directory)
    try:
        if allocated(path) >= size:
            return True
        paths.ensure_private_dir(directory)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                     paths.FILE_MODE)
        try:
            os.fchmod(fd, paths.FILE_MODE)
            if not _fallocate_keep_size(fd, size):
                os.posix_fallocate(fd, 0, size)
            os.fsync(fd)
        finally:
            os.close(fd)
    except (OSError, StorageError) as e:  # ensure_private_dir raises typed errors
        log.debug("could not reserve %d bytes for the spool in %s: %s", size, directory, e)
        return False
    return True


def adopt(directory: Path, target: Path) -> bool:
    """Turn the reserve into the new (empty) spool file ``target``; False when
    there is no adoptable reserve or ``target`` exists."""
    path = reserve_path(directory)
    try:
        st = os.lstat(path)
        if st.st_size != 0 or not st.st_blocks:
            return False  # a plain-size reserve: its bytes are not a spool file's
        os.link(path, target)  # fails if target exists: never replaces a spool file
        os.unlink(path)
    except OSError:
        return False
    return True


def release(directory: Path) -> None:
    """Give the reserve's blocks back to the filesystem (right before a write
    to a spool file that could not adopt it)."""
    try:
        os.unlink(reserve_path(directory))
    except OSError:
        pass


__all__ = ["ensure", "adopt", "release", "reserve_path", "RESERVE_NAME", "RESERVE_BYTES"]
