"""The store core: connections, the one write primitive, and the threads.

`StoreCore` owns everything about talking to one SQLite file: the writer
and reader connections, the lock and transaction depth, the containment
guard, the background checkpointer and indexer. Nothing outside this module
changes that state; `SessionDB` (the public face) and the feature modules
call its methods: they take this core (or the `Core` protocol of
coreapi.py, which the PostgreSQL core satisfies too), never `SessionDB`
(docs/architecture.md). Every write transaction of the package starts here:

- `write()` (``SessionDB.atomic``): BEGIN IMMEDIATE after the guard's
  checks, or a SAVEPOINT when nested; commits notify the indexer;
- `index_write()`: the indexer's batches, in their own transactions on
  their own connection (derived data only; see indexer.py);
- `transaction(conn, begin)`: migrations and recovery's private copies,
  which run before a guard exists or on connections no handle owns;
- `snapshot()` / `read_snapshot(conn)`: one read transaction, so several
  statements see one commit.

Lock errors are waited out by one helper, `retry_busy`, with jittered
backoff until a per-call patience deadline. The ``Atomic`` and ``ReadBlock``
classes are plain context managers rather than ``@contextmanager``
generators: they run once per append and once per read, and a generator
costs a frame, a ``throw()`` on error and several extra calls each time.
"""
from __future__ import annotations

import logging
import random
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

import apsw

from ..base import (InvalidInput, ReadOnlyHandle, StorageError, StoreLocked, connection_errno,
                    from_apsw, paths, policy)
from ..index import Indexer, search_index
from ..rows import checked_time
from . import checkpointer
from .checkpointer import Checkpointer
from .containment import Guard
from .readonly import ReadOnlyView

log = logging.getLogger(__name__)

T = TypeVar("T")
BUSY = (apsw.BusyError, apsw.LockedError)


def retry_busy(fn: Callable[[], T], patience: float, on_timeout: Callable[[Any], T],
               *, errors: tuple[type[BaseException], ...] = BUSY,
               lock: "threading.RLock | None" = None,
               retryable: Callable[[Any], bool] | None = None) -> T:
    """``fn()`` until it does not raise one of ``errors``, sleeping with
    jittered exponential backoff (2 ms to 100 ms); past ``patience`` seconds,
    or at once for an error ``retryable`` refuses, the error goes to
    ``on_timeout``. With ``lock``, each try holds it and the sleeps do not.
    The one backoff loop: the SQLite core and the PostgreSQL core use it."""
    deadline = time.monotonic() + patience
    delay = 0.002
    while True:
        try:
            if lock is None:
                return fn()
            with lock:
                return fn()
        except errors as e:
            left = deadline - time.monotonic()
            if left <= 0 or (retryable is not None and not retryable(e)):
                return on_timeout(e)
        time.sleep(min(left, delay * random.uniform(0.5, 1.5)))
        delay = min(delay * 2, 0.1)


@contextmanager
def transaction(conn: apsw.Connection, begin: Callable[[], None]) -> Iterator[apsw.Connection]:
    """``begin()`` (a BEGIN of the caller's choice), then COMMIT, or ROLLBACK
    on any exception: for connections no store handle owns (migrations at
    open, recovery's private copies)."""
    begin()
    try:
        yield conn
    except BaseException:
        rollback(conn)
        raise
    conn.execute("COMMIT")


def begin_immediate(conn: apsw.Connection) -> None:
    conn.execute("BEGIN IMMEDIATE")


@contextmanager
def read_snapshot(conn: apsw.Connection) -> Iterator[apsw.Connection]:
    """One read transaction on ``conn`` (none if one is already open)."""
    if not conn.get_autocommit():
        yield conn
        return
    conn.execute("BEGIN DEFERRED")
    try:
        yield conn
    except BaseException:
        # A read has nothing to commit, and COMMIT would report again an
        # error FTS5 keeps from a failed read (as if the store were damaged).
        rollback(conn)
        raise
    if not conn.get_autocommit():
        conn.execute("COMMIT")


