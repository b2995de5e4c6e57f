"""Schema migrations: an ordered list of small named functions.

Each migration runs in its own write transaction together with the row that
records it, so a crash leaves either both or neither. `pending()` and
`applied()` only read.
"""
from __future__ import annotations

import logging
import time
from typing import Callable

import apsw

from ..base import one
from ..index import search_index
from ..rows import checkpoints, messages, usage

log = logging.getLogger(__name__)

Migration = Callable[[apsw.Connection], None]


def m001_initial(conn: apsw.Connection) -> None:
    """Sessions, messages and the key/value state table."""
    conn.execute("""
    CREATE TABLE state_meta (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    CREATE TABLE sessions (
        id                 TEXT PRIMARY KEY,
        parent_session_id  TEXT REFERENCES sessions(id) ON DELETE SET NULL,
        source             TEXT NOT NULL,
        model              TEXT,
        title              TEXT,
        started_at         REAL NOT NULL,
        updated_at         REAL NOT NULL,
        ended_at           REAL,
        end_reason         TEXT,
        message_count      INTEGER NOT NULL DEFAULT 0,
        tool_call_count    INTEGER NOT NULL DEFAULT 0,
        input_tokens       INTEGER NOT NULL DEFAULT 0,
        output_tokens      INTEGER NOT NULL DEFAULT 0,
        cache_read_tokens  INTEGER NOT NULL DEFAULT 0,
        cache_write_tokens INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX sessions_by_recency ON sessions(started_at DESC);
    CREATE INDEX sessions_by_source ON sessions(source, started_at DESC);
    CREATE INDEX sessions_by_parent ON sessions(parent_session_id);
    CREATE TABLE messages (
        id            INTEGER PRIMARY KEY,
        session_id    TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        uid           TEXT NOT NULL,
        position      INTEGER NOT NULL,
        role          TEXT NOT NULL,
        content_kind  TEXT NOT NULL CHECK (content_kind IN ('text', 'json', 'null', 'absent')),
        content       TEXT,
        tool_calls    TEXT,
        tool_call_id  TEXT,
        tool_name     TEXT,
        finish_reason TEXT,
        timestamp     REAL NOT NULL,
        token_count   INTEGER,
        meta          TEXT NOT NULL DEFAULT '{}',
        fingerprint   TEXT NOT NULL,
        state         TEXT NOT NULL DEFAULT 'active'
                      CHECK (state IN ('active', 'archived', 'rewound')),
        compaction_id TEXT,
        kind          TEXT NOT NULL DEFAULT 'message',
        UNIQUE (session_id, uid)
    );
    CREATE INDEX messages_in_order ON messages(session_id, position, id);
    CREATE INDEX messages_by_time ON messages(timestamp);
    """)


def m002_leases(conn: apsw.Connection) -> None:
    """Turn leases: who may write a session's turn, until when."""
    conn.execute("""
    CREATE TABLE leases (
        session_id  TEXT PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
        holder      TEXT NOT NULL,
        expires_at  REAL NOT NULL,
        acquired_at REAL NOT NULL
    );
    """)


def m003_compactions(conn: apsw.Connection) -> None:
    """Micro-compactions (so each can be restored) and the indexes they seek by."""
    conn.execute("""
    CREATE TABLE compactions (
        id             TEXT PRIMARY KEY,
        session_id     TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        summary_id     INTEGER NOT NULL,
        absorbed_count INTEGER NOT NULL,
        created_at     REAL NOT NULL,
        restored_at    REAL
    );
    CREATE INDEX compactions_by_session ON compactions(session_id, created_at);
    CREATE INDEX messages_by_compaction ON messages(compaction_id)
        WHERE compaction_id IS NOT NULL;
    CREATE INDEX messages_live_summaries ON messages(session_id)
        WHERE kind = 'rolling_summary' AND state = 'active';
    """)


def m005_generation(conn: apsw.Connection) -> None:
    """Stamp the file with a random generation (header application_id and
    state_meta) so a handle can tell when another file was put in its place."""
    from .containment import stamp_generation  # containment owns the stamp's format
    stamp_generation(conn)


def m004_search_index(conn: apsw.Connection) -> None:
    """Word and trigram FTS5 indexes over message text, filled. (Until m006
    this also created sync triggers that wrote both indexes in every commit.)"""
    search_index.install(conn)


def m006_index_watermark(conn: apsw.Connection) -> None:
    """The index leaves the commit: the sync triggers are dropped; a
    watermark and a change log record what the indexer must catch up on."""
    search_index.install_changelog(conn)


