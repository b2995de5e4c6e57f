"""A fault-injecting apsw VFS shim over the default VFS, for storage tests.

`FaultVFS(name)` registers a VFS; open a store with
``SessionDB(path, vfs=name)`` and set the `Faults` fields to inject:

- ``full_after``: the k-th write (counted from arming, any file) and every
  write after it raise SQLITE_FULL, as a full disk does, until cleared;
- ``ioerr_on_sync``: every xSync raises SQLITE_IOERR_FSYNC;
- ``readonly``: databases opened while set are opened read-only, as SQLite
  does itself when the file or filesystem refuses write access (we run as
  root, where chmod does not stop writes, so the shim stands in for a
  read-only mount);
- ``arm_call(op, k, kind)``: only the k-th ``op`` call from arming
  (``write``, ``sync`` or ``truncate``, any file) fails, once, the way the
  default unix VFS reports that errno: ``eio``, ``enospc``, ``eacces``, or
  ``short`` (a write of which only the first half reaches the file).
  `calls` counts every op, armed or not, so a dry run gives N.

Faults are only injected here; the store is never monkeypatched.
"""
from __future__ import annotations

import threading
from collections import Counter
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
    calls: Counter = field(default_factory=Counter)
    armed: tuple[str, int, str] | None = None
    fired: list[tuple[str, int, str]] = field(default_factory=list)

    def arm_full(self, k: int) -> None:
        """Fail the k-th write from now on (k=1: the very next write)."""
        with self.lock:
            self.writes = 0
            self.full_after = k

    def clear(self) -> None:
        with self.lock:
            self.full_after, self.ioerr_on_sync, self.readonly = None, False, False
            self.armed = None

    def arm_call(self, op: str, k: int, kind: str) -> None:
        """Fail only the k-th ``op`` call from now on with ``kind`` (see the module doc)."""
        if op not in SCRIPTED_OPS or kind not in SCRIPTED_OPS[op]:
            raise ValueError(f"cannot inject {kind!r} into {op!r}")
        with self.lock:
            self.calls.clear()
            self.fired.clear()
            self.armed = (op, k, kind)

    def count_call(self, op: str) -> str | None:
        """Count an ``op`` call; the fault kind when this call must fail."""
        with self.lock:
            self.calls[op] += 1
            if self.armed and self.armed[0] == op and self.calls[op] == self.armed[1]:
                self.fired.append(self.armed)
                return self.armed[2]
            return None

    def count_write(self) -> bool:
        """Count a write; True when it must fail with SQLITE_FULL."""
        with self.lock:
            self.writes += 1
            return self.full_after is not None and self.writes >= self.full_after


# What the unix VFS returns for an errno on each call (os_unix.c): a write
# that fails with ENOSPC or comes up short is SQLITE_FULL, any other write
# errno SQLITE_IOERR_WRITE; fsync and ftruncate failures are IOERR whatever
# the errno.
SCRIPTED_OPS: dict[str, dict[str, int]] = {
    "write": {"eio": apsw.SQLITE_IOERR_WRITE, "enospc": apsw.SQLITE_FULL,
              "eacces": apsw.SQLITE_IOERR_WRITE, "short": apsw.SQLITE_FULL},
    "sync": {"eio": apsw.SQLITE_IOERR_FSYNC, "enospc": apsw.SQLITE_IOERR_FSYNC,
             "eacces": apsw.SQLITE_IOERR_FSYNC},
    "truncate": {"eio": apsw.SQLITE_IOERR_TRUNCATE, "enospc": apsw.SQLITE_IOERR_TRUNCATE,
                 "eacces": apsw.SQLITE_IOERR_TRUNCATE},
}


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
        kind = self.faults.count_call("write")
        if kind == "short":
            super().xWrite(bytes(data)[:len(data) // 2], offset)
        if kind:
            raise apsw.exception_for(SCRIPTED_OPS["write"][kind])
        super().xWrite(data, offset)

    def xSync(self, flags: int) -> None:
        self.faults.syncs += 1
        if self.faults.ioerr_on_sync:
            raise apsw.exception_for(apsw.SQLITE_IOERR_FSYNC)
        kind = self.faults.count_call("sync")
        if kind:
            raise apsw.exception_for(SCRIPTED_OPS["sync"][kind])
        super().xSync(flags)

    def xTruncate(self, newsize: int) -> None:
        kind = self.faults.count_call("truncate")
        if kind:
            raise apsw.exception_for(SCRIPTED_OPS["truncate"][kind])
        super().xTruncate(newsize)

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
