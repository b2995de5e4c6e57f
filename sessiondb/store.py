"""SessionDB: the public face of a store. Its connections, transactions and
background threads belong to the store core (sessiondb/engine/core.py); this class
delegates to it and holds the store's operations. Level 2 of
docs/architecture.md: the feature modules it delegates to take the core,
never this class, and the modules built on this class (importers, the
spool's re-import, transcripts) are never imported here.

One writer connection per store object; every write runs in `atomic()`
(BEGIN IMMEDIATE, SAVEPOINT when nested) with lock errors retried under a
per-call patience deadline. Reads go through a read-only connection so they
never wait on a writer in WAL mode. The search index is written after the
commit, by the core's indexer (see sessiondb/index/indexer.py).
"""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import IO, Any, Callable

import apsw

from .rows import compaction, leases, messages, pages, sessions, usage
from .maintenance import lifecycle as maintenance, stats
from .maintenance import (ExportSummary, PruneFilter, PrunePlan, export_sessions, export_to_path,
                          message_window as window_around)
from .engine import migrations
from .base import paths, policy
from .search import hits as search, search_maintenance
from .index import search_index
from .spool import spool_write
from .engine import checkpointer
from .sqlitefile import check_before_open
from .engine import CheckpointStats
from .rows import (MARKER_KEY, UID_KEY, EncodedMessage, Persisted, checked_time, encode, new_uid,
                   new_uids)
from .engine import Atomic, StoreCore
from .base import (InvalidInput, InvalidMessage, SchemaTooNew, SessionTooLong, StorageError,
                   StoreLocked, StoreNotFound, from_apsw)
from .index import IndexerStats
from .base import one

log = logging.getLogger(__name__)

DEFAULT_PATIENCE_S = 10.0


