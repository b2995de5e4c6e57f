"""The derived full-text indexes: schema, sync triggers, fail-open and rebuild.

Two FTS5 external-content indexes read their text from the view
``messages_search_text``:

- ``messages_fts``: word tokens (unicode61, diacritics removed);
- ``messages_trigram``: trigrams, for substrings and CJK text.

Every message row is indexed whatever its ``state``; state filters apply at
query time, so archiving or rewinding a row costs no index work and can
never leave the index out of step. Triggers keep both indexes exact on
INSERT, DELETE (including session-delete cascades) and on UPDATE of the
columns the text is derived from.

Fail-open: when a write hits corruption and the same write succeeds once
the triggers are gone, the damage was in the index. Then, inside the
caller's transaction, the triggers are dropped and the durable marker
``fts_stale`` is written to ``state_meta``; the canonical write is retried
and commits together with them. Dropping triggers is a schema change, so
every other connection, in any process, stops writing to the index at its
next statement. ``rebuild()`` reverses all of it in one transaction.
"""
from __future__ import annotations

import json
import logging
import os
import time
from typing import Callable, ContextManager, TypeVar

import apsw

from .errors import Cause, StorageError

log = logging.getLogger(__name__)

T = TypeVar("T")

FTS_TABLE = "messages_fts"
TRIGRAM_TABLE = "messages_trigram"
INDEXES = (FTS_TABLE, TRIGRAM_TABLE)
TEXT_VIEW = "messages_search_text"
STALE_KEY = "fts_stale"
TRIGGERS = ("messages_search_ai", "messages_search_ad", "messages_search_au")
# Tool output can be huge (file dumps, logs); only its head is indexed. The
# cap is in characters and applies to tool_result blocks and to whole
# messages with role 'tool'. The fallback scan searches the same text.
TOOL_TEXT_CAP = 16_384
# Any other message is indexed up to this many characters (a pasted 20 MB
# log would otherwise cost seconds of tokenizing and megabytes of trigrams).
TEXT_CAP = 262_144

_TOKENIZERS = {
    FTS_TABLE: "unicode61 remove_diacritics 2",
    TRIGRAM_TABLE: "trigram remove_diacritics 1",
}


# FTS5 decoding junk in its data blocks may read a garbage size and fail with
# SQLITE_NOMEM rather than SQLITE_CORRUPT_VTAB; such errors are checked too.
INDEX_DAMAGE_ERRORS = (apsw.CorruptError, apsw.NoMemError)

def _blocks_text(row: str) -> str:
    """Readable text of a JSON block list: text blocks, tool_result text."""
    return f"""(SELECT group_concat(part, ' ') FROM (
  SELECT CASE json_extract(b.value, '$.type')
    WHEN 'text' THEN json_extract(b.value, '$.text')
    WHEN 'tool_result' THEN substr(CASE json_type(b.value, '$.content')
        WHEN 'text' THEN json_extract(b.value, '$.content')
        WHEN 'array' THEN (SELECT group_concat(json_extract(r.value, '$.text'), ' ')
            FROM json_each(b.value, '$.content') AS r
            WHERE r.type = 'object' AND json_extract(r.value, '$.type') = 'text')
      END, 1, {TOOL_TEXT_CAP})
  END AS part
  FROM json_each({row}.content) AS b WHERE b.type = 'object'))"""


def text_expr(row: str) -> str:
    """SQL for the indexed text of the messages row named ``row``.

    Pure SQL (no application functions), so every connection that writes a
    message, in any process or tool, keeps the index in step.
    """
    raw = (f"CASE WHEN {row}.content_kind = 'text' THEN {row}.content"
           f" WHEN {row}.content_kind = 'json' AND json_valid({row}.content)"
           f" THEN {_blocks_text(row)} END")
    return (f"substr({raw}, 1, CASE WHEN {row}.role = 'tool' THEN {TOOL_TEXT_CAP}"
            f" ELSE {TEXT_CAP} END)")


def _create_tables(conn: apsw.Connection) -> None:
    conn.execute(f"CREATE VIEW IF NOT EXISTS {TEXT_VIEW} AS "
                 f"SELECT m.id AS id, {text_expr('m')} AS text FROM messages AS m")
    for table, tokenizer in _TOKENIZERS.items():
        conn.execute(f"CREATE VIRTUAL TABLE {table} USING fts5(text, content='{TEXT_VIEW}',"
                     f" content_rowid='id', tokenize='{tokenizer}')")


def _fill(conn: apsw.Connection) -> None:
    """Index every message. FTS5's own 'rebuild' cannot be used: it reads
    the content view with virtual tables disabled, and the view needs
    json_each. Recovery and repair code must call `rebuild`, not 'rebuild'."""
    for table in INDEXES:
        conn.execute(f"INSERT INTO {table}(rowid, text) SELECT id, text FROM {TEXT_VIEW}")


