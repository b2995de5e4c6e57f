"""StoreFace: the store API both backends offer, written once.

`SessionDB` (store.py: one SQLite file over a `StoreCore`) and `PgSessionDB`
(pg/store.py: a PostgreSQL database over a `PgCore`) both derive from this
class, and neither from the other. What is here runs on the `Core`
protocol (sessiondb/base/coreapi.py) and the row modules, whose ``?`` SQL
both backends speak: sessions, usage, leases, appends, whole and paged
reads. What differs is the short list of public methods each face
implements (the abstract ones below): how one session's write is
serialised, how an append reaches its rows, compaction's transactions,
search and its index, and the SQLite file's own operations, which a server
store answers with `NotOnPostgreSQL` or the neutral value (no backlog, no
checkpointer). No face overrides a private method of another class
(tests/sessiondb/pg/test_faces.py holds that), so a private method here
means one thing on both backends.

Code that works on either backend takes a `StoreFace`; `SessionDB.open`
returns one. Code that needs the SQLite file itself (recovery, the
migration to a server) takes `SessionDB`.
"""
from __future__ import annotations

import logging
import os
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Callable, ClassVar, IO, Self

from .base import (Core, InvalidInput, InvalidMessage, SessionTooLong, StorageError,
                   hermes_command, one)
from .engine import CheckpointStats
from .index import IndexerStats, search_index
from .maintenance import (CheckpointPrune, ExportSummary, PruneFilter, PrunePlan,
                          export_sessions, export_to_path, lifecycle, message_window,
                          prune_checkpoints)
from .rows import (EncodedMessage, MARKER_KEY, Persisted, UID_KEY, checked_time, compaction,
                   encode, leases, messages, new_uids, pages, sessions, usage)
from .search import SearchResults
from .spool import spool_failed_write

log = logging.getLogger(__name__)

DEFAULT_PATIENCE_S = 10.0

#: ``body(conn, start)`` of `StoreFace.session_write`: (result, next position).
SessionBody = Callable[[Any, int], tuple[Any, int]]


