"""Containment: quarantine on corruption and detection of replaced files.

A `Guard` belongs to one `SessionDB` handle. Before each write transaction
it checks the process-wide quarantine latch, that the path still names the
inode the handle opened, that the handle's `-wal` is still there, and
(inside the transaction) that the file's generation stamp is unchanged.
When a write hits structural corruption, or the file turns out to be
replaced, the handle quarantines itself: later writes fail before touching
the file, its connections will close without a checkpoint, and the latch
(keyed by device and inode) tells every other handle in the process.

Structural damage is also recorded beside the store (damage_record.py),
and a handle that opens on a file with such a record opens quarantined:
the refusal outlives the process that found the damage.

The generation is a random 31-bit number kept in the header's
`application_id` and in `state_meta`. The header is read through one
read-only descriptor per inode, shared by every handle in the process and
closed only after the last of them has closed its SQLite connections:
closing a descriptor cancels all of the process's POSIX locks on that file,
so we never open-and-close one beside a live connection.
"""
from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ContextManager, Iterable, Iterator

import apsw

from ..base import (Cause, FILE_MODE, OutputError, SearchIndexCorrupt, StorageError, StoreCorrupt,
                    StoreReplaced, create_private_file, from_apsw, one, publish, temp_name)
from ..index import corruption_is_index_only, fts_structures_damaged
from .damage_record import read_record, record_damage

log = logging.getLogger(__name__)

GENERATION_KEY = "generation"
SQLITE_MAGIC = b"SQLite format 3\x00"
APPLICATION_ID_OFFSET = 68

FileKey = tuple[int, int]


@dataclass(frozen=True)
class Quarantine:
    """Why a file identity is quarantined in this process."""

    cause: Cause
    reason: str
    generation: int | None
    recorded: bool = False  # from the record beside the store, not this process


_latch: dict[FileKey, Quarantine] = {}
_latch_lock = threading.Lock()
_fds: dict[FileKey, list[int]] = {}  # key -> [fd, handles using it]
_fds_lock = threading.Lock()


def latched(key: FileKey) -> Quarantine | None:
    """The quarantine recorded for a file identity in this process, if any.

    A lone dict lookup is atomic under the GIL and entries are only ever
    added (under the lock), so the read, once per write, takes no lock."""
    return _latch.get(key)


def _set_latch(key: FileKey, q: Quarantine) -> None:
    with _latch_lock:
        _latch.setdefault(key, q)


def _acquire_fd(path: Path) -> tuple[FileKey, int]:
    st = os.stat(path)
    key = (st.st_dev, st.st_ino)
    with _fds_lock:
        entry = _fds.get(key)
        if entry is None:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            fst = os.fstat(fd)
            key = (fst.st_dev, fst.st_ino)  # the file we really hold
            entry = _fds.setdefault(key, [fd, 0])
        entry[1] += 1
        return key, entry[0]


def _release_fd(key: FileKey) -> None:
    """Called after the handle's SQLite connections are closed."""
    with _fds_lock:
        entry = _fds.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            del _fds[key]
            os.close(entry[0])


@contextmanager
def shared_descriptor(path: Path) -> Iterator[int]:
    """A read-only descriptor of ``path`` for a short read (identification):
    the one this process already holds for the inode, if any, so closing it
    never cancels a live connection's locks (see the module docstring)."""
    key, fd = _acquire_fd(path)
    try:
        yield fd
    finally:
        _release_fd(key)


def disk_application_id(fd: int) -> int | None:
    """The header's application_id as the file on disk says (None: no header)."""
    head = os.pread(fd, 100, 0)
    if len(head) < 100 or not head.startswith(SQLITE_MAGIC):
        return None
    return int.from_bytes(head[APPLICATION_ID_OFFSET:APPLICATION_ID_OFFSET + 4], "big",
                          signed=True)


def new_generation() -> int:
    """A random positive, non-zero 31-bit stamp (application_id is signed)."""
    return secrets.randbits(31) or 1


