"""SessionDB: the store in one SQLite file, and the way to open either backend.

The operations both backends share are `StoreFace`'s (sessiondb/face.py);
this class adds what a SQLite file needs: opening and migrating it, the
write transaction's position shortcut, the one-statement-loop insert of a
fresh batch, FTS5 search and its index, WAL checkpoints and the file's
checks. Its connections, transactions and background threads belong to the
store core (sessiondb/engine/core.py). In the order of units
(docs/architecture.md) it comes after the features: the feature modules it
delegates to take the core, never this class, and the modules built on the
faces (importers, the spool's re-import, transcripts) are never imported
here.

One writer connection per store object; every write runs in `atomic()`
(BEGIN IMMEDIATE, SAVEPOINT when nested) with lock errors retried under a
per-call patience deadline. Reads go through a read-only connection so they
never wait on a writer in WAL mode. The search index is written after the
commit, by the core's indexer (see sessiondb/index/indexer.py).
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable

import apsw

from .base import (InvalidInput, SchemaTooNew, SchemaTooOld, from_apsw, hermes_command, paths,
                   policy)
from .engine import CheckpointStats, StoreCore, checkpointer, migrations
from .face import DEFAULT_PATIENCE_S, SessionBody, StoreFace
from .index import IndexerStats, search_index
from .maintenance import lifecycle as maintenance, stats
from .rows import EncodedMessage, compaction, leases, messages, new_uid, sessions
from .search import hits as search, search_maintenance
from .spool import spool_write
from .sqlitefile import check_before_open


class SessionDB(StoreFace):
    """A session store in one SQLite file.

    ``SessionDB(path)`` opens (creating if needed, 0600) the file at
    ``path``; ``SessionDB.open(home, profile)`` resolves the home first.
    ``journal_mode`` is ``"wal"`` (default) or ``"delete"`` for filesystems
    where WAL cannot work; a WAL file is never downgraded. In WAL mode a
    background thread checkpoints once the WAL passes ``checkpoint_pages``
    (see checkpointer.py); commits never do. Another thread keeps the search
    index up to date after commits; ``background_index=False`` leaves that
    to searches over a long backlog, ``catch_up_index()`` and close.

    ``read_only=True`` opens an existing store without writing a byte of it
    or its sidecars (docs/architecture.md, "Read-only handles"): no
    migration (a schema that needs one first raises `SchemaTooOld`), no
    stamp, no index rebuild, no threads, no spool reserve; every write
    raises `ReadOnlyHandle`, and search on a stale or damaged index answers
    from the fallback scan.
    """

    backend = "sqlite"

    def __init__(self, path: str | os.PathLike[str], *, journal_mode: str = "wal",
                 patience: float = DEFAULT_PATIENCE_S, clock: Callable[[], float] = time.time,
                 home: Path | None = None, profile: str | None = None,
                 vfs: str | None = None,
                 checkpoint_pages: int = policy.WAL_CHECKPOINT_PAGES,
                 background_index: bool = True, create: bool = True,
                 read_only: bool = False) -> None:
        self.sqlite_version = policy.check_sqlite_version()
        if journal_mode not in ("wal", "delete"):
            raise InvalidInput(f"journal_mode must be 'wal' or 'delete', not {journal_mode!r}")
        checkpointer.check_threshold(checkpoint_pages)
        self.path = Path(path)
        self.home, self.profile = home, profile
        self.patience = patience
        self._tail: tuple[str, int, int] | None = None  # see _known_start
        if self.path.is_dir():
            raise InvalidInput(f"{self.path} is a directory, not a database file",
                               path=str(self.path))
        # Before any pragma or write: another program's file is never changed,
        # and without ``create`` a missing store is not made (see sqlitefile/identity.py).
        self.identity = check_before_open(self.path, create=create and not read_only,
                                          home=home, profile=profile)
        self._core = core = StoreCore(self.path, journal_mode=journal_mode, patience=patience,
                                      vfs=vfs, clock=clock, read_only=read_only)
        try:
            core.guard.attach(core.writer)
            if read_only:
                self._check_readable()
            else:
                self._migrate()
                core.guard.establish(core.writer, self.atomic)
                core.start_threads(checkpoint_pages, background_index)
        except BaseException:
            core.abandon()
            raise
        # A stale search index is rebuilt here only if no other process holds the file.
        self.search_rebuilt_on_open = (None if read_only else
                                       search_maintenance.rebuild_on_open(core))
        if core.indexer is not None:
            core.indexer.notify()  # catch up on what earlier handles left
        if home is not None and not read_only and not core.writer.readonly("main"):
            spool_write.reserve_for(self.path)  # a home's spool takes space while there is some

    @classmethod
    def open(cls, home: str | os.PathLike[str] | None = None, profile: str | None = None,
             *, url: str | None = None, **kwargs: Any) -> StoreFace:
        """Open ``<home>/state.db`` (or a profile's), creating the home 0700.

        With ``create=False`` (reading commands) a missing store raises
        StoreNotFound and nothing, not even the home, is created; so does
        ``read_only=True``, which opens the store without writing to it
        (see the class doc; on PostgreSQL a read-only session). ``url``
        (or ``$HERMES_STORE_URL``) ``postgresql://...`` opens the PostgreSQL
        backend instead (sessiondb/pg/, docs/postgresql.md); the home still
        holds its spool. The result is a `StoreFace`: a `SessionDB` for a
        file, a `PgSessionDB` for a server."""
        url = url or os.environ.get("HERMES_STORE_URL") or None
        if url is not None:
            from .pg import open_url  # psycopg is imported only for a server
            return open_url(url, home=home, profile=profile, **kwargs)
        root = paths.resolve_home(home)
        if kwargs.get("read_only"):  # the home is only read: not made, not made private
            return cls(paths.store_path(root, profile), home=root, profile=profile, **kwargs)
        if not kwargs.get("create", True):
            path = paths.store_path(root, profile)
            check_before_open(path, create=False, home=root, profile=profile)
        directory = paths.ensure_private_dir(paths.profile_dir(root, profile))
        return cls(directory / paths.STORE_NAME, home=root, profile=profile, **kwargs)

    @property
    def core(self) -> StoreCore:
        """The store core. The package's feature modules take it, never this
        class (docs/architecture.md); this class's methods pass it on
        (``prune_sessions``, ``export_to_path``, ...), as do the feature
        functions' other callers: ``spool_failed_write(db.core, ...)``."""
        return self._core

    # -- the core's state, read-only views (tests and benches look at them) --

    @property
    def _writer(self) -> apsw.Connection:
        return self._core.writer

    @property
    def _guard(self):  # type: ignore[no-untyped-def]
        return self._core.guard

    @property
    def _indexer(self):  # type: ignore[no-untyped-def]
        return self._core.indexer

    @property
    def _checkpointer(self):  # type: ignore[no-untyped-def]
        return self._core.checkpointer

    @property
    def checkpoint_stats(self) -> CheckpointStats | None:
        """What the background checkpointer did (None: it does not run here)."""
        ckpt = self._core.checkpointer
        return ckpt.stats if ckpt else None

    def _migrate(self) -> None:
        conn = self._core.writer
        try:
            newer = migrations.unknown(conn)
            if newer:
                raise SchemaTooNew(f"{self.path} has migrations this version does not know: "
                                   f"{', '.join(newer)}; upgrade hermes-state",
                                   path=str(self.path))
            if migrations.pending(conn):
                migrations.apply_pending(conn, lambda: self._core.begin_immediate(self.patience))
            self._record_meta("sqlite_version", self.sqlite_version)
        except apsw.Error as e:
            raise from_apsw(e, path=str(self.path), context="cannot prepare schema") from e

    def _check_readable(self) -> None:
        """A read-only open's schema check: what the reading queries need is
        there (see `migrations.READABLE_BEFORE`), nothing is applied."""
        conn = self._core.writer
        try:
            newer, blocking = migrations.unknown(conn), migrations.blocking_reads(conn)
        except apsw.Error as e:
            raise from_apsw(e, path=str(self.path), context="cannot read the schema") from e
        if newer:
            raise SchemaTooNew(f"{self.path} has migrations this version does not know: "
                               f"{', '.join(newer)}; upgrade hermes-state", path=str(self.path))
        if blocking:
            command = hermes_command(self.home, self.profile, "sessions", "repair")
            raise SchemaTooOld(
                f"{self.path} was written by an older hermes-state and cannot be read "
                f"read-only before its schema is upgraded ({', '.join(blocking)} pending); "
                f"upgrade it with: {command}", path=str(self.path))

    def _record_meta(self, key: str, value: str) -> None:
        row = self._core.writer.execute("SELECT value FROM state_meta WHERE key = ?",
                                        (key,)).fetchone()
        if row is None or row[0] != value:
            with self.atomic() as conn:
                conn.execute("INSERT INTO state_meta(key, value) VALUES (?, ?) ON CONFLICT(key)"
                             " DO UPDATE SET value = excluded.value", (key, value))

    @property
    def quarantined(self) -> bool:
        """True once this handle refuses writes (corruption or a replaced file)."""
        return self._core.quarantined

    def checkpoint(self, *, patience: float | None = None) -> tuple[int, int]:
        """A PASSIVE checkpoint: (WAL frames, frames copied back).

        SQLite answers SQLITE_BUSY at once while another connection is
        checkpointing (its busy handler is not used for PASSIVE); that is
        waited out like a write lock, up to the patience, then `locked`."""
        return self._core.checkpoint(patience)

    def quick_check(self) -> list[str]:
        """SQLite's ``quick_check`` lines; ``["ok"]`` when healthy."""
        with self._read() as conn:
            return [r[0] for r in conn.execute("PRAGMA quick_check")]

    def journal_mode(self) -> str:
        with self._read() as conn:
            return str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()

    def pending_migrations(self) -> list[str]:
        with self._read() as conn:
            return migrations.pending(conn)

    # -- messages ----------------------------------------------------------

    def append_encoded(self, session_id: str, encoded: list[EncodedMessage], *,
                       holder: str | None = None, fresh: bool = False) -> list[int]:
        """See `StoreFace.append_encoded`: a `session_write`; a fresh batch is
        inserted in one statement loop (`messages.insert_fresh`)."""
        return self.session_write(session_id, lambda conn, start: self._insert_held(
            conn, session_id, encoded, holder, "message", start, fresh))

    def locked_write(self, session_id: str, body: Callable[[Any], Any]) -> Any:
        """``body(conn)`` in one `atomic()` block: BEGIN IMMEDIATE holds the
        file's write lock, so no other writer runs beside it."""
        with self.atomic() as conn:
            return body(conn)

    def session_write(self, session_id: str, body: SessionBody) -> Any:
        """See `StoreFace.session_write`. The position query is skipped while
        nothing was committed since this handle's last such write to the
        same session (see `_known_start`)."""
        with self._core.lock:  # the version read after COMMIT must be this commit's
            owned = not self._core.depth  # our own transaction: the tail may be used and kept
            tail, self._tail = self._tail, None  # forgotten unless this write commits
            end: list[int] = []

            def run(conn: apsw.Connection) -> Any:
                paths.validate_session_id(session_id)
                start = self._known_start(conn, session_id, tail) if owned else None
                result, after = body(conn, self._start_position(conn, session_id)
                                     if start is None else start)
                end[:] = [after]
                return result
            with self.atomic() as conn:
                result = run(conn)
            if owned:
                self._tail = (session_id, end[0], self._core.writer.data_version())
            return result

    def next_position(self, conn: apsw.Connection, session_id: str) -> int:
        """See `StoreFace.next_position`."""
        return self._start_position(conn, session_id)

    @staticmethod
    def _start_position(conn: apsw.Connection, session_id: str) -> int:
        position = messages.start_position(conn, session_id)
        if position is None:
            sessions.require(conn, session_id)  # raises the typed not-found error
        return position  # type: ignore[return-value]

    @staticmethod
    def _known_start(conn: apsw.Connection, session_id: str,
                     tail: tuple[str, int, int] | None) -> int | None:
        """The next position of ``session_id`` without a query, when this
        handle's last committed `session_write` went to it and nothing has
        been committed since, by anyone: the writer's data version counts
        our own commits and every change by others SQLite noticed at BEGIN
        (and BEGIN IMMEDIATE holds the write lock from there on). The
        session then still exists and its last position is the one we left."""
        if tail is None or tail[0] != session_id or tail[2] != conn.data_version():
            return None
        return tail[1]

    def insert_encoded(self, conn: apsw.Connection, session_id: str,
                       encoded: list[EncodedMessage], *, holder: str | None = None,
                       kind: str = "message") -> list[int]:
        """Insert inside the caller's transaction; counters move with the rows."""
        paths.validate_session_id(session_id)
        position = self._start_position(conn, session_id)
        return self._insert_held(conn, session_id, encoded, holder, kind, position)[0]

    def _insert_held(self, conn: apsw.Connection, session_id: str,
                     encoded: list[EncodedMessage], holder: str | None, kind: str,
                     position: int, fresh: bool = False) -> tuple[list[int], int]:
        """The lease check, then the rows from ``position`` on: (row ids, next
        position after them). ``fresh``: every uid was generated for this write."""
        if holder is not None:
            leases.check(conn, session_id, holder, self.now())
        if fresh:
            ids = messages.insert_fresh(conn, session_id, encoded, position, kind)
            sessions.add_message_counts(conn, session_id, self.now(), len(ids),
                                        sum(e.tool_call_total for e in encoded))
            return ids, position + len(ids)
        return self._insert_rows(conn, session_id, encoded, kind, position)

    def _insert_rows(self, conn: apsw.Connection, session_id: str,
                     encoded: list[EncodedMessage], kind: str,
                     position: int) -> tuple[list[int], int]:
        ids, added, calls = [], 0, 0
        for enc in encoded:
            rid, inserted = messages.insert(conn, session_id, enc, position, kind)
            ids.append(rid)
            if inserted:
                position += 1
                added += 1
                calls += enc.tool_call_total
        if added:
            sessions.add_message_counts(conn, session_id, self.now(), added, calls)
        return ids, position

    # -- compaction --------------------------------------------------------

    def archive_and_compact(self, session_id: str, absorbed_ids: list[int],
                            summary_message: dict[str, Any], *, holder: str | None = None,
                            supersede_previous: bool = True) -> compaction.CompactionResult:
        """See `sessiondb.rows.compaction.archive_and_compact`."""
        return compaction.archive_and_compact(self._core, session_id, absorbed_ids,
                                              summary_message, holder=holder,
                                              supersede_previous=supersede_previous)

    def restore_compaction(self, compaction_id: str, *,
                           holder: str | None = None) -> compaction.RestoreResult:
        """See `sessiondb.rows.compaction.restore_compaction`."""
        return compaction.restore_compaction(self._core, compaction_id, holder=holder)

    def list_compactions(self, session_id: str) -> list[dict[str, Any]]:
        """A session's compactions, oldest first."""
        return compaction.list_compactions(self._core, session_id)

    # -- search ------------------------------------------------------------

    def search(self, query: str, *, session_id: str | None = None, role: str | None = None,
               source: str | None = None, since: float | None = None,
               until: float | None = None, limit: int = 20, offset: int = 0,
               order: str = "rank", include_archived: bool = False,
               raw: bool = False, archived_sessions: bool = True) -> search.SearchResults:
        """Search message text; see sessiondb/search/hits.py and docs/search.md.

        ``include_archived`` adds archived (compacted) and rewound rows,
        each hit carrying its ``state``. ``raw=True`` takes FTS5 syntax.
        ``archived_sessions=False`` leaves out archived sessions.
        """
        if not archived_sessions:  # the filter costs a plan change; only when it can matter
            with self._read() as conn:
                archived_sessions = not maintenance.any_archived(conn)
        filters = search.Filters(session_id, role, source, since, until, include_archived,
                                 archived_sessions)
        return search.search(self._core, query, filters=filters, limit=limit, offset=offset,
                             order=order, raw=raw)

    def index_backlog(self) -> search_index.Backlog | None:
        """What the search index has not caught up on (None: no index)."""
        with self._read() as conn:
            return search_index.backlog(conn)

    def catch_up_index(self, max_rows: int | None = None) -> int:
        """Bring the search index up to date now, in this thread (the
        background indexer normally does it within milliseconds of a commit);
        returns the rows indexed or change-log entries applied."""
        return self._core.catch_up_index(max_rows)

    def can_index_now(self) -> bool:
        """Whether this thread may run index batches now (a writable, open,
        unquarantined handle, outside a transaction of its own)."""
        return self._core.can_index_now()

    @property
    def indexer_stats(self) -> IndexerStats | None:
        """What the indexer did (None: a read-only handle has none)."""
        return self._core.indexer.stats if self._core.indexer else None

    def search_index_stale(self) -> dict | None:
        """The ``fts_stale`` record while search runs on the fallback scan."""
        with self._read() as conn:
            return search_index.stale_marker(conn)

    def rebuild_search_index(self, *, force: bool = False) -> dict[str, Any]:
        """Rebuild both search indexes and clear ``fts_stale``; refuses with
        SearchRebuildRefused while another process holds the store."""
        return search_maintenance.rebuild(self._core, force=force)

    def search_health(self) -> search_maintenance.SearchHealth:
        """Integrity-check and a real MATCH probe for each search index."""
        return search_maintenance.health(self._core)

    def store_stats(self) -> dict[str, Any]:
        """One document describing the store (`sessiondb.maintenance.stats.store_stats`;
        keys documented in docs/cli.md)."""
        return stats.store_stats(self._core)


__all__ = ["SessionDB", "new_uid"]
