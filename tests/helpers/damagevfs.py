"""An apsw VFS shim that damages what SQLite writes to a main database file.

Registered under a name and passed to `SessionDB(..., vfs=NAME)`; writes to
the main database file at or beyond ``from_offset`` are replaced by zeros,
as a failing disk would. Journals and WAL files are written intact, so the
damage lands when the WAL is checkpointed into the file.
"""
from __future__ import annotations

from pathlib import Path

import apsw
import pytest

import hstate_recovery
from sessiondb import StorageError


class ZeroingFile(apsw.VFSFile):
    def __init__(self, base: str, name, flags: list[int], from_offset: int) -> None:
        super().__init__(base, name, flags)
        self.main = bool(flags[0] & apsw.SQLITE_OPEN_MAIN_DB)
        self.from_offset = from_offset

    def xWrite(self, data, offset: int) -> None:
        if self.main and offset >= self.from_offset:
            data = bytes(len(data))
        super().xWrite(data, offset)


class ZeroingVFS(apsw.VFS):
    def __init__(self, name: str, from_offset: int) -> None:
        self.name, self.from_offset = name, from_offset
        super().__init__(name, "")

    def xOpen(self, name, flags):
        return ZeroingFile("", name, flags, self.from_offset)


class FailingFile(apsw.VFSFile):
    def __init__(self, base: str, name, flags: list[int], after: int) -> None:
        super().__init__(base, name, flags)
        self.main = bool(flags[0] & (apsw.SQLITE_OPEN_MAIN_DB | apsw.SQLITE_OPEN_WAL))
        self.after = after
        self.writes = 0

    def xWrite(self, data, offset: int) -> None:
        if self.main:
            self.writes += 1
            if self.writes > self.after:
                raise apsw.IOError("injected write failure")
        super().xWrite(data, offset)


class FailingVFS(apsw.VFS):
    """Writes to the database or its WAL fail with an I/O error after ``after`` writes."""

    def __init__(self, name: str, after: int) -> None:
        self.after = after
        super().__init__(name, "")

    def xOpen(self, name, flags):
        return FailingFile("", name, flags, self.after)


def recover_on_failing_disk(src: Path, out: Path, work_dir: Path, *, name: str,
                            after: int) -> StorageError:
    """`hstate_recovery.recover` with its output on a disk whose writes fail after
    ``after`` of them; the StorageError it must raise (the caller asserts
    what it left behind)."""
    vfs = FailingVFS(name, after=after)
    try:
        with pytest.raises(StorageError) as info:
            hstate_recovery.recover(src, out, vfs=name, work_dir=work_dir)
    finally:
        vfs.unregister()
    return info.value
