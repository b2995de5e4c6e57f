"""A fault-injecting apsw VFS shim over the default VFS, for storage tests.

`FaultVFS(name)` registers a VFS; open a store with
``SessionDB(path, vfs=name)`` and set the `Faults` fields to inject:

- ``full_after``: the k-th write (counted from arming, any file) and every
  write after it raise SQLITE_FULL, as a full disk does, until cleared;
- ``ioerr_on_sync``: every xSync raises SQLITE_IOERR_FSYNC;
- ``readonly``: databases opened while set are opened read-only, as SQLite
  does itself when the file or filesystem refuses write access (we run as
  root, where chmod does not stop writes, so the shim stands in for a
  read-only mount).

Faults are only injected here; the store is never monkeypatched.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

import apsw


@dataclass
class Faults:
    """What the shim injects right now; tests flip these fields."""

    full_after: int | None = None
    ioerr_on_sync: bool = False
    readonly: bool = False
    writes: int = 0
    syncs: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def arm_full(self, k: int) -> None:
        """Fail the k-th write from now on (k=1: the very next write)."""
        with self.lock:
            self.writes = 0
            self.full_after = k

    def clear(self) -> None:
        with self.lock:
            self.full_after, self.ioerr_on_sync, self.readonly = None, False, False

    def count_write(self) -> bool:
        """Count a write; True when it must fail with SQLITE_FULL."""
        with self.lock:
            self.writes += 1
            return self.full_after is not None and self.writes >= self.full_after


class FaultFile(apsw.VFSFile):
    """A file of the default VFS with injected write and sync failures."""

    def __init__(self, faults: Faults, name: apsw.URIFilename | str | None,
                 flags: list[int], readonly: bool) -> None:
        self.faults = faults
        self.readonly = readonly
        super().__init__("", name, flags)

    def xWrite(self, data: bytes, offset: int) -> None:
        if self.faults.count_write():
            raise apsw.exception_for(apsw.SQLITE_FULL)
        super().xWrite(data, offset)

    def xSync(self, flags: int) -> None:
        self.faults.syncs += 1
        if self.faults.ioerr_on_sync:
            raise apsw.exception_for(apsw.SQLITE_IOERR_FSYNC)
        super().xSync(flags)

    def xLock(self, level: int) -> None:
        try:
            super().xLock(level)
        except apsw.IOError:
            # A write lock on a read-only descriptor fails with EBADF; for
            # a read-only file SQLite treats that as "cannot lock now".
            if self.readonly:
                raise apsw.BusyError("read-only file") from None
            raise


class FaultVFS(apsw.VFS):
    """Registers itself under ``name``; `faults` controls what goes wrong."""

    def __init__(self, name: str, faults: Faults | None = None) -> None:
        self.name = name
        self.faults = faults or Faults()
        super().__init__(name, "")

    def xOpen(self, name: apsw.URIFilename | str | None, flags: list[int]) -> FaultFile:
        readonly = bool(self.faults.readonly and flags[0] & apsw.SQLITE_OPEN_MAIN_DB)
        if readonly:
            flags[0] = ((flags[0] & ~(apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE))
                        | apsw.SQLITE_OPEN_READONLY)
        return FaultFile(self.faults, name, flags, readonly)