def stamp_generation(conn: apsw.Connection, generation: int | None = None) -> int:
    """Write the stamp into the header and ``state_meta`` (caller's transaction)."""
    generation = generation or new_generation()
    conn.execute(f"PRAGMA application_id={int(generation)}")
    conn.execute("INSERT INTO state_meta(key, value) VALUES (?, ?) ON CONFLICT(key)"
                 " DO UPDATE SET value = excluded.value", (GENERATION_KEY, str(generation)))
    return generation


def read_stamp(conn: apsw.Connection) -> tuple[int, str | None]:
    """(application_id, state_meta generation) as SQLite sees them."""
    (app_id,) = one(conn.execute("PRAGMA application_id"))
    row = conn.execute("SELECT value FROM state_meta WHERE key = ?",
                       (GENERATION_KEY,)).fetchone()
    return int(app_id), (row[0] if row else None)


class Guard:
    """Containment state of one store handle (see the module docstring)."""

    def __init__(self, path: Path, connections: Callable[[], Iterable[apsw.Connection | None]]
                 ) -> None:
        self.path = path
        self._name, self._wal_name = str(path), f"{path}-wal"  # stat'ed before every write
        self._connections = connections
        self.key: FileKey | None = None
        self._fd: int | None = None
        self.generation: int | None = None
        self._disk_zero_ok = False
        self._wal_key: FileKey | None = None
        self._wal_mode = False
        self.quarantine: Quarantine | None = None
        # The writer's data version (SQLITE_FCNTL_DATA_VERSION) at which SQLite's
        # view of the stamp was last known to be ours; see `check_in_transaction`.
        self._view_version: int | None = None
        self.on_quarantine: list[Callable[[], None]] = []  # e.g. stop the checkpointer

    # -- opening -----------------------------------------------------------

    def attach(self, conn: apsw.Connection) -> None:
        """Right after the writer connects: pin the inode, honour the latch."""
        self.key, self._fd = _acquire_fd(self.path)
        q = latched(self.key)
        if q is not None and (q.generation is None or q.generation == self._app_id(conn)):
            self.quarantine = q
            raise self._refusal()
        rec = read_record(self.path)
        if rec is not None and rec.names(self.path):
            # Another process found the damage: read, never write (nor checkpoint).
            self._quarantine_self(Quarantine(Cause.CORRUPT, rec.describe(), None, True))

    @staticmethod
    def _app_id(conn: apsw.Connection) -> int | None:
        try:
            return int(one(conn.execute("PRAGMA application_id"))[0])
        except apsw.Error:
            return None

    def establish(self, conn: apsw.Connection,
                  atomic: Callable[[], ContextManager[apsw.Connection]]) -> None:
        """After migrations: make sure the file is stamped, remember the stamp
        and the -wal it uses."""
        app_id, meta = read_stamp(conn)
        if app_id == 0 or meta != str(app_id):
            with atomic() as c:
                app_id = stamp_generation(c, app_id or None)
        if self._fd is not None and disk_application_id(self._fd) != app_id:
            try:  # a new stamp may still sit in the -wal; move it to the file
                conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)
            except apsw.Error:
                log.debug("could not checkpoint %s at open", self.path, exc_info=True)
        disk = disk_application_id(self._fd) if self._fd is not None else app_id
        self._disk_zero_ok = disk == 0
        self.generation = app_id
        self._wal_mode = str(one(conn.execute("PRAGMA journal_mode"))[0]).lower() == "wal"
        self._remember_wal()

    def _remember_wal(self) -> None:
        """Pin the -wal this handle writes to (it exists once WAL is in use)."""
        try:
            st = os.stat(self._wal_name)
        except FileNotFoundError:
            return
        self._wal_key = (st.st_dev, st.st_ino)

    def prepare(self, conn: apsw.Connection) -> None:
        """A connection opened after quarantine must not checkpoint either."""
        if self.quarantine is not None:
            conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)

    def release(self) -> None:
        """Drop the header descriptor (after the SQLite connections closed)."""
        if self.key is not None and self._fd is not None:
            _release_fd(self.key)
            self._fd = None

    # -- before and during writes -----------------------------------------

    def before_write(self) -> None:
        """Fail fast when quarantined; detect a replaced file or a lost -wal."""
        if self.quarantine is not None:
            raise self._refusal()
        if self.key is None or self.generation is None:
            return  # still opening: migrations and the first stamp
        q = self._latch_for_us()
        if q is not None:
            self._quarantine_self(q)
            raise self._refusal()
        if self._wal_mode and self._wal_key is None:
            self._remember_wal()
        reason, rescue = self._replaced_reason()
        if reason is not None:
            err = StoreReplaced(f"{self.path}: {reason}", path=str(self.path))
            # The store (or its newest commits) may now live only in files
            # this handle still holds open but nobody can reach by name.
            err.rescued_to = self._rescue() if rescue else None
            raise self.contain(err)

    def _latch_for_us(self) -> Quarantine | None:
        """The process latch's quarantine when it names this file and stamp."""
        q = latched(self.key) if self.key is not None else None
        return q if q is not None and q.generation in (None, self.generation) else None

    def _replaced_reason(self) -> tuple[str | None, bool]:
        """(why the file is not ours any more, whether this handle's view of
        it is still whole and worth rescuing), or (None, False)."""
        try:
            st = os.stat(self._name)
        except FileNotFoundError:
            return "the database file was deleted while in use", True
        if (st.st_dev, st.st_ino) != self.key:
            return "the database file was replaced by another file while in use", True
        if self._wal_key is not None:
            try:
                wal = os.stat(self._wal_name)
            except FileNotFoundError:
                return "its -wal file was deleted while in use", True
            if (wal.st_dev, wal.st_ino) != self._wal_key:
                # Someone started a new -wal (and -shm index): our reads may mix.
                return "its -wal file was replaced while in use", False
        return None, False

    def check_in_transaction(self, conn: apsw.Connection) -> None:
        """Inside BEGIN IMMEDIATE: the generation on disk and in SQLite's view.

        The header on disk is read every time (a ``cp`` over the file
        changes nothing SQLite would notice). SQLite's view is asked only
        when the writer's data version moved since it was last known to be
        ours: the version counts this connection's own commits and every
        change by another connection that SQLite has noticed (it is bumped
        when a transaction starts on a changed file), so an unchanged
        version means page 1 is the page this handle itself last committed.
        """
        version = conn.data_version()
        found = self._foreign_generation(conn, view_known=version == self._view_version)
        if found is not None:
            raise self.contain(self._copied_over(found))
        self._view_version = version if self.generation is not None else None

    def check_other(self, conn: apsw.Connection) -> None:
        """`check_in_transaction` for another connection of this handle (the
        indexer's): the header on disk and that connection's view, always
        asked (the cached view version is the writer's)."""
        found = self._foreign_generation(conn)
        if found is not None:
            raise self.contain(self._copied_over(found))

    def forget_view(self) -> None:
        """After a rollback: ask SQLite's view again at the next check."""
        self._view_version = None

    def committed(self, conn: apsw.Connection) -> None:
        """After this handle's COMMIT, whose check found the view ours: the
        version now also counts that commit. Nothing else can be in it (a
        change by another connection is noticed only when the next
        transaction starts), and no write of ours changes the stamp once
        the handle is open (`stamp_generation` runs while ``generation`` is
        unset), so the view is still known to be ours."""
        if self._view_version is not None:
            self._view_version = conn.data_version()

    def _foreign_generation(self, conn: apsw.Connection, *,
                            view_known: bool = False) -> str | None:
        """The generation found when it is not ours (``"unreadable"`` when the
        header is gone); None when the file is still ours or still opening.
        ``view_known``: SQLite's view is known to be ours; read only the disk."""
        if self.generation is None or self._fd is None:
            return None
        found = self._foreign_on_disk(self._fd)
        if found is not None or view_known:
            return found
        seen = self._app_id(conn)
        if seen == self.generation:
            return None
        return "unreadable" if seen is None else str(seen)

    def _foreign_on_disk(self, fd: int) -> str | None:
        """The header's generation when it is not ours (None: ours)."""
        disk = disk_application_id(fd)
        if disk == 0 and self._disk_zero_ok:
            return None  # our stamp not yet checkpointed into the file
        if disk == self.generation:
            self._disk_zero_ok = False
            return None
        return "unreadable" if disk is None else str(disk)

    def _copied_over(self, found: str) -> StoreReplaced:
        return StoreReplaced(
            f"{self.path}: another database was copied over the file while in use "
            f"(generation {self.generation} expected, {found} found)", path=str(self.path))

    def on_error(self, exc: apsw.Error, conn: apsw.Connection) -> StorageError:
        """The typed error for a failed write; quarantine on structural damage.

        Corruption seen through a file that was copied over is reported as
        `replaced` (the file is someone else's, not damaged by us)."""
        err = from_apsw(exc, path=str(self.path))
        if err.cause is Cause.CORRUPT:
            found = self._foreign_generation(conn)
            if found is not None:
                return self.contain(self._copied_over(found))
            if corruption_is_index_only(conn):  # derived data: `fts_index`, no quarantine
                return SearchIndexCorrupt(f"the full-text index is damaged: {exc}",
                                          path=str(self.path), sqlite_code=err.sqlite_code)
            return self.contain(err)
        if isinstance(exc, apsw.NoMemError) and fts_structures_damaged(conn):
            return SearchIndexCorrupt(f"the full-text index is damaged: {exc}",
                                      path=str(self.path), sqlite_code=err.sqlite_code)
        return err

    # -- quarantine --------------------------------------------------------

    def contain(self, err: StorageError) -> StorageError:
        """Quarantine this handle for ``err`` and tell the rest of the process."""
        q = Quarantine(err.cause, str(err), self.generation)
        self._quarantine_self(q)
        if self.key is not None:
            _set_latch(self.key, q)
        log.error("quarantined %s: %s", self.path, err)
        if err.cause is Cause.CORRUPT:  # so later processes refuse it too
            record_damage(self.path, str(err), "a store handle")
        return err

    def _quarantine_self(self, q: Quarantine) -> None:
        self.quarantine = q
        for stop in self.on_quarantine:
            stop()
        for conn in self._connections():
            if conn is not None:
                # Keep the -wal as it is for forensics; never fold it in.
                conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)

    def checkpoint_allowed(self) -> bool:
        """Whether a background checkpoint may write the file now: not
        quarantined (here or by the latch), the path still names our file and
        -wal, the header still carries our stamp. Only looks; the next write
        reports and contains whatever is wrong."""
        if self.quarantine is not None or self.key is None or self.generation is None:
            return False
        fd = self._fd
        if fd is None or self._latch_for_us() is not None or self._replaced_reason()[0]:
            return False
        return self._foreign_on_disk(fd) is None

    def _refusal(self) -> StorageError:
        q = self.quarantine
        assert q is not None
        cls = StoreReplaced if q.cause is Cause.REPLACED else StoreCorrupt
        if q.recorded:
            return cls(f"{self.path} will not be written until it is recovered, repaired or "
                       f"found clean by a full check: {q.reason}", path=str(self.path))
        return cls(f"{self.path} is quarantined in this process and will not be written: "
                   f"{q.reason}", path=str(self.path))

    def _rescue(self) -> str | None:
        """Copy what this handle still sees (its -wal is unlinked but open)
        into a new file beside the store, so committed rows are not lost."""
        conns = [c for c in self._connections() if c is not None]
        if not conns:
            return None
        target = self.path.with_name(
            f"{self.path.name}.rescued-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.db")
        tmp = temp_name(target)  # whole or absent: a rescued file is a store to restore
        try:
            create_private_file(tmp)
            conns[0].execute("VACUUM INTO ?", (str(tmp),))
            os.chmod(tmp, FILE_MODE)
            publish(tmp, target)
        except (apsw.Error, OSError, OutputError):
            log.exception("could not save a rescue copy of %s", self.path)
            return None
        finally:
            tmp.unlink(missing_ok=True)
        return str(target)
