"""Which processes hold a store's files: open (``/proc/*/fd``) or locked (``/proc/locks``).

Both views are kept because each sees what the other misses:

- The lock table. SQLite's unix VFS takes POSIX advisory locks: in WAL mode
  every open connection keeps a shared lock on the ``-shm`` file (its "DMS"
  byte) and a shared lock on the database file for as long as it is open,
  idle or not. Linux lists every such lock, with the owning pid, in
  ``/proc/locks``, for every process, whoever owns it. Reading that table is
  safe; opening and closing our own descriptor on the ``-shm`` file would
  not be (closing any descriptor drops all of this process's POSIX locks on
  the file, including SQLite's). In rollback-journal (DELETE) mode an idle
  connection holds no lock, so only processes inside a transaction are
  seen; callers document that limit. Without ``/proc/locks`` (not Linux)
  the answer is None: unknown. Used before rebuilding the search index.
- Open descriptors. Scanning ``/proc/*/fd`` finds every process that has a
  file of the bundle open, locked or not (an idle DELETE-mode connection
  too), but only among processes we may inspect. Used by recovery's
  snapshot, which must never read a bundle somebody still has open.
"""
from __future__ import annotations

import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..base import SIDECARS

PROC = Path("/proc")
PROC_LOCKS = PROC / "locks"


@dataclass(frozen=True)
class Holder:
    """A process that has one of the bundle's files (by name) open or locked."""

    pid: int
    command: str
    file: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _command(pid_dir: Path) -> str:
    try:
        raw = (pid_dir / "cmdline").read_bytes()
    except OSError:
        return "?"
    return " ".join(p.decode("utf-8", "replace") for p in raw.split(b"\0") if p)[:200] or "?"


def _sorted(holders: list[Holder]) -> list[Holder]:
    return sorted(set(holders), key=lambda h: (h.pid, h.file))


# -- locks ---------------------------------------------------------------------

def _inodes(db_path: Path) -> dict[int, str]:
    """inode -> file name for the database and whichever sidecars exist."""
    found = {}
    for suffix in ("",) + SIDECARS:
        try:
            found[os.stat(f"{db_path}{suffix}").st_ino] = f"{db_path.name}{suffix}"
        except OSError:
            continue
    return found


EOF_OFFSET = sys.maxsize  # a lock "to EOF" ends past any byte SQLite locks


@dataclass(frozen=True)
class LockLine:
    """One lock held on a file, as ``/proc/locks`` lists it (``end`` inclusive)."""

    pid: int
    inode: int
    kind: str  # READ or WRITE
    start: int
    end: int


def parse_lock_line(line: str) -> LockLine | None:
    """One ``/proc/locks`` line, or None for lines we skip.

    Format: ``1: POSIX  ADVISORY  READ 7449 fe:00:2188086 128 128``; lines
    starting with ``->`` are waiters, not holders.
    """
    f = line.split()
    if len(f) < 8 or f[1] == "->":
        return None
    try:
        return LockLine(int(f[4]), int(f[5].rsplit(":", 1)[1]), f[3], int(f[6]),
                        EOF_OFFSET if f[7] == "EOF" else int(f[7]))
    except (ValueError, IndexError):
        return None


def held_locks() -> list[LockLine] | None:
    """Every lock held by another process; None when the platform has no lock table."""
    try:
        text = PROC_LOCKS.read_text()
    except OSError:
        return None
    me = os.getpid()
    return [lk for lk in map(parse_lock_line, text.splitlines()) if lk and lk.pid != me]


def lock_holders(db_path: str | os.PathLike[str]) -> list[Holder] | None:
    """Other processes holding locks on the store's files, from the lock table.

    Matches by inode number only (on overlay filesystems the device shown in
    /proc/locks differs from ``stat``); a collision can only make the answer
    more cautious, never less. None when the platform has no lock table.
    """
    locks = held_locks()
    if locks is None:
        return None
    inodes = _inodes(Path(db_path))
    found = [Holder(lk.pid, _command(PROC / str(lk.pid)), inodes[lk.inode])
             for lk in locks if lk.inode in inodes]
    return _sorted(found)


def other_holders(db_path: str | os.PathLike[str]) -> list[int] | None:
    """Pids of `lock_holders` (None: unknown on this platform)."""
    found = lock_holders(db_path)
    return None if found is None else sorted({h.pid for h in found})


# -- open descriptors -----------------------------------------------------------

def open_holders(files: list[Path], proc: Path = PROC) -> list[Holder]:
    """Processes with any of ``files`` open, found by scanning ``/proc/*/fd``.

    Processes we may not inspect are skipped silently: the scan can only
    name holders, never prove there are none.
    """
    wanted: dict[tuple[int, int], str] = {}
    for f in files:
        try:
            st = os.stat(f)
        except OSError:
            continue
        wanted[(st.st_dev, st.st_ino)] = f.name
    holders: list[Holder] = []
    if not wanted or not proc.is_dir():
        return holders
    for entry in proc.iterdir():
        if entry.name.isdigit():
            holders += _holders_of(entry, wanted)
    return _sorted(holders)


def _holders_of(pid_dir: Path, wanted: dict[tuple[int, int], str]) -> list[Holder]:
    found: list[Holder] = []
    try:
        fds = list((pid_dir / "fd").iterdir())
    except OSError:
        return found
    for fd in fds:
        try:
            st = os.stat(fd)
        except OSError:
            continue
        name = wanted.get((st.st_dev, st.st_ino))
        if name is not None:
            found.append(Holder(int(pid_dir.name), _command(pid_dir), name))
    return found