def _index_ops(op: str, row: str) -> str:
    if op == "delete":
        return "".join(f"INSERT INTO {t}({t}, rowid, text) VALUES ('delete', {row}.id,"
                       f" {text_expr(row)});\n" for t in INDEXES)
    return "".join(f"INSERT INTO {t}(rowid, text) VALUES ({row}.id, {text_expr(row)});\n"
                   for t in INDEXES)


def attach_triggers(conn: apsw.Connection) -> None:
    """Create the sync triggers (insert, delete, update of the text's sources)."""
    ai, ad, au = TRIGGERS
    conn.execute(f"CREATE TRIGGER IF NOT EXISTS {ai} AFTER INSERT ON messages BEGIN\n"
                 f"{_index_ops('insert', 'new')}END")
    conn.execute(f"CREATE TRIGGER IF NOT EXISTS {ad} AFTER DELETE ON messages BEGIN\n"
                 f"{_index_ops('delete', 'old')}END")
    conn.execute(f"CREATE TRIGGER IF NOT EXISTS {au} AFTER UPDATE OF id, content,"
                 f" content_kind, role ON messages BEGIN\n"
                 f"{_index_ops('delete', 'old')}{_index_ops('insert', 'new')}END")


def drop_triggers(conn: apsw.Connection) -> None:
    for name in TRIGGERS:
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")


def triggers_attached(conn: apsw.Connection) -> bool:
    """True when every sync trigger exists (a schema-table read, no FTS I/O)."""
    marks = ",".join("?" * len(TRIGGERS))
    (n,) = conn.execute(f"SELECT count(*) FROM sqlite_master WHERE type = 'trigger' "
                        f"AND name IN ({marks})", TRIGGERS).fetchone()
    return n == len(TRIGGERS)


def install(conn: apsw.Connection) -> None:
    """Migration body: view, both indexes filled from existing rows, triggers."""
    _create_tables(conn)
    _fill(conn)
    attach_triggers(conn)


# -- the stale marker --------------------------------------------------------

def stale_marker(conn: apsw.Connection) -> dict | None:
    """The ``fts_stale`` record, or None while the index is trusted."""
    row = conn.execute("SELECT value FROM state_meta WHERE key = ?", (STALE_KEY,)).fetchone()
    if row is None:
        return None
    try:
        value = json.loads(row[0])
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {"raw": row[0]}


def mark_stale(conn: apsw.Connection, reason: str, sqlite_code: int | None) -> None:
    """Detach the triggers and record why, in the caller's transaction."""
    drop_triggers(conn)
    record = {"since": time.time(), "reason": reason, "pid": os.getpid(),
              "sqlite_code": sqlite_code}
    conn.execute("INSERT INTO state_meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO NOTHING",
                 (STALE_KEY, json.dumps(record, sort_keys=True)))


def flush(conn: apsw.Connection) -> None:
    """Write FTS5's pending in-memory changes now, so index damage surfaces
    at this statement (inside the guard) and not at COMMIT."""
    for table in INDEXES:
        conn.execute(f"INSERT INTO {table}({table}) VALUES ('flush')")


def _code(exc: BaseException) -> int | None:
    code = getattr(exc, "extendedresult", None)
    return code if isinstance(code, int) else None


def guarded_write(conn: apsw.Connection, fn: Callable[[], T]) -> T:
    """Run ``fn`` (a canonical write that may fire the sync triggers) so that
    index damage cannot fail it.

    Must run inside a write transaction. ``fn`` must be re-runnable: it is
    called again after a rollback to the guard's savepoint. If the retry
    without triggers also hits corruption, the damage is not (only) in the
    index: the detach is rolled back and the first error is raised.
    """
    if not triggers_attached(conn):
        return fn()
    conn.execute("SAVEPOINT fts_guard")
    try:
        result = fn()
        flush(conn)
    except INDEX_DAMAGE_ERRORS as first:
        _rollback_to(conn)
        if isinstance(first, apsw.NoMemError) and not fts_structures_damaged(conn):
            _rollback_to(conn, release=True)
            raise
        return _retry_detached(conn, fn, first)
    except BaseException:
        _rollback_to(conn, release=True)
        raise
    conn.execute("RELEASE fts_guard")
    return result


def _rollback_to(conn: apsw.Connection, *, release: bool = False) -> None:
    if conn.get_autocommit():
        return  # SQLite already rolled the whole transaction back
    conn.execute("ROLLBACK TO fts_guard")
    if release:
        conn.execute("RELEASE fts_guard")