def rollback(conn: apsw.Connection) -> None:
    if not conn.get_autocommit():
        try:
            conn.execute("ROLLBACK")
        except apsw.Error:
            log.warning("rollback failed; SQLite rolls back on close", exc_info=True)


class StoreCore:
    """Connections, transactions and background threads of one handle."""

    def __init__(self, path: Path, *, journal_mode: str, patience: float,
                 vfs: str | None, clock: Callable[[], float] = time.time,
                 read_only: bool = False) -> None:
        if journal_mode not in ("wal", "delete"):
            raise InvalidInput(f"journal_mode must be 'wal' or 'delete', not {journal_mode!r}")
        self.path, self.patience, self.vfs = path, patience, vfs
        self.clock = clock
        self.journal_mode_wanted = journal_mode
        self.lock = threading.RLock()
        # One SQLite writer at a time within the process: the outermost write
        # transaction and every indexing batch hold the gate, so an append
        # queues behind at most one short batch instead of polling SQLite's
        # busy handler, and the indexer never holds the handle's lock (reads
        # and the writer's state stay free while it tokenizes).
        self.gate = threading.RLock()
        self.index_conn: apsw.Connection | None = None
        self.depth = 0
        self.closed = False
        self.reader_conn: apsw.Connection | None = None
        self.checkpointer: Checkpointer | None = None
        self.indexer: Indexer | None = None
        self.guard = Guard(path, lambda: (self.writer, self.reader_conn, self.index_conn))
        # A read-only handle has one connection, which never writes (readonly.py);
        # it stands in the writer's place, and every write refuses before using it.
        self.view = ReadOnlyView(path, vfs) if read_only else None
        self.reads = 0  # read blocks open in this handle (a reconnect waits for none)
        self.writer = self._open_read_only() if read_only else self._open_writer(journal_mode)

    # -- connections -------------------------------------------------------

    def _connect(self, flags: int) -> apsw.Connection:
        try:
            if self.vfs:
                return apsw.Connection(str(self.path), flags=flags, vfs=self.vfs)
            return apsw.Connection(str(self.path), flags=flags)
        except apsw.Error as e:
            raise from_apsw(e, path=str(self.path), context=f"cannot open {self.path}") from e

    def _open_writer(self, journal_mode: str) -> apsw.Connection:
        if self.path.is_dir():
            raise InvalidInput(f"{self.path} is a directory, not a database file",
                               path=str(self.path))
        paths.ensure_private_dir(self.path.parent)
        paths.create_private_file(self.path)
        conn = self._connect(apsw.SQLITE_OPEN_READWRITE)
        chosen = policy.WRITER_POLICY_WAL if journal_mode == "wal" else policy.WRITER_POLICY_DELETE
        try:
            policy.apply_policy(conn, chosen)
            search_index.register_functions(conn)
        except apsw.Error as e:
            # the OS errno tells a full disk from a failing one at open
            err = from_apsw(e, path=str(self.path), context=f"cannot use {self.path}",
                            system_errno=connection_errno(conn))
            conn.close()
            raise err from e
        except BaseException:
            conn.close()
            raise
        return conn

    def _open_read_only(self) -> apsw.Connection:
        assert self.view is not None
        conn = self.view.connect()
        try:
            policy.apply_policy(conn, policy.READER_POLICY)
            search_index.register_functions(conn)
            self.guard.prepare(conn)
        except apsw.Error as e:
            conn.close()
            raise from_apsw(e, path=str(self.path), context=f"cannot use {self.path}") from e
        return conn

    @property
    def read_only(self) -> bool:
        """Whether this handle was opened read-only (every write refuses)."""
        return self.view is not None

    def refuse_write(self, what: str = "write") -> None:
        """Raise `ReadOnlyHandle` on a read-only handle, before anything is touched."""
        if self.view is not None:
            raise ReadOnlyHandle(f"{self.path} was opened read-only: this handle does not "
                                 f"{what}; open the store without read_only to change it",
                                 path=str(self.path))

    def reader(self) -> apsw.Connection:
        if self.view is not None:
            if not self.reads and self.view.stale():  # a writer came: see its commits
                self.writer.close()
                self.writer = self._open_read_only()
            return self.writer
        if self.reader_conn is None:
            conn = self._connect(apsw.SQLITE_OPEN_READONLY)
            policy.apply_policy(conn, policy.READER_POLICY)
            search_index.register_functions(conn)
            self.guard.prepare(conn)
            self.reader_conn = conn
        return self.reader_conn

    def start_threads(self, checkpoint_pages: int, background_index: bool) -> None:
        """After migrations: the checkpointer (WAL) and the indexer (writable)."""
        if self.writer.readonly("main") or self.quarantined:
            return  # a quarantined handle (a damage record at open) writes nothing
        if self.journal_mode_wanted == "wal":
            self.checkpointer = checkpointer.for_writer(
                self.writer, self.guard, str(self.path), self.vfs, checkpoint_pages)
        try:
            self._index_connection()
        except StorageError as e:  # derived data never fails the open; the first batch retries
            log.info("the indexer's connection did not open: %s", e)
        self.indexer = Indexer(self.index_write, self.gate, self.index_backlog,
                               background=background_index, fork_locks=(self.lock, self.gate))
        self.guard.on_quarantine.append(self.indexer.halt)

    def check_open(self) -> None:
        if self.closed:
            raise StorageError("this store handle is closed", path=str(self.path))

    def now(self) -> float:
        # Every time a session row gets (created, updated, ended) comes from here.
        return checked_time(self.clock(), "the store's clock")

    @property
    def quarantined(self) -> bool:
        """True once this handle refuses writes (corruption or a replaced file)."""
        return self.guard.quarantine is not None

    def catch_up_index(self, max_rows: int | None = None) -> int:
        """Run index batches now, in this thread (see `SessionDB.catch_up_index`)."""
        self.check_open()
        return self.indexer.catch_up(max_rows) if self.indexer is not None else 0

    def can_index_now(self) -> bool:
        """Whether this thread may run index batches now (a writable, open,
        unquarantined handle, outside a transaction of its own)."""
        return (self.indexer is not None and not self.closed and not self.quarantined
                and not self.in_transaction)

    @property
    def in_transaction(self) -> bool:
        """Whether this thread is inside a write transaction of this handle."""
        return bool(self.depth) and self.lock._is_owned()  # type: ignore[attr-defined]

    # -- transactions ------------------------------------------------------

    def begin_immediate(self, patience: float) -> None:
        """BEGIN IMMEDIATE on the writer, lock errors waited out."""
        def timeout(e: apsw.Error) -> None:
            raise StoreLocked(f"another process held the write lock on {self.path} for "
                              f"{patience:.1f}s", path=str(self.path),
                              sqlite_code=getattr(e, "extendedresult", None)) from e
        retry_busy(lambda: begin_immediate(self.writer), patience, timeout)

    def write(self, *, patience: float | None = None) -> "Atomic":
        """The one transaction primitive (see `SessionDB.atomic`)."""
        self.refuse_write()
        return Atomic(self, self.patience if patience is None else patience)

    def _index_connection(self) -> apsw.Connection:
        """The indexer's read-write connection. Opened with the indexer, right
        after migrations, and read from at once, so its pager holds the -wal
        open from a moment the file is known to be ours: a connection whose
        first read met the file mid-``cp`` (truncated to 0 bytes) would have
        SQLite delete the -wal, committed frames and all."""
        if self.index_conn is None:
            conn = self._connect(apsw.SQLITE_OPEN_READWRITE)
            try:
                policy.apply_policy(conn, policy.INDEXER_POLICY)
                search_index.register_functions(conn)
                self.guard.prepare(conn)
                if self.checkpointer is not None:
                    self.checkpointer.attach(conn)  # its commits grow the WAL too
                conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
            except apsw.Error as e:
                conn.close()
                raise from_apsw(e, path=str(self.path)) from e
            except BaseException:
                conn.close()
                raise
            self.index_conn = conn
        return self.index_conn

    def index_backlog(self) -> search_index.Backlog | None:
        """The backlog as the indexer's connection sees it (no handle lock)."""
        with self.gate:
            self.check_open()
            try:
                return search_index.backlog(self._index_connection())
            except apsw.Error as e:
                raise from_apsw(e, path=str(self.path)) from e

    @contextmanager
    def index_write(self, *, patience: float | None = None) -> Iterator[apsw.Connection]:
        """One indexing transaction on the indexer's own connection, under
        the gate and the guard's checks; apsw errors come out typed (index
        damage as ``fts_index``, without quarantine). Inside this thread's
        own write transaction it is a savepoint of that one instead (the
        other connection could not get the write lock)."""
        self.refuse_write("index")
        if self.in_transaction:
            with self.write(patience=patience) as conn:
                yield conn
            return
        with self.gate:
            self.check_open()
            self.guard.before_write()
            conn = self._index_connection()
            try:
                self._begin_index(conn, self.patience if patience is None else patience)
                yield conn
                conn.execute("COMMIT")
            except apsw.Error as e:
                rollback(conn)
                raise self.guard.on_error(e, conn) from e
            except BaseException:
                rollback(conn)
                raise

    def _begin_index(self, conn: apsw.Connection, patience: float) -> None:
        def timeout(e: apsw.Error) -> None:
            raise StoreLocked(f"another process held the write lock on {self.path} for "
                              f"{patience:.1f}s", path=str(self.path),
                              sqlite_code=getattr(e, "extendedresult", None)) from e
        retry_busy(lambda: begin_immediate(conn), patience, timeout)
        self.guard.check_other(conn)

    def read(self) -> ReadBlock:
        """The writer inside a transaction (to see its own uncommitted rows),
        otherwise the read-only connection (`ReadBlock`)."""
        return ReadBlock(self)

    @contextmanager
    def snapshot(self) -> Iterator[apsw.Connection]:
        """`read` in one read transaction."""
        with self.read() as conn, read_snapshot(conn):
            yield conn

    def checkpoint(self, patience: float | None) -> tuple[int, int]:
        """A PASSIVE checkpoint; SQLITE_BUSY (another checkpoint) waited out."""
        self.check_open()
        self.refuse_write("checkpoint")

        def once() -> tuple[int, int]:
            self.guard.before_write()  # a checkpoint writes the database file
            try:
                return policy.checkpoint_passive(self.writer)
            except apsw.BusyError:
                raise
            except apsw.Error as e:
                raise from_apsw(e, path=str(self.path)) from e

        def timeout(e: apsw.Error) -> tuple[int, int]:
            raise from_apsw(e, path=str(self.path)) from e
        return retry_busy(once, self.patience if patience is None else patience, timeout,
                          errors=(apsw.BusyError,), lock=self.lock)

    # -- closing -----------------------------------------------------------

    def close(self) -> None:
        """Stop the threads, close both connections; safe more than once."""
        if self.indexer is not None:
            # Joined outside the lock: a batch in flight needs it to finish.
            self.indexer.close()  # what is left, the next open catches up
        with self.lock:
            if self.closed:
                return
            self.closed = True
            if self.checkpointer is not None:
                self.checkpointer.close()  # joined, its connection closed first
            failure: apsw.Error | None = None
            for conn in (self.index_conn, self.reader_conn, self.writer):
                if conn is not None:
                    try:
                        conn.close()
                    except apsw.Error as e:  # e.g. the checkpoint at close failed
                        # apsw has closed the connection anyway; close the
                        # other one and release the header descriptor too.
                        failure = failure or e
            self.reader_conn = self.index_conn = None
            self.guard.release()  # only after SQLite let go of its locks
            if failure is not None:
                raise from_apsw(failure, path=str(self.path),
                                context=f"closing {self.path}") from failure

    def abandon(self) -> None:
        """A failed open: close the connections and the header descriptor."""
        if self.checkpointer is not None:
            self.checkpointer.close()
        if self.index_conn is not None:
            self.index_conn.close()
        self.writer.close()
        self.guard.release()


