"""The write transaction of a store handle, as a context manager object.

`SessionDB.atomic()` returns an `Atomic`: BEGIN IMMEDIATE (after the
containment guard's checks) for the outermost block, a SAVEPOINT when
nested. It is a plain class rather than a ``@contextmanager`` generator
because it runs once per append: a generator-based manager costs a
generator frame, a ``throw()`` on error and several extra calls each time.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import apsw

if TYPE_CHECKING:
    from .store import SessionDB


class Atomic:
    """One ``with db.atomic() as conn:`` block (see `SessionDB.atomic`)."""

    __slots__ = ("db", "patience", "conn", "savepoint")

    def __init__(self, db: "SessionDB", patience: float | None) -> None:
        self.db = db
        self.patience = db.patience if patience is None else patience
        self.conn: apsw.Connection | None = None
        self.savepoint: str | None = None

    def __enter__(self) -> apsw.Connection:
        db = self.db
        db._check_open()
        db._lock.acquire()
        try:
            self.conn = conn = db._writer
            if db._depth:
                self.savepoint = name = f"sp_{db._depth}"
                conn.execute(f"SAVEPOINT {name}")
                db._depth += 1
                return conn
            self._begin(db, conn)
            return conn
        except BaseException:
            db._lock.release()
            raise

    def _begin(self, db: "SessionDB", conn: apsw.Connection) -> None:
        guard = db._guard
        guard.before_write()  # quarantine latch, replaced file, lost -wal
        try:
            db._begin_immediate(self.patience)
        except apsw.Error as e:
            raise guard.on_error(e, conn) from e
        db._depth = 1
        try:
            guard.check_in_transaction(conn)
        except BaseException as e:
            self._fail(e)
            raise

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        db = self.db
        try:
            if self.savepoint is not None:
                self._release_savepoint(exc is not None)
            elif exc is not None:
                self._fail(exc)  # re-raised by the with statement unless typed here
            else:
                try:
                    self.conn.execute("COMMIT")  # type: ignore[union-attr]
                except BaseException as e:
                    self._fail(e)
                    raise
                db._guard.committed(self.conn)
                if db._indexer is not None:
                    db._indexer.notify()  # the index catches up off the commit
        finally:
            if self.savepoint is None:
                db._depth = 0
            db._lock.release()

    def _release_savepoint(self, failed: bool) -> None:
        conn, name = self.conn, self.savepoint
        assert conn is not None
        try:
            if failed:
                conn.execute(f"ROLLBACK TO {name}")
            conn.execute(f"RELEASE {name}")
        finally:
            self.db._depth -= 1

    def _fail(self, e: BaseException) -> None:
        """Roll the whole transaction back; an apsw error is raised as the
        guard's typed error (which may quarantine the handle)."""
        db, conn = self.db, self.conn
        assert conn is not None
        db._rollback(conn)
        db._guard.forget_view()
        db._depth = 0
        if isinstance(e, apsw.Error):
            raise db._guard.on_error(e, conn) from e