def _retry_detached(conn: apsw.Connection, fn: Callable[[], T], first: apsw.Error) -> T:
    if conn.get_autocommit():
        raise first
    try:
        mark_stale(conn, f"write failed: {first}", _code(first))
        result = fn()
    except apsw.CorruptError:
        _rollback_to(conn, release=True)
        raise first from None
    except BaseException:
        _rollback_to(conn, release=True)
        raise
    conn.execute("RELEASE fts_guard")
    log.warning("full-text index damaged (%s); triggers detached, search falls back to "
                "scanning until `hermes sessions reindex`", first)
    return result


def write_fail_open(atomic: Callable[[], ContextManager[apsw.Connection]],
                    body: Callable[[apsw.Connection], T], *, nested: bool) -> T:
    """Run ``body`` in its own transaction; if it fails with corruption, in a
    fresh transaction detach the triggers, write the marker and run ``body``
    again, committing all three together.

    This is the outer half of fail-open. `guarded_write` handles FTS5-level
    damage (SQLITE_CORRUPT_VTAB) inside the caller's transaction, but damage
    at the b-tree level poisons the whole transaction for further writes,
    so only a new transaction can retry. If the retry also hits corruption,
    everything rolls back (triggers and marker included) and that error is
    raised: the damage was not only in the index. Inside someone else's
    transaction (``nested``) no retry is possible; the inner guard is all.

    Only a failure the store's containment guard scoped to the index
    (cause ``fts_index``: every canonical table checks clean) is retried.
    Structural corruption has already quarantined the handle; it is raised
    as it is, never retried against a file the guard refuses to write.
    """
    if nested:
        with atomic() as conn:
            return body(conn)
    try:
        with atomic() as conn:
            return body(conn)
    except StorageError as e:
        if e.cause is not Cause.FTS_INDEX or not isinstance(e.__cause__, INDEX_DAMAGE_ERRORS):
            raise
        first = e
    with atomic() as conn:
        if triggers_attached(conn):
            mark_stale(conn, f"write failed: {first}", _code(first.__cause__))
            log.warning("full-text index damaged (%s); triggers detached, search falls back "
                        "to scanning until `hermes sessions reindex`", first)
        return body(conn)


def corruption_is_index_only(conn: apsw.Connection) -> bool:
    """After SQLITE_CORRUPT: True only when every canonical table checks clean
    and a table of the search indexes does not. Anything unclear counts as
    structural. The one judgement both the store's containment guard (no
    quarantine then) and a failing search (which then marks the index stale)
    use, so the two never disagree about whose damage it is."""
    try:
        rows = conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'"
                            " AND rootpage > 0").fetchall()
        names = [r[0] for r in rows]
        derived = [n for n in names if n.startswith(INDEXES)]
        for name in names:
            if name not in derived and not _table_ok(conn, name):
                return False
        return any(not _table_ok(conn, name) for name in derived)
    except apsw.Error:
        return False


def _table_ok(conn: apsw.Connection, name: str) -> bool:
    quoted = name.replace('"', '""')
    try:
        return conn.execute(f'PRAGMA quick_check("{quoted}")').fetchall() == [("ok",)]
    except apsw.Error:  # a smashed root page makes the check itself fail
        return False


def fts_structures_damaged(conn: apsw.Connection) -> bool:
    """Whether FTS5's own integrity-check fails on either index (junk inside
    its blocks, which SQLite's b-tree checks cannot see)."""
    for table in INDEXES:
        try:
            conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 0)")
        except INDEX_DAMAGE_ERRORS:
            return True
        except apsw.Error:
            continue  # e.g. the index is gone or locked: no verdict from it
    return False


def is_index_scoped(conn: apsw.Connection, exc: BaseException) -> bool:
    """Whether a corruption (or FTS5 out-of-memory) error raised by an index
    read belongs to the index."""
    if isinstance(exc, apsw.NoMemError):
        return fts_structures_damaged(conn)
    if not isinstance(exc, apsw.CorruptError):
        return False
    if _code(exc) == apsw.SQLITE_CORRUPT_VTAB:
        return True
    return corruption_is_index_only(conn)


# -- rebuild -----------------------------------------------------------------

def rebuild(conn: apsw.Connection) -> dict[str, int]:
    """Drop and recreate both indexes from canonical rows, reattach the
    triggers and clear the marker. Runs in the caller's transaction."""
    drop_triggers(conn)
    for table in INDEXES:
        conn.execute(f"DROP TABLE IF EXISTS {table}")
    conn.execute(f"DROP VIEW IF EXISTS {TEXT_VIEW}")  # the text rules may have changed
    _create_tables(conn)
    _fill(conn)
    attach_triggers(conn)
    conn.execute("DELETE FROM state_meta WHERE key = ?", (STALE_KEY,))
    (rows,) = conn.execute("SELECT count(*) FROM messages").fetchone()
    return {"messages": rows}