class ReadBlock:
    """One ``with core.read() as conn:`` block: the handle's lock held
    throughout, apsw errors raised as typed StorageError, and a read-only
    handle's file checked unchanged after the outermost block. A plain
    context manager, as `Atomic` is: every read of a session's items runs
    one, and with cold CPU caches (other work between two reads) a
    generator's frames and contextlib's wrapper cost about 6 us more."""

    __slots__ = ("core",)

    def __init__(self, core: StoreCore) -> None:
        self.core = core

    def __enter__(self) -> apsw.Connection:
        core = self.core
        core.check_open()
        core.lock.acquire()
        try:
            conn = core.writer if core.depth else core.reader()
        except BaseException:
            core.lock.release()
            raise
        core.reads += 1
        return conn

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        core = self.core
        try:
            core.reads -= 1
            if isinstance(exc, apsw.Error):
                raise from_apsw(exc, path=str(core.path)) from exc
            if exc is None and core.view is not None and not core.reads:
                core.view.check_unchanged()
        finally:
            core.lock.release()


class Atomic:
    """One ``with db.atomic() as conn:`` block: BEGIN IMMEDIATE (after the
    containment guard's checks) for the outermost block, a SAVEPOINT when
    nested. Any exception rolls back everything done inside the block; apsw
    errors are re-raised as the guard's typed StorageError."""

    __slots__ = ("core", "patience", "conn", "savepoint")

    def __init__(self, core: StoreCore, patience: float) -> None:
        self.core = core
        self.patience = patience
        self.conn: apsw.Connection | None = None
        self.savepoint: str | None = None

    def __enter__(self) -> apsw.Connection:
        core = self.core
        core.check_open()
        core.lock.acquire()
        try:
            self.conn = conn = core.writer
            if core.depth:
                self.savepoint = name = f"sp_{core.depth}"
                conn.execute(f"SAVEPOINT {name}")
                core.depth += 1
                return conn
            core.gate.acquire()  # after the lock: the indexer takes only the gate
            try:
                self._begin(core, conn)
            except BaseException:
                core.gate.release()
                raise
            return conn
        except BaseException:
            core.lock.release()
            raise

    def _begin(self, core: StoreCore, conn: apsw.Connection) -> None:
        guard = core.guard
        guard.before_write()  # quarantine latch, replaced file, lost -wal
        try:
            core.begin_immediate(self.patience)
        except apsw.Error as e:
            raise guard.on_error(e, conn) from e
        core.depth = 1
        try:
            guard.check_in_transaction(conn)
        except BaseException as e:
            self._fail(e)
            raise

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        core = self.core
        try:
            if self.savepoint is not None:
                self._release_savepoint(exc is not None)
            elif exc is not None:
                self._fail(exc)  # re-raised by the with statement unless typed here
            else:
                conn = self.conn
                assert conn is not None  # set by __enter__
                try:
                    conn.execute("COMMIT")
                except BaseException as e:
                    self._fail(e)
                    raise
                core.guard.committed(conn)
                if core.indexer is not None:
                    core.indexer.notify()  # the index catches up off the commit
        finally:
            if self.savepoint is None:
                core.depth = 0
                core.gate.release()
            core.lock.release()

    def _release_savepoint(self, failed: bool) -> None:
        conn, name = self.conn, self.savepoint
        assert conn is not None
        try:
            if failed:
                conn.execute(f"ROLLBACK TO {name}")
            conn.execute(f"RELEASE {name}")
        finally:
            self.core.depth -= 1

    def _fail(self, e: BaseException) -> None:
        """Roll the whole transaction back; an apsw error is raised as the
        guard's typed error (which may quarantine the handle)."""
        core, conn = self.core, self.conn
        assert conn is not None
        rollback(conn)
        core.guard.forget_view()
        core.depth = 0
        if isinstance(e, apsw.Error):
            raise core.guard.on_error(e, conn) from e
