"""The PostgreSQL store core: a connection pool and the one write primitive.

`PgCore` plays the part `StoreCore` plays for a SQLite file. Each thread
works on its own pooled connection: a write transaction takes one for its
whole length (nested blocks are SAVEPOINTs on it), a read outside a
transaction takes one for one statement group, a snapshot holds one in a
REPEATABLE READ READ ONLY transaction, and `statement` runs one statement
outside any transaction, where it is a transaction of its own (an append's
one round trip, pg/append.py). A ``relaxed`` core turns synchronous_commit
off in each write transaction (``SET LOCAL``: nothing else on the pooled
connection changes).

Waiting: ``lock_timeout`` is set to the call's patience in every write
transaction, so a row lock held too long by another host ends as
``locked`` (SQLSTATE 55P03), like SQLite's busy timeout. Serialization
failures and deadlocks abort the whole transaction; `run` re-runs a body
that owns its transaction with jittered backoff until the patience.
A lost connection is ``io_error``, and the next call gets a new pool: the
old one's connections are all dead then, and its background reconnects
back off for seconds, while a new pool connects at once (a connection
still checked out goes back to the pool it came from, then closes).
"""
from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

from ..base import ReadOnlyHandle, StorageError, StoreIOError
from ..engine import retry_busy
from ..rows import checked_time
from .adapter import PgConn, register_numeric_loader, register_text_codec
from .errors import connect_timeout, from_pg, is_retryable, redact

log = logging.getLogger(__name__)
T = TypeVar("T")



def _reraise(e: StorageError) -> Any:
    """`retry_busy`'s end for a store error: the classified error itself."""
    raise e

class _Local(threading.local):
    raw: Any = None
    conn: PgConn | None = None
    depth: int = 0


class PgCore:
    """Pool, per-thread transactions and error translation of one handle."""

    def __init__(self, url: str, *, patience: float, path: Path, min_size: int = 1,
                 max_size: int = 4, clock: Callable[[], float] = time.time,
                 relaxed: bool = False, read_only: bool = False) -> None:
        self.url, self.shown, self.patience = url, redact(url), patience
        self.path, self.clock = path, clock  # the profile's anchor: the spool goes beside it
        self.relaxed = relaxed  # synchronous_commit=off in every write transaction
        # A read-only handle: every session it opens is read-only on the server
        # too, so nothing it runs can write, whatever the statement.
        self.read_only = read_only
        self.options = "-c default_transaction_read_only=on" if read_only else None
        self.sizes = (min_size, max_size)
        self.closed = False
        self.stale = False  # a connection was lost: renew the pool on the next call
        self.local = _Local()
        self.indexer = None  # the SQLite core's threads: none here
        self.checkpointer = None
        self.owner: dict[int, Any] = {}  # id(connection) -> the pool it came from
        self._probe()  # an unreachable server fails within the connect timeout
        self.pool = self._new_pool()
        try:
            self.pool.wait(timeout=max(patience, 1.0))
        except Exception as e:  # noqa: BLE001 (typed below; the pool is closed first)
            self.pool.close()
            raise self.error(e, "cannot connect") from e

    def _probe(self) -> None:
        """One direct connection: the pool would retry a refused connection
        until its timeout, so a closed port would take the whole patience."""
        import psycopg
        try:
            psycopg.connect(self.url, connect_timeout=connect_timeout(self.url),
                            **self._session_options()).close()
        except Exception as e:  # noqa: BLE001 (typed by from_pg)
            raise self.error(e, "cannot connect") from e

    def _new_pool(self) -> Any:
        from psycopg_pool import ConnectionPool
        pool = ConnectionPool(self.url, min_size=self.sizes[0], max_size=self.sizes[1],
                              kwargs={"autocommit": True, **self._session_options()},
                              configure=self._configure,
                              open=False, name="hermes-state", timeout=self.patience)
        pool.open(wait=False)
        return pool

    def _renew(self, patience: float) -> None:
        """A new pool, once one direct connection shows the server is back:
        while it is down every call fails at once (as a SQLite I/O error
        does), instead of waiting out its patience in the pool's queue."""
        import psycopg
        try:
            psycopg.connect(self.url, connect_timeout=min(max(1, int(patience)),
                                                          connect_timeout(self.url))).close()
        except Exception as e:  # noqa: BLE001 (typed: still io_error, still stale)
            raise self.error(e, "cannot connect") from e
        old, self.pool, self.stale = self.pool, self._new_pool(), False
        old.close(timeout=0)

    def _session_options(self) -> dict[str, Any]:
        return {"options": self.options} if self.options else {}

    def refuse_write(self, what: str = "write") -> None:
        """Raise `ReadOnlyHandle` on a read-only handle, before the server is asked."""
        if self.read_only:
            raise ReadOnlyHandle(f"{self.shown} was opened read-only: this handle does not "
                                 f"{what}; open the store without read_only to change it",
                                 path=self.shown)

    @staticmethod
    def _configure(conn: Any) -> None:
        register_numeric_loader(conn)
        register_text_codec(conn)

    def error(self, exc: BaseException, context: str = "") -> StorageError:
        err = from_pg(exc, url=self.url, context=context)
        if isinstance(err, StoreIOError):
            self.stale = True
        return err

    def check_open(self) -> None:
        if self.closed:
            raise StorageError("this store handle is closed", path=self.shown)

    def now(self) -> float:
        return checked_time(self.clock(), "the store's clock")

    @property
    def depth(self) -> int:
        return self.local.depth

    @property
    def in_transaction(self) -> bool:
        return bool(self.local.depth)

    # -- connections -------------------------------------------------------

    def getconn(self, patience: float | None = None) -> Any:
        patience = self.patience if patience is None else patience
        if self.stale:
            self._renew(patience)
        pool = self.pool
        try:
            raw = pool.getconn(timeout=patience)
        except Exception as e:  # noqa: BLE001 (PoolTimeout: no server, or all busy)
            raise self.error(e, "cannot get a connection") from e
        self.owner[id(raw)] = pool
        return raw

    def putconn(self, raw: Any) -> None:
        pool = self.owner.pop(id(raw), self.pool)
        try:
            pool.putconn(raw)
        except Exception:  # noqa: BLE001 (a closed pool: the connection is closed anyway)
            log.debug("putconn failed", exc_info=True)
            raw.close()

    # -- transactions ------------------------------------------------------

    def write(self, *, patience: float | None = None) -> "PgAtomic":
        self.refuse_write()
        return PgAtomic(self, self.patience if patience is None else patience)

    def run(self, body: Callable[[], T], patience: float | None = None) -> T:
        """``body()`` (which opens its own write transaction), re-run after a
        serialization failure or deadlock until the patience, then `locked`.
        Inside another transaction it runs once: the outer block owns retries."""
        if self.local.depth:
            return body()
        return retry_busy(body, self.patience if patience is None else patience, _reraise,
                          errors=(StorageError,), retryable=is_retryable)

    def statement(self, body: Callable[[Any], T], patience: float | None = None) -> T:
        """``body(raw)`` on a pooled connection outside any transaction: one
        statement there is its own transaction (one round trip, no BEGIN or
        COMMIT); errors come back typed. (Only writes use it: an append.)"""
        self.check_open()
        self.refuse_write()
        with self._pooled(patience) as raw:
            return body(raw)

    @contextmanager
    def read(self) -> Iterator[PgConn]:
        """This thread's transaction if it has one, else a pooled connection."""
        self.check_open()
        if self.local.depth:
            assert self.local.conn is not None
            yield self.local.conn
            return
        with self._pooled() as raw:
            yield PgConn(raw)

    @contextmanager
    def _pooled(self, patience: float | None = None) -> Iterator[Any]:
        """A pooled connection for the block, given back after it; the
        driver's errors come out typed."""
        raw = self.getconn(patience)
        try:
            yield raw
        except StorageError:
            raise
        except Exception as e:
            if _is_db_error(e):
                raise self.error(e) from e
            raise
        finally:
            self.putconn(raw)

    @contextmanager
    def snapshot(self) -> Iterator[PgConn]:
        """`read` in one REPEATABLE READ READ ONLY transaction."""
        if self.local.depth:
            with self.read() as conn:
                yield conn
            return
        with self.read() as conn:
            conn.raw.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                yield conn
            finally:
                _quiet_rollback(conn.raw)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.pool.close()


