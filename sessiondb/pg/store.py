"""PgSessionDB: the store API on a PostgreSQL server.

A `StoreFace` (sessiondb/face.py) over a `PgCore` (a connection pool), as
`SessionDB` is one over a SQLite file: every operation the face and the
feature modules share (sessions, messages, leases, usage, compaction,
transcripts, export and import) runs unchanged through the adapter
(adapter.py). What differs is here:

- every write to a session locks its row (``SELECT ... FOR UPDATE``) before
  reading the next position or checking the lease, so writers on several
  hosts append in one order and a stalled writer whose lease was taken
  over is refused inside its own transaction, as on SQLite;
- an append is one call of a server-side function (`hermes_append`,
  pg/append.py) that takes that lock, checks the lease and writes the rows
  and counters: one round trip outside a transaction;
- ``durability="relaxed"`` commits every write transaction with
  ``synchronous_commit=off`` (see docs/postgresql.md, "Durability");
- the SQLite-only operations (pages, WAL, checkpoints, FTS5 health)
  raise `NotOnPostgreSQL`; search runs on tsvector and pg_trgm
  (sessiondb/pg/search.py), indexed by the insert itself.

``path`` is the profile directory's ``postgresql`` entry: no file is made
there; the spool and scratch files go beside it, as for a SQLite store.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from ..base import InvalidInput, LeaseLost, SchemaTooNew, SessionNotFound, StoreNotFound, paths
from ..face import DEFAULT_PATIENCE_S, SessionBody, StoreFace
from ..maintenance import lifecycle as maintenance
from ..rows import EncodedMessage, compaction, leases, sessions
from ..search import Filters, SearchResults
from ..spool import spool_write
from . import append, migrations
from .core import PgCore, lock_timeout_ms
from .errors import NotOnPostgreSQL, redact

#: Options of the SQLite store that tune its file; meaningless here, accepted.
SQLITE_TUNING = frozenset({"journal_mode", "checkpoint_pages", "background_index"})
ANCHOR_NAME = "postgresql"
DURABILITY = ("durable", "relaxed")


def is_url(target: object) -> bool:
    return isinstance(target, str) and target.split("://", 1)[0] in ("postgresql", "postgres")


class PgSessionDB(StoreFace):
    """A session store in a PostgreSQL database (see the module doc)."""

    backend = "postgresql"

    def __init__(self, url: str, *, patience: float = DEFAULT_PATIENCE_S,
                 clock: Callable[[], float] = time.time, home: Path | None = None,
                 profile: str | None = None, create: bool = True, pool_size: int = 4,
                 durability: str = "durable", read_only: bool = False,
                 **sqlite_options: Any) -> None:
        unknown = set(sqlite_options) - SQLITE_TUNING
        if unknown:
            raise InvalidInput(f"not options of a PostgreSQL store: {', '.join(sorted(unknown))}")
        if durability not in DURABILITY:
            raise InvalidInput(f"durability must be one of {', '.join(DURABILITY)}, "
                               f"not {durability!r}")
        if not is_url(url):
            raise InvalidInput("a PostgreSQL store URL starts with postgresql://")
        root = paths.resolve_home(home)
        self.url = redact(url)
        self.home, self.profile = root, profile
        self.path = paths.profile_dir(root, profile) / ANCHOR_NAME
        self.patience = patience
        self.sqlite_version = ""
        self.identity = None  # sqlitefile/identity.py reads SQLite files
        self.search_rebuilt_on_open = None
        create = create and not read_only  # read-only: no schema made, nothing migrated
        self._pg = PgCore(url, patience=patience, path=self.path, max_size=pool_size,
                          clock=clock, relaxed=durability == "relaxed", read_only=read_only)
        try:
            self._prepare(create)
        except BaseException:
            self._pg.close()
            raise
        if create:
            paths.ensure_private_dir(self.path.parent)
            spool_write.reserve_for(self.path)  # the spool takes space while there is some

    def _prepare(self, create: bool) -> None:
        with self._pg.read() as conn:
            newer = migrations.unknown(conn.raw)
            if newer:
                raise SchemaTooNew(f"{self.url} has migrations this version does not know: "
                                   f"{', '.join(newer)}; upgrade hermes-state", path=self.url)
            pending = migrations.pending(conn.raw)
            if pending and not create:
                if len(pending) == len(migrations.MIGRATIONS):
                    raise StoreNotFound(f"no hermes store in {self.url} yet", path=self.url)
                return  # reading an older schema: its writer upgrades it
            if pending:
                try:
                    migrations.apply_pending(conn.raw)
                except Exception as e:
                    raise self._pg.error(e, "cannot prepare schema") from e

    @property
    def core(self) -> PgCore:
        """The store core (see `StoreFace.core`): a connection pool."""
        return self._pg

    # -- what a SQLite file has and a server does not ------------------------

    def _sqlite_only(self, what: str) -> NotOnPostgreSQL:
        return NotOnPostgreSQL(f"{what} belongs to the SQLite backend; {self.url} is a "
                               "PostgreSQL store (see docs/postgresql.md)", path=self.url)

    @property
    def checkpoint_stats(self) -> None:
        return None  # no WAL file, no checkpointer

    @property
    def indexer_stats(self) -> None:
        return None  # no indexer: the insert writes the index

    @property
    def quarantined(self) -> bool:
        return False  # PostgreSQL guards its own files; a handle never quarantines

    def checkpoint(self, *, patience: float | None = None) -> tuple[int, int]:
        raise self._sqlite_only("a WAL checkpoint")

    def quick_check(self) -> list[str]:
        raise self._sqlite_only("PRAGMA quick_check")

    def journal_mode(self) -> str:
        raise self._sqlite_only("the journal mode")

    def pending_migrations(self) -> list[str]:
        with self._pg.read() as conn:
            return migrations.pending(conn.raw)

    # -- search: tsvector and pg_trgm, indexed by the insert itself ---------

    def search(self, query: str, *, session_id: str | None = None,
               role: str | None = None, source: str | None = None,
               since: float | None = None, until: float | None = None, limit: int = 20,
               offset: int = 0, order: str = "rank", include_archived: bool = False,
               raw: bool = False, archived_sessions: bool = True) -> SearchResults:
        """`StoreFace.search` on PostgreSQL (sessiondb/pg/search.py; docs/search.md,
        "PostgreSQL"). ``raw=True`` takes tsquery syntax."""
        from . import search as pg_search
        with self._read() as conn:
            if not archived_sessions:
                archived_sessions = not maintenance.any_archived(conn)
            filters = Filters(session_id, role, source, since, until, include_archived,
                              archived_sessions)
            return pg_search.search(conn.raw, query, filters=filters, limit=limit,
                                    offset=offset, order=order, raw=raw)

    def index_backlog(self) -> None:
        return None  # the insert writes the index: there is never a backlog

    def search_index_stale(self) -> None:
        return None

    def catch_up_index(self, max_rows: int | None = None) -> int:
        return 0

    def can_index_now(self) -> bool:
        return False  # no indexer: the insert wrote the index

    def rebuild_search_index(self, *, force: bool = False) -> dict[str, Any]:
        """REINDEX CONCURRENTLY both search indexes (writers keep going)."""
        from .search_schema import INDEXES
        self._pg.refuse_write("rebuild the search index")
        started = time.monotonic()
        with self._pg.read() as conn:
            if conn.raw.info.transaction_status != 0:  # psycopg's IDLE: not in a transaction
                raise InvalidInput("rebuild_search_index cannot run inside a transaction")
            for name in INDEXES:
                conn.raw.execute(f"REINDEX INDEX CONCURRENTLY {name}")
            (count,) = conn.raw.execute("SELECT count(*) FROM messages").fetchone()
        return {"messages": count, "seconds": time.monotonic() - started,
                "backend": "postgresql"}

    def search_health(self) -> Any:
        raise NotOnPostgreSQL("search_health runs FTS5's checks, which belong to the SQLite "
                              f"backend; `hermes doctor --store-url URL` checks {self.url}'s "
                              "search index", path=self.url)

    # -- writes that lock the session row first ------------------------------

    def locked_write(self, session_id: str, body: Callable[[Any], Any]) -> Any:
        """``body(conn)`` in one transaction that first locks the session's
        row (when it exists), re-run after a deadlock or serialization failure."""
        def attempt() -> Any:
            with self.atomic() as conn:
                conn.execute("SELECT 1 FROM sessions WHERE id = ? FOR UPDATE", (session_id,))
                return body(conn)
        return self._pg.run(attempt)

    def session_write(self, session_id: str, body: SessionBody) -> Any:
        """See `StoreFace.session_write`; the position is read under the row lock."""
        def attempt() -> Any:
            with self.atomic() as conn:
                paths.validate_session_id(session_id)
                return body(conn, self.next_position(conn, session_id))[0]
        return self._pg.run(attempt)

    def next_position(self, conn: Any, session_id: str) -> int:
        """Lock the session's row, then one past its highest position. Two
        statements: in READ COMMITTED the second sees what the previous lock
        holder committed while this one waited."""
        if conn.execute("SELECT 1 FROM sessions WHERE id = ? FOR UPDATE",
                        (session_id,)).fetchone() is None:
            raise SessionNotFound(f"no session {session_id!r}")
        (top,) = conn.execute("SELECT max(position) FROM messages WHERE session_id = ?",
                              (session_id,)).fetchone()
        return (top or 0) + 1

    def append_encoded(self, session_id: str, encoded: list[EncodedMessage], *,
                       holder: str | None = None, fresh: bool = False) -> list[int]:
        """`append_messages`' write as one `hermes_append` call (pg/append.py):
        outside a transaction a single statement, one round trip; inside
        the caller's, under a savepoint. Re-run after a deadlock or
        serialization failure until the patience. ``fresh`` is not
        used: the function skips known uids itself, in one indexed lookup."""
        paths.validate_session_id(session_id)
        pg = self._pg

        def call(raw: Any, timeout_ms: int | None) -> list[int]:
            now = self.now()
            status, ids, _, found, expires = append.call_append(
                raw, session_id, holder, now, "message", encoded, timeout_ms, pg.relaxed)
            if status == "no_session":
                raise SessionNotFound(f"no session {session_id!r}")
            if status == "lease" and holder is not None:  # the server's verdict, our words
                lease = None if found is None or expires is None else (found, expires)
                raise leases.refusal(lease, session_id, holder, now) or LeaseLost(
                    f"{holder!r} may not write")
            return ids
        if pg.depth:
            with self.atomic() as conn:
                return call(conn.raw, None)
        return pg.run(lambda: pg.statement(lambda raw: call(raw, lock_timeout_ms(pg.patience))))

    def insert_encoded(self, conn: Any, session_id: str, encoded: list[EncodedMessage], *,
                       holder: str | None = None, kind: str = "message") -> list[int]:
        """Insert inside the caller's transaction, under the session's row
        lock, after the lease check: new uids in one `hermes_insert_rows`
        call (any batch size: the rows travel as 13 arrays); known uids keep
        their rows, as SQLite's ON CONFLICT DO NOTHING does."""
        paths.validate_session_id(session_id)
        position = self.next_position(conn, session_id)
        if holder is not None:
            leases.check(conn, session_id, holder, self.now())
        if not encoded:
            return []
        return append.call_insert_rows(conn.raw, session_id, position, self.now(), kind,
                                       encoded)[0]

    def archive_and_compact(self, session_id: str, absorbed_ids: list[int],
                            summary_message: dict[str, Any], *, holder: str | None = None,
                            supersede_previous: bool = True) -> compaction.CompactionResult:
        """See `sessiondb.rows.compaction.archive_and_compact` (under the row lock)."""
        return self.locked_write(session_id, lambda conn: compaction.archive_and_compact(
            self._pg, session_id, absorbed_ids, summary_message, holder=holder,
            supersede_previous=supersede_previous))

    def restore_compaction(self, compaction_id: str, *,
                           holder: str | None = None) -> compaction.RestoreResult:
        return self._pg.run(lambda: compaction.restore_compaction(
            self._pg, compaction_id, holder=holder))

    def list_compactions(self, session_id: str) -> list[dict[str, Any]]:
        """A session's compactions, oldest first (``seq`` is SQLite's rowid order)."""
        with self._read() as conn:
            sessions.require(conn, session_id)
            cur = conn.execute("SELECT id, summary_id, absorbed_count, created_at, restored_at"
                               " FROM compactions WHERE session_id = ? ORDER BY created_at, seq",
                               (session_id,))
            keys = ("compaction_id", "summary_id", "absorbed_count", "created_at",
                    "restored_at")
            return [dict(zip(keys, r)) for r in cur]

    def store_stats(self) -> dict[str, Any]:
        """`sessiondb.maintenance.stats.store_stats` for this store (see pg/stats.py)."""
        from .stats import store_stats
        return store_stats(self._pg)