class StoreFace(ABC):
    """One open store, on either backend (see the module doc).

    A face sets ``path`` (the SQLite file, or the profile's ``postgresql``
    anchor the spool goes beside), ``home``, ``profile``, ``patience`` and
    ``search_rebuilt_on_open``, and implements the abstract methods."""

    backend: ClassVar[str]  # "sqlite" or "postgresql"
    path: Path
    home: Path | None
    profile: str | None
    patience: float
    search_rebuilt_on_open: dict[str, Any] | None
    #: Rows a whole load returns at most (a handle may lower it).
    load_limit: int = messages.LOAD_LIMIT

    # -- what each backend provides ----------------------------------------

    @property
    @abstractmethod
    def core(self) -> Core:
        """The store core the feature modules take (docs/architecture.md);
        this class's methods pass it on (``prune_sessions``,
        ``export_to_path``, ...), as the agent does to
        ``spool_failed_write(db.core, ...)``."""

    @property
    @abstractmethod
    def quarantined(self) -> bool:
        """True once this handle refuses writes (corruption or a replaced file)."""

    @abstractmethod
    def pending_migrations(self) -> list[str]:
        """Migrations of this version the store has not applied yet."""

    @abstractmethod
    def session_write(self, session_id: str, body: SessionBody) -> Any:
        """Write one session's rows in one transaction: ``body(conn, start)``
        gets the session's next position (the session exists; an unknown one
        raises the typed not-found error first) and returns (result, next
        position after its writes); the result is returned."""

    @abstractmethod
    def locked_write(self, session_id: str, body: Callable[[Any], Any]) -> Any:
        """``body(conn)`` in one write transaction no other writer of the
        session runs beside (SQLite's write lock covers the file; a server
        locks the session's row)."""

    @abstractmethod
    def next_position(self, conn: Any, session_id: str) -> int:
        """The session's next position, inside the caller's write transaction
        (an unknown session raises the typed not-found error; a server store
        also locks the session's row until the transaction ends)."""

    @abstractmethod
    def append_encoded(self, session_id: str, encoded: list[EncodedMessage], *,
                       holder: str | None = None, fresh: bool = False) -> list[int]:
        """The write of `append_messages`: the rows at the session's end, in
        one transaction (or the caller's), after the lease check; returns
        their ids. A known uid keeps its row. ``fresh``: every uid was made
        for this write, so none can be stored yet. No spooling, no markers."""

    @abstractmethod
    def insert_encoded(self, conn: Any, session_id: str, encoded: list[EncodedMessage], *,
                       holder: str | None = None, kind: str = "message") -> list[int]:
        """Insert inside the caller's transaction; counters move with the rows."""

    @abstractmethod
    def archive_and_compact(self, session_id: str, absorbed_ids: list[int],
                            summary_message: dict[str, Any], *, holder: str | None = None,
                            supersede_previous: bool = True) -> compaction.CompactionResult:
        """See `sessiondb.rows.compaction.archive_and_compact`."""

    @abstractmethod
    def restore_compaction(self, compaction_id: str, *,
                           holder: str | None = None) -> compaction.RestoreResult:
        """See `sessiondb.rows.compaction.restore_compaction`."""

    @abstractmethod
    def list_compactions(self, session_id: str) -> list[dict[str, Any]]:
        """A session's compactions, oldest first."""

    @abstractmethod
    def search(self, query: str, *, session_id: str | None = None, role: str | None = None,
               source: str | None = None, since: float | None = None,
               until: float | None = None, limit: int = 20, offset: int = 0,
               order: str = "rank", include_archived: bool = False,
               raw: bool = False, archived_sessions: bool = True) -> SearchResults:
        """Search message text (docs/search.md). ``include_archived`` adds
        archived (compacted) and rewound rows, each hit carrying its
        ``state``; ``raw=True`` takes the backend's own query syntax;
        ``archived_sessions=False`` leaves out archived sessions."""

    @abstractmethod
    def rebuild_search_index(self, *, force: bool = False) -> dict[str, Any]:
        """Rebuild the search indexes (what it did, as a document)."""

    @abstractmethod
    def store_stats(self) -> dict[str, Any]:
        """One document describing the store (keys documented in docs/cli.md)."""

    # -- SQLite's file and its derived index: a server store has none --------

    @abstractmethod
    def checkpoint(self, *, patience: float | None = None) -> tuple[int, int]:
        """A PASSIVE WAL checkpoint: (WAL frames, frames copied back)."""

    @abstractmethod
    def quick_check(self) -> list[str]:
        """SQLite's ``quick_check`` lines; ``["ok"]`` when healthy."""

    @abstractmethod
    def journal_mode(self) -> str:
        """The SQLite file's journal mode."""

    @abstractmethod
    def search_health(self) -> Any:
        """Integrity-check and a real MATCH probe for each FTS5 index."""

    @abstractmethod
    def index_backlog(self) -> search_index.Backlog | None:
        """What the search index has not caught up on (None: no backlog kept)."""

    @abstractmethod
    def search_index_stale(self) -> dict | None:
        """The ``fts_stale`` record while search runs on the fallback scan."""

    @abstractmethod
    def catch_up_index(self, max_rows: int | None = None) -> int:
        """Bring the search index up to date now; rows indexed (0: nothing to do)."""

    @abstractmethod
    def can_index_now(self) -> bool:
        """Whether this thread may run index batches now."""

    @property
    @abstractmethod
    def checkpoint_stats(self) -> CheckpointStats | None:
        """What the background checkpointer did (None: none runs here)."""

    @property
    @abstractmethod
    def indexer_stats(self) -> IndexerStats | None:
        """What the indexer did (None: none runs here)."""

    # -- the handle ----------------------------------------------------------

    def close(self) -> None:
        """Close the store's connections; safe to call more than once."""
        self.core.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def atomic(self, *, patience: float | None = None) -> AbstractContextManager[Any]:
        """The one transaction primitive, yielding the write connection: BEGIN
        (IMMEDIATE on SQLite), or a SAVEPOINT when nested. Any exception
        rolls back everything done inside the block; backend errors are
        re-raised as StorageError. On SQLite the containment guard checks,
        before BEGIN and inside it, that the file is still ours (see
        sessiondb/engine/core.py and containment.py)."""
        return self.core.write(patience=patience)

    def _read(self) -> AbstractContextManager[Any]:
        """A connection for reading: the writer inside a transaction (to see
        its own uncommitted rows), otherwise a reading connection."""
        return self.core.read()

    def _snapshot(self) -> AbstractContextManager[Any]:
        """`_read` in one read transaction, so several statements see one commit."""
        return self.core.snapshot()

    @property
    def clock(self) -> Callable[[], float]:
        """The store's clock (``clock=`` at open); the core owns it."""
        return self.core.clock

    @clock.setter
    def clock(self, clock: Callable[[], float]) -> None:
        self.core.clock = clock

    def now(self) -> float:
        # `Core.now`, inlined: the append path calls it once per write.
        return checked_time(self.core.clock(), "the store's clock")

    def meta(self, key: str) -> str | None:
        """A value from ``state_meta``."""
        with self._read() as conn:
            row = conn.execute("SELECT value FROM state_meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

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
        return self.locked_write(session_id, lambda conn: sessions.delete(conn, session_id))

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
        return self.locked_write(session_id, lambda conn: leases.acquire(
            conn, session_id, holder, ttl_s, self.now()))

    def refresh_lease(self, session_id: str, holder: str, ttl_s: float) -> leases.Lease:
        return self.locked_write(session_id, lambda conn: leases.refresh(
            conn, session_id, holder, ttl_s, self.now()))

    def release_lease(self, session_id: str, holder: str) -> bool:
        return self.locked_write(session_id, lambda conn: leases.release(
            conn, session_id, holder))

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
        ``_db_persisted`` after the commit. A write that fails is spooled
        (sessiondb/spool/) before its error is raised.
        """
        if not isinstance(batch, list):
            raise InvalidMessage("messages must be a list of dicts")
        # Dicts without a uid get a fresh one, which no stored row can have:
        # such a batch may be inserted without looking for known uids.
        fresh = len(batch) > 1 and all(type(m) is dict and not m.get(UID_KEY) for m in batch)
        uids = new_uids(len(batch))  # one syscall for the batch (codec.new_uids says why)
        encoded = [self._encode_for_append(m, i, u) for (i, m), u in zip(enumerate(batch), uids)]
        fresh = fresh and len({id(m) for m in batch}) == len(batch)  # a dict twice: one row
        try:
            ids = self.append_encoded(session_id, encoded, holder=holder, fresh=fresh)
        except StorageError as e:
            spool_failed_write(self.core, session_id, batch, e, encoded=encoded)
            raise
        for message, enc, rid in zip(batch, encoded, ids):
            message[MARKER_KEY] = Persisted(rid, enc.fingerprint)
        return ids

    @staticmethod
    def _encode_for_append(message: Any, index: int, uid: str | None = None) -> EncodedMessage:
        # (a dict's own uid, even a bad one, goes to encode: it checks it)
        given = type(message) is dict and message.get(UID_KEY) not in (None, "")
        enc = encode(message, index=index, uid=None if given else uid)
        message.setdefault(UID_KEY, enc.uid)
        return enc

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
    def _position_of(conn: Any, message: dict[str, Any]) -> int:
        return one(conn.execute("SELECT position FROM messages WHERE id = ?",
                                (message[MARKER_KEY].id,)))[0]

    def _too_long(self, conn: Any, session_id: str, include_archived: bool) -> SessionTooLong:
        rows = messages.count(conn, session_id, include_archived=include_archived)
        command = hermes_command(self.home, self.profile, "sessions", "export", session_id)
        return SessionTooLong(
            f"session {session_id} has {rows} messages, more than the {self.load_limit} "
            f"a whole load returns; page it (limit/after/before, or tail) or stream it: "
            f"{command}", session_id=session_id, rows=rows, limit=self.load_limit,
            command=command, path=str(self.path))

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
        return message_window(self.core, session_id, message_id, context=context,
                              include_archived=include_archived)

    def count_messages(self, session_ids: list[str] | None = None) -> int:
        """Message rows in these sessions (``None``: in the whole store)."""
        with self._read() as conn:
            return pages.count_messages(conn, session_ids)

    # -- usage ledger (sessiondb/rows/usage.py) ------------------------------

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
        return lifecycle.pin(self.core, session_ids)

    def unpin_sessions(self, session_ids: list[str]) -> list[str]:
        return lifecycle.unpin(self.core, session_ids)

    def archive_sessions(self, session_ids: list[str]) -> list[str]:
        """Hide sessions from listings and default search; every row stays."""
        return lifecycle.archive(self.core, session_ids)

    def unarchive_sessions(self, session_ids: list[str]) -> list[str]:
        return lifecycle.unarchive(self.core, session_ids)

    def prune_sessions(self, selection: PruneFilter, *, dry_run: bool = False,
                       export_to: str | os.PathLike[str] | None = None,
                       progress: Callable[[int], None] | None = None) -> PrunePlan:
        """Delete whole sessions matching ``selection`` (see
        `sessiondb.maintenance.lifecycle.prune`; refused while another
        process holds the store)."""
        return lifecycle.prune(self.core, selection, dry_run=dry_run, export_to=export_to,
                               progress=progress)

    def prune_checkpoints(self, *, keep: int = 1, session_ids: list[str] | None = None,
                          dry_run: bool = False) -> CheckpointPrune:
        """Delete graph checkpoints but the newest ``keep`` of each thread
        (`sessiondb.maintenance.graph_prune`); sessions and transcripts stay."""
        return prune_checkpoints(self.core, keep=keep, session_ids=session_ids,
                                 dry_run=dry_run)

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


__all__ = ["StoreFace", "DEFAULT_PATIENCE_S"]