def lock_timeout_ms(patience: float) -> int:
    """The patience as PostgreSQL's lock_timeout (0 would mean no limit)."""
    return max(int(patience * 1000), 1)


def _is_db_error(e: BaseException) -> bool:
    import psycopg
    from psycopg_pool import PoolTimeout
    return isinstance(e, (psycopg.Error, PoolTimeout))


def _quiet_rollback(raw: Any) -> None:
    try:
        raw.execute("ROLLBACK")
    except Exception:  # noqa: BLE001 (a broken connection is discarded by the pool)
        log.debug("rollback failed", exc_info=True)


class PgAtomic:
    """One ``with db.atomic() as conn:`` block on PostgreSQL: BEGIN (with the
    patience as lock_timeout) on this thread's own pooled connection, or a
    SAVEPOINT when nested. Any exception rolls back the block; psycopg
    errors are raised as typed StorageErrors."""

    __slots__ = ("core", "patience", "savepoint")

    def __init__(self, core: PgCore, patience: float) -> None:
        self.core, self.patience = core, patience
        self.savepoint: str | None = None

    def __enter__(self) -> PgConn:
        core, local = self.core, self.core.local
        core.check_open()
        if local.depth:
            assert local.conn is not None
            self.savepoint = f"sp_{local.depth}"
            self._do(f"SAVEPOINT {self.savepoint}")
            local.depth += 1
            return local.conn
        raw = core.getconn(self.patience)
        try:
            raw.execute(f"BEGIN; SET LOCAL lock_timeout = {lock_timeout_ms(self.patience)}"
                        + ("; SET LOCAL synchronous_commit = off" if core.relaxed else ""))
        except Exception as e:
            core.putconn(raw)
            raise core.error(e, "cannot begin a transaction") from e
        local.raw, local.conn, local.depth = raw, PgConn(raw), 1
        return local.conn

    def _do(self, sql: str) -> None:
        try:
            self.core.local.raw.execute(sql)
        except Exception as e:
            raise self.core.error(e) from e

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if self.savepoint is not None:
            self._release_savepoint(exc)
        else:
            self._finish(exc)
        if exc is not None and _is_db_error(exc):
            raise self.core.error(exc) from exc

    def _release_savepoint(self, exc: BaseException | None) -> None:
        local = self.core.local
        try:
            if exc is not None:
                self._do(f"ROLLBACK TO {self.savepoint}")
            self._do(f"RELEASE {self.savepoint}")
        finally:
            local.depth -= 1

    def _finish(self, exc: BaseException | None) -> None:
        core, local = self.core, self.core.local
        raw = local.raw
        local.raw, local.conn, local.depth = None, None, 0
        try:
            if exc is not None:
                _quiet_rollback(raw)
                return
            try:
                raw.execute("COMMIT")
            except Exception as e:
                _quiet_rollback(raw)
                raise core.error(e, "the commit failed") from e
        finally:
            core.putconn(raw)
