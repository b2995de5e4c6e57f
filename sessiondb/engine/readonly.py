"""The connection of a read-only handle: reading a store without writing a byte.

``SQLITE_OPEN_READONLY`` alone does not keep a WAL store's files as they
are. On a store whose ``-wal`` and ``-shm`` are gone (closed cleanly, the
normal case) such a connection creates both and leaves them behind (it may
not checkpoint, so it never deletes them); on a store whose sidecars exist
but no process holds them (a killed writer, a quarantined handle) it takes
the shared-memory index over, truncates it and rebuilds it. So the
connection is chosen by what is on disk:

- ``-wal`` and ``-shm`` there: ``readonly_shm=1``. SQLite maps the index
  read-only; with no live writer to trust it, it reads the ``-wal`` into a
  private index in memory instead (SQLite's read-only WAL support).
- no ``-wal``, WAL recorded in the header: every commit is in the main
  file, so it is read as ``immutable=1`` (no sidecars, no locks). Without
  locks a writer that starts meanwhile is not seen, so the file is
  watched: a ``-wal`` that appears, or a change of the file's inode, size
  or modification time, makes the next read reconnect, and a read during
  which the file changed raises `StoreLocked` (its pages may come from two
  states of the file; reading again is safe).
- ``-wal`` without ``-shm`` (someone deleted the index file): the plain
  read-only connection, which creates a ``-shm``; the committed frames in
  the ``-wal`` are read, never written back.
- a rollback-journal store: the plain read-only connection.
"""
from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote

import apsw

from ..base import StoreLocked, from_apsw

FileStamp = tuple[int, int, int]
WAL_HEADER_OFFSET = 18  # file format bytes 18 and 19 are 2 in WAL mode


def _stamp(path: Path) -> FileStamp | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def header_says_wal(path: Path) -> bool:
    """Whether the file's header records WAL mode (read without SQLite)."""
    try:
        with open(path, "rb") as f:
            f.seek(WAL_HEADER_OFFSET)
            return f.read(2) == b"\x02\x02"
    except OSError:
        return False


class ReadOnlyView:
    """Opens and watches the one connection of a read-only handle."""

    def __init__(self, path: Path, vfs: str | None) -> None:
        self.path, self.vfs = path, vfs
        self.wal, self.shm = Path(f"{path}-wal"), Path(f"{path}-shm")
        self.mode = "plain"
        self.stamp: FileStamp | None = None  # the file as an immutable connection read it

    def connect(self) -> apsw.Connection:
        """A new read-only connection, its mode chosen by the files on disk."""
        wal, shm = self.wal.exists(), self.shm.exists()
        if wal and shm:
            self.mode = "readonly_shm"
        elif not wal and header_says_wal(self.path):
            self.mode, self.stamp = "immutable", _stamp(self.path)
        else:
            self.mode = "plain"
        uri = f"file:{quote(str(self.path))}"
        if self.mode != "plain":
            uri += "?readonly_shm=1" if self.mode == "readonly_shm" else "?immutable=1"
        flags = apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
        try:
            if self.vfs:
                return apsw.Connection(uri, flags=flags, vfs=self.vfs)
            return apsw.Connection(uri, flags=flags)
        except apsw.Error as e:
            raise from_apsw(e, path=str(self.path), context=f"cannot open {self.path}") from e

    def stale(self) -> bool:
        """Whether an immutable connection may no longer see the store as it is."""
        return self.mode == "immutable" and (self.wal.exists()
                                             or _stamp(self.path) != self.stamp)

    def check_unchanged(self) -> None:
        """After a read on an immutable connection: raise when the file changed
        under it (the next read reconnects)."""
        if self.mode == "immutable" and _stamp(self.path) != self.stamp:
            raise StoreLocked(f"{self.path} was written while a read-only handle read it "
                              "without locks; read again", path=str(self.path))


__all__ = ["ReadOnlyView", "header_says_wal"]
