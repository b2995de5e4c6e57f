"""An apsw VFS shim that tells which thread writes the main database file.

In WAL mode a commit writes only the -wal; the main database file is
written by checkpoints. `ThreadVFS` records, for every write to a main
database file, the name of the thread that made it, and every open and
close of one (with the opening thread's name), so a test can say who
checkpointed and in what order connections let go. It can also hold or
refuse the opens made by threads whose name starts with a prefix (the
background checkpointer's), standing in for a slow or failing open.
"""
from __future__ import annotations

import itertools
import threading

import apsw

_ids = itertools.count(1)


class ThreadFile(apsw.VFSFile):
    def __init__(self, vfs: "ThreadVFS", name, flags: list[int]) -> None:
        super().__init__("", name, flags)
        self.vfs = vfs
        self.main = bool(flags[0] & apsw.SQLITE_OPEN_MAIN_DB)
        self.opener = threading.current_thread().name
        self.id = next(_ids)

    def xWrite(self, data, offset: int) -> None:
        if self.main:
            with self.vfs.lock:
                self.vfs.main_writes.append(threading.current_thread().name)
        super().xWrite(data, offset)

    def xClose(self) -> None:
        if self.main:
            with self.vfs.lock:
                self.vfs.events.append(("close", self.opener, self.id))
        super().xClose()


class ThreadVFS(apsw.VFS):
    """Registered under ``name``; see the module docstring."""

    def __init__(self, name: str, prefix: str = "hermes-checkpointer") -> None:
        self.name, self.prefix = name, prefix
        self.lock = threading.Lock()
        self.main_writes: list[str] = []
        self.events: list[tuple[str, str, int]] = []
        self.refuse = False  # opens by ``prefix`` threads fail (SQLITE_CANTOPEN)
        self.release = threading.Event()  # opens by ``prefix`` threads wait for this...
        self.release.set()
        self.held = threading.Event()  # ...and set this while they wait
        super().__init__(name, "")

    def xOpen(self, name, flags):
        if flags[0] & apsw.SQLITE_OPEN_MAIN_DB and \
                threading.current_thread().name.startswith(self.prefix):
            if self.refuse:
                raise apsw.CantOpenError("refused by the test VFS")
            if not self.release.is_set():
                self.held.set()
                self.release.wait()
        f = ThreadFile(self, name, flags)
        if f.main:
            with self.lock:
                self.events.append(("open", f.opener, f.id))
        return f

    def writers(self) -> set[str]:
        """Names of the threads that wrote a main database file so far."""
        with self.lock:
            return set(self.main_writes)

    def main_writes_by(self, thread_name: str) -> int:
        with self.lock:
            return sum(1 for n in self.main_writes if n == thread_name)