def m007_usage_ledger(conn: apsw.Connection) -> None:
    """Model usage per (session, task, model, provider); see sessiondb/rows/usage.py."""
    usage.install(conn)


def m008_session_flags(conn: apsw.Connection) -> None:
    """Pinned and archived sessions (sessiondb/maintenance/lifecycle.py). A
    side table, not columns of ``sessions``, so the session row, its export
    format and every reader of it stay as they were; a session without a row
    here is neither. A rowid table (not WITHOUT ROWID) so the page carver can
    map its rows."""
    conn.execute("""
    CREATE TABLE session_flags (
        session_id  TEXT PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
        pinned      INTEGER NOT NULL DEFAULT 0 CHECK (pinned IN (0, 1)),
        archived_at REAL
    );
    CREATE INDEX session_flags_archived ON session_flags(archived_at)
        WHERE archived_at IS NOT NULL;
    """)


def m009_index_shape(conn: apsw.Connection) -> None:
    """The trigram index without positions (``detail=none``):
    a candidate filter that search verifies against the text. A store whose
    index has the old shape is reset (empty indexes, watermark 0) and the
    indexer rebuilds it; search stays exact meanwhile (it scans the tail)."""
    search_index.reshape(conn)


def m010_compact_rows(conn: apsw.Connection) -> None:
    """The compact row format (docs/row-format.md): uid and fingerprint as
    bytes, no copy of finish_reason in meta, and no ``messages_by_time``
    index (no query seeks by time alone: search filters its candidates).
    Existing rows are rewritten in this one transaction (4.7 s for 100,000
    messages on a loaded 2-core machine, docs/row-format.md); a big store
    logs a warning first, so a slow open is never silent.
    """
    (n,) = one(conn.execute("SELECT count(*) FROM messages"))
    if n >= _ANNOUNCE_ROWS:
        log.warning("m010: rewriting %s message rows in the compact row format"
                    " (one transaction, about %.0f s)", f"{n:,}", n * _SECONDS_PER_ROW)
    conn.execute("DROP INDEX IF EXISTS messages_by_time")
    messages.compact_m010_rows(conn)


_ANNOUNCE_ROWS = 200_000
_SECONDS_PER_ROW = 4e-5


def m011_compact_indexes(conn: apsw.Connection) -> None:
    """Two indexes without bytes nothing reads (docs/row-format.md, m011):
    ``messages_in_order`` on ``(session_id, position)``, since every index
    entry ends with the rowid anyway (m001's ``id`` column stored it twice,
    and the order and the plans are the same), and the trigram index
    without its per-document size table (``columnsize=0``), refilled here
    with the documents the word index holds (`search_index.reshape_trigram`).
    """
    (n,) = one(conn.execute("SELECT count(*) FROM messages"))
    if n >= _ANNOUNCE_ROWS:
        log.warning("m011: rebuilding the message order index and the trigram index over"
                    " %s messages (one transaction, about %.0f s)", f"{n:,}",
                    n * _M011_SECONDS_PER_ROW)
    conn.execute("DROP INDEX IF EXISTS messages_in_order")
    conn.execute("CREATE INDEX messages_in_order ON messages(session_id, position)")
    search_index.reshape_trigram(conn)


_M011_SECONDS_PER_ROW = 2e-5  # 1.95 s for 100,000 messages at load 5 (docs/row-format.md)


def m012_coded_rows(conn: apsw.Connection) -> None:
    """Three more columns stored compactly (docs/row-format.md, m012): role
    as a one-character code, kind ``message`` as ``''``, meta ``{}`` as
    ``''``. Existing rows are rewritten in this one transaction
    (`messages.compact_legacy_rows`; a big store logs a warning first), and
    the text view (in place: `search_index.update_text_view`) and the
    change-log triggers take the coded tool role too; the indexed text does
    not change, so nothing is reindexed."""
    (n,) = one(conn.execute("SELECT count(*) FROM messages"))
    if n >= _ANNOUNCE_ROWS:
        log.warning("m012: rewriting %s message rows with coded role, kind and meta"
                    " (one transaction, about %.0f s)", f"{n:,}", n * _M012_SECONDS_PER_ROW)
    search_index.update_text_view(conn)
    messages.compact_legacy_rows(conn)


_M012_SECONDS_PER_ROW = 5e-6  # 0.41-0.43 s for 100,000 messages (docs/row-format.md)