class SessionDB:
    """A session store in one SQLite file.

    ``SessionDB(path)`` opens (creating if needed, 0600) the file at
    ``path``; ``SessionDB.open(home, profile)`` resolves the home first.
    ``journal_mode`` is ``"wal"`` (default) or ``"delete"`` for filesystems
    where WAL cannot work; a WAL file is never downgraded. In WAL mode a
    background thread checkpoints once the WAL passes ``checkpoint_pages``
    (see checkpointer.py); commits never do. Another thread keeps the search
    index up to date after commits; ``background_index=False`` leaves that
    to searches over a long backlog, ``catch_up_index()`` and close.
    """

    def __init__(self, path: str | os.PathLike[str], *, journal_mode: str = "wal",
                 patience: float = DEFAULT_PATIENCE_S, clock: Callable[[], float] = time.time,
                 home: Path | None = None, profile: str | None = None,
                 vfs: str | None = None,
                 checkpoint_pages: int = policy.WAL_CHECKPOINT_PAGES,
                 background_index: bool = True, create: bool = True) -> None:
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
        # and without ``create`` a missing store is not made (see identify.py).
        self.identity = check_before_open(self.path, create=create, home=home,
                                                   profile=profile)
        self._core = core = StoreCore(self.path, journal_mode=journal_mode, patience=patience,
                                      vfs=vfs, clock=clock)
        try:
            core.guard.attach(core.writer)
            self._migrate()
            core.guard.establish(core.writer, self.atomic)
            core.start_threads(checkpoint_pages, background_index)
        except BaseException:
            core.abandon()
            raise
        # A stale search index is rebuilt here only if no other process holds the file.
        self.search_rebuilt_on_open = search_maintenance.rebuild_on_open(core)
        if core.indexer is not None:
            core.indexer.notify()  # catch up on what earlier handles left
        if home is not None and not core.writer.readonly("main"):
            spool_write.reserve_for(self.path)  # a home's spool takes space while there is some

    @classmethod
    def open(cls, home: str | os.PathLike[str] | None = None, profile: str | None = None,
             *, url: str | None = None, **kwargs: Any) -> "SessionDB":
        """Open ``<home>/state.db`` (or a profile's), creating the home 0700.

        With ``create=False`` (reading commands) a missing store raises
        StoreNotFound and nothing, not even the home, is created. ``url``
        (or ``$HERMES_STORE_URL``) ``postgresql://...`` opens the PostgreSQL
        backend instead (sessiondb/pg/, docs/postgresql.md); the home still
        holds its spool."""
        url = url or os.environ.get("HERMES_STORE_URL") or None
        if url is not None:
            from .pg import open_url  # psycopg is imported only for a server
            return open_url(url, home=home, profile=profile, **kwargs)
        root = paths.resolve_home(home)
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

    def _record_meta(self, key: str, value: str) -> None:
        row = self._core.writer.execute("SELECT value FROM state_meta WHERE key = ?",
                                        (key,)).fetchone()
        if row is None or row[0] != value:
            with self.atomic() as conn:
                conn.execute("INSERT INTO state_meta(key, value) VALUES (?, ?) ON CONFLICT(key)"
                             " DO UPDATE SET value = excluded.value", (key, value))

    def meta(self, key: str) -> str | None:
        """A value from ``state_meta``."""
        with self._read() as conn:
            row = conn.execute("SELECT value FROM state_meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def close(self) -> None:
        """Close both connections; safe to call more than once."""
        self._core.close()

    @property
    def quarantined(self) -> bool:
        """True once this handle refuses writes (corruption or a replaced file)."""
        return self._core.quarantined

    def __enter__(self) -> "SessionDB":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transactions ------------------------------------------------------

    def atomic(self, *, patience: float | None = None) -> Atomic:
        """The one transaction primitive: BEGIN IMMEDIATE, or a SAVEPOINT when nested.

        Yields the writer connection. Any exception rolls back everything
        done inside the block; apsw errors are re-raised as StorageError.
        Before BEGIN and inside it, the containment guard checks that the
        file is still ours (see sessiondb/engine/core.py and containment.py).
        """
        return self._core.write(patience=patience)

    def _read(self):  # type: ignore[no-untyped-def]
        """A connection for reading: the writer inside a transaction (to see
        its own uncommitted rows), otherwise the read-only connection."""
        return self._core.read()

    def _snapshot(self):  # type: ignore[no-untyped-def]
        """`_read` in one read transaction, so several statements see one
        commit (search reads the watermark, the index and the tail)."""
        return self._core.snapshot()

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

    @property
    def clock(self) -> Callable[[], float]:
        """The store's clock (``clock=`` at open); the core owns it."""
        return self._core.clock

    @clock.setter
    def clock(self, clock: Callable[[], float]) -> None:
        self._core.clock = clock

    def now(self) -> float:
        # `StoreCore.now`, inlined: the append path calls it once per write.
        return checked_time(self._core.clock(), "the store's clock")

    # -- sessions ----------------------------------------------------------

    def create_session(self, session_id: str | None = None, *, source: str,
                       model: str | None = None, title: str | None = None,
                       parent_session_id: str | None = None) -> str:
        """Create a session (or fill in a known one, never replacing values by
        NULL) and return its id."""
        if not isinstance(source, str) or not source:
            raise InvalidInput("source must be a non-empty string")
        with self.atomic() as conn:
            return sessions.create(conn, session_id, source=source, model=model, title=title,
                                   parent_session_id=parent_session_id, now=self.now())

    def get_session(self, session_id: str) -> sessions.Session:
        with self._read() as conn:
            return sessions.get(conn, session_id)

    def list_sessions(self, *, source: str | None = None, limit: int = 50,
                      before: float | None = None, since: float | None = None,
                      archived: bool | None = False) -> list[sessions.Session]:
        """Sessions newest first; ``before`` (a start time) pages backwards,
        ``since`` keeps sessions started at or after it. Archived sessions
        are left out unless ``archived`` is True (only them) or None (all)."""
        with self._read() as conn:
            return sessions.list_(conn, source=source, limit=limit, before=before,
                                  since=since, archived=archived)

    def session_page(self, *, after: pages.SessionKey | None = None, limit: int = 200,
                     source: str | None = None,
                     since: float | None = None) -> list[sessions.Session]:
        """Sessions oldest first after the key ``(started_at, id)``; for streaming."""
        with self._read() as conn:
            return pages.session_page(conn, after=after, limit=limit, source=source,
                                      since=since)

    def end_session(self, session_id: str, reason: str | None = None) -> None:
        with self.atomic() as conn:
            sessions.update(conn, session_id, self.now(), ended_at=self.now(), end_reason=reason)

    def set_title(self, session_id: str, title: str | None) -> None:
        with self.atomic() as conn:
            sessions.update(conn, session_id, self.now(), title=title)

    def delete_session(self, session_id: str) -> int:
        """Delete a session and its messages; returns how many messages went."""
        with self.atomic() as conn:
            return sessions.delete(conn, session_id)

    def record_usage(self, session_id: str, *, input_tokens: int = 0, output_tokens: int = 0,
                     cache_read_tokens: int = 0, cache_write_tokens: int = 0,
                     **ledger: Any) -> None:
        """Add a turn's token usage to the session's counters and to its usage
        ledger row (task ``turn``; ``ledger`` takes model, provider, api_calls,
        reasoning_tokens, cost_usd: see `record_auxiliary_usage`)."""
        with self.atomic() as conn:
            sessions.require(conn, session_id)
            sessions.add_usage(conn, session_id, self.now(), input_tokens=input_tokens,
                               output_tokens=output_tokens, cache_read_tokens=cache_read_tokens,
                               cache_write_tokens=cache_write_tokens)
            usage.record_turn(conn, session_id, self.now(), input_tokens=input_tokens,
                              output_tokens=output_tokens, cache_read_tokens=cache_read_tokens,
                              cache_write_tokens=cache_write_tokens, **ledger)

    # -- leases ------------------------------------------------------------

    def acquire_lease(self, session_id: str, holder: str, ttl_s: float) -> leases.Lease:
        with self.atomic() as conn:
            return leases.acquire(conn, session_id, holder, ttl_s, self.now())

    def refresh_lease(self, session_id: str, holder: str, ttl_s: float) -> leases.Lease:
        with self.atomic() as conn:
            return leases.refresh(conn, session_id, holder, ttl_s, self.now())

    def release_lease(self, session_id: str, holder: str) -> bool:
        with self.atomic() as conn:
            return leases.release(conn, session_id, holder)

    # -- messages ----------------------------------------------------------

    def append_message(self, session_id: str, message: dict[str, Any], *,
                       holder: str | None = None) -> int:
        """Append one message; returns its row id and marks the dict."""
        return self.append_messages(session_id, [message], holder=holder)[0]

    def append_messages(self, session_id: str, batch: list[dict[str, Any]], *,
                        holder: str | None = None) -> list[int]:
        """Append messages in one transaction: all of them or none.

        Each dict gets a stable uid (``_db_uid``) before the write, so
        appending the same dict again is a no-op, and the marker
        ``_db_persisted`` after the commit.
        """
        if not isinstance(batch, list):
            raise InvalidMessage("messages must be a list of dicts")
        # Dicts without a uid get a fresh one, which no stored row can have:
        # such a batch is inserted in one statement loop (`messages.insert_fresh`).
        fresh = len(batch) > 1 and all(type(m) is dict and not m.get(UID_KEY) for m in batch)
        uids = new_uids(len(batch))  # one syscall for the batch (codec.new_uids says why)
        encoded = [self._encode_for_append(m, i, u) for (i, m), u in zip(enumerate(batch), uids)]
        fresh = fresh and len({id(m) for m in batch}) == len(batch)  # a dict twice: one row
        try:
            ids = self._append_encoded(session_id, encoded, holder, fresh)
        except StorageError as e:
            spool_write.spool_failed_write(self._core, session_id, batch, e, encoded=encoded)
            raise
        for message, enc, rid in zip(batch, encoded, ids):
            message[MARKER_KEY] = Persisted(rid, enc.fingerprint)
        return ids

    def _append_encoded(self, session_id: str, encoded: list[EncodedMessage],
                        holder: str | None, fresh: bool) -> list[int]:
        """The write of `append_messages` (a server store does it in one call)."""
        return self.session_write(session_id, lambda conn, start: self._insert_held(
            conn, session_id, encoded, holder, "message", start, fresh))

    def session_write(self, session_id: str,
                      body: Callable[[apsw.Connection, int], tuple[Any, int]]) -> Any:
        """Write one session's rows in one transaction: ``body(conn, start)``
        gets the session's next position (the session exists; an unknown one
        raises the typed not-found error first) and returns (result, next
        position after its writes). The position query is skipped while
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
        """The session's next position, inside the caller's write transaction
        (an unknown session raises the typed not-found error; a server store
        also locks the session's row until the transaction ends)."""
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

    @staticmethod
    def _encode_for_append(message: Any, index: int, uid: str | None = None) -> EncodedMessage:
        # (a dict's own uid, even a bad one, goes to encode: it checks it)
        given = type(message) is dict and message.get(UID_KEY) not in (None, "")
        enc = encode(message, index=index, uid=None if given else uid)
        message.setdefault(UID_KEY, enc.uid)
        return enc

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

    load_limit: int = messages.LOAD_LIMIT

    def get_messages(self, session_id: str, *, include_archived: bool = False,
                     tail: int | None = None, limit: int | None = None,
                     before: int | None = None, after: int | None = None,
                     with_summary: bool = False) -> list[dict[str, Any]]:
        """A session's messages in order, marked as persisted.

        Whole, unless the session has more than ``load_limit`` rows: then
        SessionTooLong names the paging arguments and the command that
        streams it. ``tail=N`` is the last N rows (``with_summary`` adds the
        live rolling summary before them: what a resume needs); ``limit``
        with ``after``/``before`` (positions, each paged row carries its
        ``_db_position``) is one page, see `messages.load_range`.
        """
        with self._read() as conn:
            sessions.require(conn, session_id)
            if limit is not None or before is not None or after is not None:
                return messages.load_range(conn, session_id, include_archived=include_archived,
                                           limit=self.load_limit if limit is None else limit,
                                           before=before,
                                           after=after)
            try:
                rows = messages.load(conn, session_id, include_archived=include_archived,
                                     tail=tail, at_most=self.load_limit if tail is None else None)
            except messages.OverLimit:
                raise self._too_long(conn, session_id, include_archived) from None
            if with_summary and rows:
                rows = messages.summaries_before(conn, session_id, self._position_of(
                    conn, rows[0])) + rows
            return rows

    @staticmethod
    def _position_of(conn: apsw.Connection, message: dict[str, Any]) -> int:
        return one(conn.execute("SELECT position FROM messages WHERE id = ?",
                            (message[MARKER_KEY].id,)))[0]

    def _too_long(self, conn: apsw.Connection, session_id: str,
                  include_archived: bool) -> SessionTooLong:
        rows = messages.count(conn, session_id, include_archived=include_archived)
        command = f"hermes sessions export {session_id}"
        return SessionTooLong(
            f"session {session_id} has {rows} messages, more than the {self.load_limit} "
            f"a whole load returns; page it (limit/after/before, or tail) or stream it: "
            f"{command}", session_id=session_id, rows=rows, limit=self.load_limit,
            command=command, path=str(self.path))

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

    # -- streaming reads ---------------------------------------------------

    def message_page(self, session_id: str, *, after: pages.MessageKey | None = None,
                     limit: int = 500,
                     include_archived: bool = True) -> list[pages.StoredMessage]:
        """A bounded page of a session's rows after the key ``(position, id)``;
        stream a transcript without loading it whole."""
        with self._read() as conn:
            if after is None:
                sessions.require(conn, session_id)
            return pages.message_page(conn, session_id, after=after, limit=limit,
                                      include_archived=include_archived)

    def message_window(self, session_id: str, *, limit: int, before: int | None = None,
                       after: int | None = None,
                       include_archived: bool = True) -> pages.Window:
        """One bounded page of a session for display (see `pages.window`)."""
        with self._read() as conn:
            sessions.require(conn, session_id)
            return pages.window(conn, session_id, limit=limit, before=before, after=after,
                                include_archived=include_archived)

    def messages_around(self, session_id: str, message_id: int, *, context: int = 3,
                        include_archived: bool = False) -> list[pages.StoredMessage]:
        """A search hit in its place: message ``message_id`` with ``context``
        messages either side (`sessiondb.maintenance.message_window`)."""
        return window_around(self.core, session_id, message_id, context=context,
                             include_archived=include_archived)

    def count_messages(self, session_ids: list[str] | None = None) -> int:
        """Message rows in these sessions (``None``: in the whole store)."""
        with self._read() as conn:
            return pages.count_messages(conn, session_ids)

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

    # -- usage ledger (sessiondb/rows/usage.py) ---------------------------------

    def record_auxiliary_usage(self, session_id: str, *, task: str, model: str | None = None,
                               provider: str | None = None, cost_usd: float | None = None,
                               **counters: Any) -> bool:
        """Bill a model call made on a session's behalf that is not one of its
        turns (``task``: compaction, title, background_review, ...) to the
        ledger only: the transcript and the session row are never touched.
        Never raises: a failure is logged and False returned, because the
        caller's own work (a finished turn, a review) must not fail for it."""
        try:
            with self.atomic() as conn:
                sessions.require(conn, session_id)
                return usage.add(conn, session_id, self.now(), task=task, model=model,
                                 provider=provider, cost_usd=cost_usd, **counters)
        except Exception:  # noqa: BLE001 (documented: logged, never raised)
            log.warning("could not record %s usage for session %s", task, session_id,
                        exc_info=True)
            return False

    def session_usage(self, session_id: str) -> list[usage.UsageRow]:
        """A session's usage ledger rows (turns first)."""
        with self._read() as conn:
            sessions.require(conn, session_id)
            return usage.for_session(conn, session_id)

    def usage_totals(self) -> list[usage.UsageRow]:
        """The store's usage by task, model and provider."""
        with self._read() as conn:
            return usage.totals(conn)

    # -- keeping the store small, and export (sessiondb/maintenance/) ------------
    # Each takes the core, whichever backend provides it.

    def pin_sessions(self, session_ids: list[str]) -> list[str]:
        """Pin sessions: prune never removes them. Returns the ids."""
        return maintenance.pin(self.core, session_ids)

    def unpin_sessions(self, session_ids: list[str]) -> list[str]:
        return maintenance.unpin(self.core, session_ids)

    def archive_sessions(self, session_ids: list[str]) -> list[str]:
        """Hide sessions from listings and default search; every row stays."""
        return maintenance.archive(self.core, session_ids)

    def unarchive_sessions(self, session_ids: list[str]) -> list[str]:
        return maintenance.unarchive(self.core, session_ids)

    def prune_sessions(self, selection: PruneFilter, *, dry_run: bool = False,
                       export_to: str | os.PathLike[str] | None = None,
                       progress: Callable[[int], None] | None = None) -> PrunePlan:
        """Delete whole sessions matching ``selection`` (see
        `sessiondb.maintenance.lifecycle.prune`; refused while another
        process holds the store)."""
        return maintenance.prune(self.core, selection, dry_run=dry_run, export_to=export_to,
                                 progress=progress)

    def export_sessions(self, session_ids: list[str] | None, fmt: str, out: IO[str], *,
                        progress: Callable[[int], None] | None = None) -> ExportSummary:
        """Stream the named sessions (``None``: all) to ``out`` in ``fmt``."""
        return export_sessions(self.core, session_ids, fmt, out, progress=progress)

    def export_to_path(self, session_ids: list[str] | None, fmt: str,
                       path: str | os.PathLike[str], *, force: bool = False,
                       progress: Callable[[int], None] | None = None) -> ExportSummary:
        """Export into a new private file at ``path`` (crash-safe)."""
        return export_to_path(self.core, session_ids, fmt, path, force=force,
                              progress=progress)


__all__ = ["SessionDB", "new_uid"]
