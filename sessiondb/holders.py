"""Which other processes hold a store open, read from the kernel's lock table.

SQLite's unix VFS takes POSIX advisory locks: in WAL mode every open
connection keeps a shared lock on the ``-shm`` file (its "DMS" byte) and a
shared lock on the database file for as long as it is open, idle or not.
Linux lists every such lock, with the owning pid, in ``/proc/locks``.
Reading that table is safe; opening and closing our own descriptor on the
``-shm`` file would not be (closing any descriptor drops all of this
process's POSIX locks on the file, including SQLite's).

In rollback-journal (DELETE) mode an idle connection holds no lock, so only
processes inside a transaction are seen; callers document that limit.
Without ``/proc/locks`` (not Linux) the answer is None: unknown.
"""
from __future__ import annotations

import os
from pathlib import Path

PROC_LOCKS = Path("/proc/locks")
SIDECARS = ("", "-wal", "-shm", "-journal")


def _inodes(db_path: Path) -> set[int]:
    found = set()
    for suffix in SIDECARS:
        try:
            found.add(os.stat(f"{db_path}{suffix}").st_ino)
        except OSError:
            continue
    return found


def _parse(line: str) -> tuple[int, int] | None:
    """(pid, inode) from one /proc/locks line, or None for lines we skip.

    Format: ``1: POSIX  ADVISORY  READ 7449 fe:00:2188086 128 128``; lines
    starting with ``->`` are waiters, not holders.
    """
    fields = line.split()
    if len(fields) < 6 or fields[1] == "->":
        return None
    try:
        pid = int(fields[4])
        inode = int(fields[5].rsplit(":", 1)[1])
    except (ValueError, IndexError):
        return None
    return pid, inode


def other_holders(db_path: str | os.PathLike[str]) -> list[int] | None:
    """Pids of other processes holding locks on the store's files.

    Matches by inode number only (on overlay filesystems the device shown in
    /proc/locks differs from ``stat``); a collision can only make the answer
    more cautious, never less. None when the platform has no lock table.
    """
    try:
        text = PROC_LOCKS.read_text()
    except OSError:
        return None
    inodes = _inodes(Path(db_path))
    me = os.getpid()
    pids = set()
    for line in text.splitlines():
        parsed = _parse(line)
        if parsed and parsed[1] in inodes and parsed[0] != me:
            pids.add(parsed[0])
    return sorted(pids)