def m013_graph_checkpoints(conn: apsw.Connection) -> None:
    """Graph checkpoints, their channel values and pending writes, rows of
    the thread's session (sessiondb/rows/checkpoints.py; LangGraph's saver,
    docs/integrations.md). New tables only: nothing is rewritten."""
    checkpoints.install(conn)


def m014_nul_text(conn: apsw.Connection) -> None:
    """A NUL character in a message is indexed as a space, so the words after
    it are found (docs/search.md, "What is indexed"): the text view and the
    change-log triggers take the new rule, and the rows the index holds cut
    at a NUL are indexed again, each deleted by the text it was indexed
    with (`search_index.reindex_nul_text`). Only rows holding a NUL (or,
    in JSON content, its escape) are read twice; nothing else is rewritten."""
    n = search_index.reindex_nul_text(conn)
    if n:
        log.info("m014: %s messages with a NUL character indexed again", f"{n:,}")


def m015_term_trigrams(conn: apsw.Connection) -> None:
    """Substrings through the word index's terms (docs/search.md, docs/row-format.md):
    the trigram index over every text (``messages_trigram``) is dropped and
    the term table (each distinct term of 3 or more characters, with a
    trigram index over it) is filled from the word index's vocabulary, in
    this one transaction (`search_index.terms_from_trigrams`); a big store
    logs a warning first. Messages are not read again."""
    (n,) = one(conn.execute("SELECT count(*) FROM messages"))
    if n >= _ANNOUNCE_ROWS:
        log.warning("m015: replacing the trigram index of %s messages by a term table"
                    " (one transaction, about %.0f s)", f"{n:,}", n * _M015_SECONDS_PER_ROW)
    terms = search_index.terms_from_trigrams(conn)
    log.info("m015: %s terms in the term table", f"{terms:,}")


_M015_SECONDS_PER_ROW = 2e-6  # 0.19 s for 100,000 real-text messages (docs/row-format.md)


MIGRATIONS: tuple[Migration, ...] = (m001_initial, m002_leases, m003_compactions,
                                     m004_search_index, m005_generation,
                                     m006_index_watermark, m007_usage_ledger,
                                     m008_session_flags, m009_index_shape,
                                     m010_compact_rows, m011_compact_indexes,
                                     m012_coded_rows, m013_graph_checkpoints,
                                     m014_nul_text, m015_term_trigrams)


#: Migrations a read-only handle may find pending and still read the store:
#: they only add tables that searching, listing, reading and counting never
#: touch. Any other pending migration changes what the reading queries expect
#: (the row format, the index, the session flags), so a read-only open refuses
#: the store until a writable open has applied it.
READABLE_BEFORE: frozenset[str] = frozenset({"m013_graph_checkpoints"})


def _ensure_ledger(conn: apsw.Connection) -> None:
    conn.execute("CREATE TABLE IF NOT EXISTS migrations ("
                 "name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")


def applied(conn: apsw.Connection) -> list[str]:
    """Names of migrations recorded in the file, in order applied."""
    has = conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' "
                       "AND name='migrations'").fetchone()
    if not has:
        return []
    return [r[0] for r in conn.execute("SELECT name FROM migrations ORDER BY rowid")]


def pending(conn: apsw.Connection) -> list[str]:
    """Names of known migrations not yet applied to the file."""
    done = set(applied(conn))
    return [m.__name__ for m in MIGRATIONS if m.__name__ not in done]


def unknown(conn: apsw.Connection) -> list[str]:
    """Applied migrations this code does not know (a newer writer)."""
    known = {m.__name__ for m in MIGRATIONS}
    return [name for name in applied(conn) if name not in known]


def blocking_reads(conn: apsw.Connection) -> list[str]:
    """Pending migrations without which the reading queries do not work
    (what a read-only open refuses the store for; see `READABLE_BEFORE`)."""
    return [name for name in pending(conn) if name not in READABLE_BEFORE]


def apply_pending(conn: apsw.Connection, begin: Callable[[], None]) -> list[str]:
    """Apply each pending migration with its ledger row in one transaction.

    ``begin`` starts a write transaction (the store's BEGIN IMMEDIATE with
    lock patience). Pending work is re-read inside the transaction so two
    processes opening a new file never apply a migration twice.
    """
    from .core import transaction  # the one module that issues transaction statements
    done: list[str] = []
    for migration in MIGRATIONS:
        with transaction(conn, begin):
            _ensure_ledger(conn)
            if migration.__name__ in applied(conn):
                continue
            migration(conn)
            conn.execute("INSERT INTO migrations(name, applied_at) VALUES (?, ?)",
                         (migration.__name__, time.time()))
        done.append(migration.__name__)
    return done
