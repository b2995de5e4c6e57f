"""The derived full-text indexes: schema, change log, catch-up batches, rebuild.

Two derived FTS5 tables:

- ``messages_fts``: word tokens (unicode61, diacritics removed), an
  external-content index reading its text from the view
  ``messages_search_text``;
- ``messages_terms``: the word index's distinct terms of 3 or more
  characters, each once, with a trigram index over them (m015), which
  finds the terms holding a substring (docs/search.md). Before m015 a
  trigram index over every text (``messages_trigram``) served substrings;
  it was about four times the size.

Every message row is indexed whatever its ``state``; state filters apply at
query time, so archiving or rewinding a row costs no index work.

The indexes are kept **off the commit**: a canonical write touches only
canonical tables plus, for an edit or delete of an already indexed row,
one row of the change log (see below). The indexer (sessiondb/index/indexer.py)
brings both indexes up to date in batches in its own transactions, and
search (sessiondb/search/search_tail.py) answers over the indexed part plus the
not-yet-indexed tail, so results are exact the moment a commit returns.

Index damage can never fail a canonical write, since none writes the
index. The indexer that meets damage marks the index stale (``fts_stale``
in ``state_meta``) and stops; search then scans canonical rows until
``rebuild`` (reset: empty indexes, watermark 0, then the indexer refills).
"""
from __future__ import annotations

import json
import logging
import os
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, cast

import apsw

from ..base import one


log = logging.getLogger(__name__)

FTS_TABLE = "messages_fts"
TERMS_TABLE = "messages_terms"
# The trigram index over every text, from m004 to m015 (the migrations up to
# m014 still build and reshape it; m015 drops it).
LEGACY_TRIGRAM_TABLE = "messages_trigram"
#: The derived search tables: what a rebuild drops and refills, what index
#: damage is judged on.
INDEXES = (FTS_TABLE, TERMS_TABLE)
#: The tables indexing the text view itself (the term table is fed from the
#: word index's terms).
TEXT_INDEXES = (FTS_TABLE,)
_LEGACY_INDEXES = (FTS_TABLE, LEGACY_TRIGRAM_TABLE)
# A substring is looked up through its longest run of word characters: runs
# shorter than a trigram hold no trigram, so shorter terms are not kept.
MIN_TERM_CHARS = 3
TEXT_VIEW = "messages_search_text"
STALE_KEY = "fts_stale"
# Tool output can be huge (file dumps, logs); only its head is indexed. The
# cap is in characters and applies to tool_result blocks and to whole
# messages with role 'tool'. The fallback scan searches the same text.
TOOL_TEXT_CAP = 16_384
# Any other message is indexed up to this many characters (a pasted 20 MB
# log would otherwise cost seconds of tokenizing and megabytes of trigrams).
TEXT_CAP = 262_144

WORD_TOKENIZER = "unicode61 remove_diacritics 2"
TRIGRAM_TOKENIZER = "trigram remove_diacritics 1"
TOKENIZERS = {
    FTS_TABLE: WORD_TOKENIZER,
    TERMS_TABLE: TRIGRAM_TOKENIZER,
    LEGACY_TRIGRAM_TABLE: TRIGRAM_TOKENIZER,
}
# The shape of each index (m009, m011, m015). The word index keeps positions
# (phrases, NEAR, snippets, bm25 with stored sizes). The trigram index over
# the terms is only a candidate filter: ``detail=none`` stores which terms
# hold a trigram, not where, and ``columnsize=0`` no size per term; each
# candidate term is checked (`terms_holding`), and each message found
# through the terms is verified against its text (`contains`), so results
# stay exact (docs/search.md). The legacy trigram index had the same options.
OPTIONS = {
    FTS_TABLE: "",
    TERMS_TABLE: ", detail=none, columnsize=0",
    LEGACY_TRIGRAM_TABLE: ", detail=none, columnsize=0",
}


def fts_ddl(table: str, content: str = "") -> str:
    """CREATE VIRTUAL TABLE for ``table`` in its indexed shape; ``content``
    is the external-content clause (empty: the table keeps its own text).
    The term table keeps its own terms (its one column is ``term``)."""
    column = "term" if table == TERMS_TABLE else "text"
    return (f"CREATE VIRTUAL TABLE {table} USING fts5({column}{content},"
            f" tokenize='{TOKENIZERS[table]}'{OPTIONS[table]})")


HITS_FUNCTION = "hermes_hits"
CONTAINS_FUNCTION = "hermes_contains"


def _hits(api: apsw.FTS5ExtensionApi, *args: object) -> int:
    """How many phrase hits the current document has (linear in them)."""
    return api.inst_count


def register_functions(conn: apsw.Connection) -> None:
    """The helpers search SQL uses; on every connection that searches.
    A connection that cannot reach FTS5 (a file too damaged to read its
    schema) goes without: its searches fail typed, its writes never need it."""
    try:
        conn.register_fts5_function(HITS_FUNCTION, _hits)
        fold = Folder(conn)
        conn.create_scalar_function(CONTAINS_FUNCTION, fold.contains,  # type: ignore[arg-type]
                                    2, deterministic=True)
    except apsw.Error:
        log.debug("no FTS5 helper on this connection", exc_info=True)


class Folder:
    """Text as the trigram tokenizer sees it (case folded, diacritics
    removed), so a substring check agrees exactly with what a trigram
    phrase query would match: ``contains(text, term)`` is true when the
    folded term occurs in the folded text. ASCII folds by ``lower()`` (what
    the tokenizer does to ASCII); other text is folded by the tokenizer
    itself, one trigram per character."""

    def __init__(self, conn: apsw.Connection) -> None:
        name, *args = TRIGRAM_TOKENIZER.split()
        self._tokenize = conn.fts5_tokenizer(name, args)
        self._terms: dict[str, str] = {}  # a query's terms, folded once per search

    def fold(self, text: str) -> str:
        if text.isascii():
            return text.lower()
        # (without offsets or colocated tokens the tokenizer returns plain strings)
        grams = cast("list[str]", self._tokenize(
            text.encode("utf-8"), apsw.FTS5_TOKENIZE_DOCUMENT, None,
            include_offsets=False, include_colocated=False))
        if not grams:
            return text  # under 3 characters: holds no term of 3 or more
        return grams[0] + "".join(g[-1] for g in grams[1:])

    def contains(self, text: object, term: object) -> bool:
        if not isinstance(text, str) or not isinstance(term, str):
            return False
        if term in text:  # folding maps each character to one: a raw hit is a hit
            return True
        folded = self._terms.get(term)
        if folded is None:
            if len(self._terms) > 64:
                self._terms.clear()
            folded = self._terms[term] = self.fold(term)
        return folded in self.fold(text)


# FTS5 decoding junk in its data blocks may read a garbage size and fail with
# SQLITE_NOMEM rather than SQLITE_CORRUPT_VTAB; such errors are checked too.
INDEX_DAMAGE_ERRORS = (apsw.CorruptError, apsw.NoMemError)

def _blocks_text(row: str, source: str | None = None) -> str:
    """Readable text of a JSON block list: text blocks, tool_result text.
    ``source``: the SQL of the JSON to read (default: the row's content)."""
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
  FROM json_each({source or f'{row}.content'}) AS b WHERE b.type = 'object'))"""


# NUL characters in the indexed text. SQLite's substr() counts characters up
# to the first NUL and FTS5 reads a value as C text, so text after a NUL was
# never indexed (before m014). replace() cannot take a pattern that starts
# with NUL, so the NUL goes by way of JSON: json_quote() writes it as the
# escape \u0000, which becomes \u0020 (a space) before the text is read
# back. Backslash pairs are parked on char(1) meanwhile (no valid JSON text
# holds a raw control character), so an escaped backslash followed by
# "u0000" stays literal text. Only rows holding a NUL (a raw one in text
# content, its escape in JSON content) take this path.
_BACKSLASH_PAIR = "'" + "\\" * 2 + "'"  # SQL text of two backslashes
_NUL_ESCAPE = "'" + "\\" + "u0000'"  # SQL text of JSON's escape of NUL
_SPACE_ESCAPE = "'" + "\\" + "u0020'"


def _nul_escapes_to_spaces(json_sql: str) -> str:
    return (f"replace(replace(replace({json_sql}, {_BACKSLASH_PAIR}, char(1)), {_NUL_ESCAPE},"
            f" {_SPACE_ESCAPE}), char(1), {_BACKSLASH_PAIR})")


def _raw_text(row: str, nul_rule: bool) -> str:
    if not nul_rule:  # the text before m014 (the index holds it until m014 runs)
        return (f"CASE WHEN {row}.content_kind = 'text' THEN {row}.content"
                f" WHEN {row}.content_kind = 'json' AND json_valid({row}.content)"
                f" THEN {_blocks_text(row)} END")
    text = (f"CASE WHEN instr({row}.content, char(0)) > 0 THEN json_extract("
            f"{_nul_escapes_to_spaces(f'json_quote({row}.content)')}, '$')"
            f" ELSE {row}.content END")
    blocks = (f"CASE WHEN instr({row}.content, {_NUL_ESCAPE}) > 0 THEN"
              f" {_nul_escapes_to_spaces(f'{row}.content')} ELSE {row}.content END")
    return (f"CASE WHEN {row}.content_kind = 'text' THEN {text}"
            f" WHEN {row}.content_kind = 'json' AND json_valid({row}.content)"
            f" THEN {_blocks_text(row, blocks)} END")


def text_expr(row: str, *, nul_rule: bool = True) -> str:
    """SQL for the indexed text of the messages row named ``row``.

    Pure SQL (no application functions), so every connection that writes a
    message, in any process or tool, keeps the index in step. A tool
    message's role is ``'t'`` in a coded row (m012) and ``'tool'`` in an
    older one (a file m012 has not rewritten yet, rows carved from one):
    both give the same text, so the indexes never depend on the form.
    A NUL character is indexed as a space (m014), so the words after it
    are found; ``nul_rule=False`` gives the text from before m014, which
    stopped at the first NUL (what an older index holds for such a row).
    """
    return (f"substr({_raw_text(row, nul_rule)}, 1, CASE WHEN {row}.role IN ('t', 'tool')"
            f" THEN {TOOL_TEXT_CAP} ELSE {TEXT_CAP} END)")


def _create_tables(conn: apsw.Connection, tables: tuple[str, ...] = INDEXES) -> None:
    conn.execute(_view_sql().replace("CREATE VIEW", "CREATE VIEW IF NOT EXISTS", 1))
    for table in tables:
        content = "" if table == TERMS_TABLE else f", content='{TEXT_VIEW}', content_rowid='id'"
        conn.execute(fts_ddl(table, content))


def _view_sql() -> str:
    return (f"CREATE VIEW {TEXT_VIEW} AS "
            f"SELECT m.id AS id, {text_expr('m')} AS text FROM messages AS m")


#: The tool rule of the text view before m012 (names only): same text for a
#: row with a role name, so an index built by it is one the current view builds.
LEGACY_TOOL_RULE = "m.role = 'tool'"
CURRENT_TOOL_RULE = "m.role IN ('t', 'tool')"


def update_text_view(conn: apsw.Connection) -> bool:
    """The text view's SQL brought to today's `text_expr` (m012: the coded
    tool role too; m014: NUL as a space), in place, in the caller's
    transaction; False when it already was (a new store) or there is no
    view. m012's change gives every row the same text as before; m014's
    changes the text of rows holding a NUL, which `reindex_nul_text`
    indexes again in the same transaction.

    In place, not by DROP and CREATE VIEW: a content view created after the
    FTS5 tables that read it makes SQLite 3.54's ``PRAGMA quick_check`` and
    ``integrity_check`` skip the freelist and page-accounting checks (a
    smashed freelist trunk then reads as healthy: tests/reliability), so the
    view keeps its place in the schema. This is SQLite's documented way to
    change a schema entry (writable_schema, then the schema cookie bumped
    so every connection reloads the schema)."""
    row = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'view' AND name = ?",
                       (TEXT_VIEW,)).fetchone()
    if row is None or " ".join(str(row[0]).split()) == " ".join(_view_sql().split()):
        return False
    (version,) = one(conn.execute("PRAGMA schema_version"))
    conn.execute("PRAGMA writable_schema=ON")
    try:
        conn.execute("UPDATE sqlite_master SET sql = ? WHERE type = 'view' AND name = ?",
                     (_view_sql(), TEXT_VIEW))
        conn.execute(f"PRAGMA schema_version={int(version) + 1}")
    finally:
        conn.execute("PRAGMA writable_schema=OFF")
    return True


def reindex_nul_text(conn: apsw.Connection) -> int:
    """Migration body (m014): NUL indexed as a space. In the caller's one
    transaction: the text view and the change-log triggers take today's
    `text_expr` (in place), and every row the index holds with the text
    from before (cut at its first NUL) is deleted from both indexes by
    exactly that text and indexed again with today's; returns how many.

    Rows the index does not hold yet (above the watermark) and rows the
    change log holds are left to the indexer: a logged row's ``old_text``
    is what the index holds, so the indexer deletes it by that text. An
    index marked stale is not touched (a rebuild refills it with today's
    text); an index that turns out damaged here is marked stale, so the
    store still opens and search scans until `repair`."""
    update_text_view(conn)
    if triggers_attached(conn) and not _triggers_log_current_text(conn):
        drop_triggers(conn)
        attach_triggers(conn)
    w = watermark(conn)
    if w is None or stale_marker(conn) is not None:
        return 0
    old, new = text_expr("m", nul_rule=False), text_expr("m")
    rows: list[tuple[Any, ...]] = conn.execute(
        f"SELECT id, old, new FROM (SELECT m.id AS id, {old} AS old, {new} AS new"
        f" FROM messages AS m WHERE m.id <= ? AND (instr(m.content, char(0)) > 0"
        f" OR (m.content_kind = 'json' AND instr(m.content, {_NUL_ESCAPE}) > 0))"
        f" AND NOT EXISTS (SELECT 1 FROM {CHANGES} AS c WHERE c.message_id = m.id))"
        f" WHERE old IS NOT new ORDER BY id", (w,)).fetchall()
    try:
        tables = _present(conn, _LEGACY_INDEXES)  # m014 runs before m015 drops the trigrams
        for mid, before, after in rows:
            for table in tables:
                conn.execute(f"INSERT INTO {table}({table}, rowid, text)"
                             " VALUES ('delete', ?, ?)", (mid, before))
            _put_text(conn, [(mid, after)], tables)
    except INDEX_DAMAGE_ERRORS as e:
        mark_stale(conn, f"m014: {type(e).__name__}: {e}", code_of(e))
    return len(rows)


def _triggers_log_current_text(conn: apsw.Connection) -> bool:
    """Whether the triggers that log an indexed row's text log today's."""
    current = text_expr("old")
    rows = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name IN"
                        " (?, ?)", TRIGGERS[1:]).fetchall()
    return len(rows) == 2 and all(current in str(sql) for (sql,) in rows)


def _fill(conn: apsw.Connection) -> None:
    """Index every message and move the watermark to the last. FTS5's own
    'rebuild' cannot be used: it reads the content view with virtual tables
    disabled, and the view needs json_each. Recovery and repair code must
    call `reset` and let the indexer fill, never FTS5's 'rebuild'. (Only m004
    fills this way, before the term table existed.)"""
    for table in _LEGACY_INDEXES:
        conn.execute(f"INSERT INTO {table}(rowid, text) SELECT id, text FROM {TEXT_VIEW}")
    (top,) = one(conn.execute("SELECT coalesce(max(id), 0) FROM messages"))
    set_watermark(conn, top)
    if _has_changes_table(conn):
        conn.execute(f"DELETE FROM {CHANGES}")


# -- the watermark and the change log ---------------------------------------
#
# The index is written after the commit, by the indexer (sessiondb/index/indexer.py).
# What it must catch up on is recorded by canonical writes themselves:
#
# - inserts: every row with ``id`` above the watermark (``fts_watermark`` in
#   state_meta) is not indexed yet; no bookkeeping per insert;
# - updates of the indexed text's sources and deletes of rows at or below
#   the watermark: one row in ``search_changes`` (the first change of a row
#   wins: it holds the text the index still has, which a delete needs);
# - an insert that reuses a rowid at or below the watermark (SQLite reuses
#   the highest rowid after it is deleted): a row there too.
#
# State changes (archive, rewind) need nothing: states filter at query time.
# The log triggers are plain SQL, so every writer, in any process or tool,
# keeps the bookkeeping exact.

WATERMARK_KEY = "fts_watermark"
# The index's bookkeeping in state_meta: not canonical data, reset by a rebuild.
INDEX_META_KEYS = (STALE_KEY, WATERMARK_KEY)
CHANGES = "search_changes"
TRIGGERS = ("messages_search_log_ai", "messages_search_log_ad", "messages_search_log_au")
# The sync triggers of m004, which wrote both indexes inside every commit.
LEGACY_TRIGGERS = ("messages_search_ai", "messages_search_ad", "messages_search_au")
_WATERMARK_SQL = f"(SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = '{WATERMARK_KEY}')"


def _log_row(row: str, indexed: bool, when: str = "1") -> str:
    """SQL logging ``row`` unless the log already holds it (its first entry
    carries what the index has)."""
    text = text_expr(row) if indexed else "NULL"
    return (f"INSERT INTO {CHANGES}(message_id, indexed, old_text) SELECT {row}.id, "
            f"{int(indexed)}, {text} WHERE {when} AND NOT EXISTS "
            f"(SELECT 1 FROM {CHANGES} WHERE message_id = {row}.id);\n")


def attach_triggers(conn: apsw.Connection) -> None:
    """The change-log triggers (the only index work inside a canonical write)."""
    ai, ad, au = TRIGGERS
    w = _WATERMARK_SQL
    conn.execute(f"CREATE TRIGGER IF NOT EXISTS {ai} AFTER INSERT ON messages"
                 f" WHEN new.id <= {w} BEGIN\n{_log_row('new', False)}END")
    conn.execute(f"CREATE TRIGGER IF NOT EXISTS {ad} AFTER DELETE ON messages"
                 f" WHEN old.id <= {w} BEGIN\n{_log_row('old', True)}END")
    conn.execute(f"CREATE TRIGGER IF NOT EXISTS {au} AFTER UPDATE OF id, content,"
                 f" content_kind, role ON messages WHEN old.id <= {w} OR new.id <= {w} BEGIN\n"
                 f"{_log_row('old', True, f'old.id <= {w}')}"
                 f"{_log_row('new', False, f'new.id <> old.id AND new.id <= {w}')}END")


def drop_triggers(conn: apsw.Connection) -> None:
    for name in TRIGGERS + LEGACY_TRIGGERS:
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")


def triggers_attached(conn: apsw.Connection) -> bool:
    """True when every change-log trigger exists (a schema-table read, no FTS I/O)."""
    marks = ",".join("?" * len(TRIGGERS))
    (n,) = one(conn.execute(f"SELECT count(*) FROM sqlite_master WHERE type = 'trigger' "
                        f"AND name IN ({marks})", TRIGGERS))
    return n == len(TRIGGERS)


def watermark(conn: apsw.Connection) -> int | None:
    """The highest message id the indexes cover (None: no index bookkeeping)."""
    row = conn.execute("SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = ?",
                       (WATERMARK_KEY,)).fetchone()
    return None if row is None else int(row[0])


def set_watermark(conn: apsw.Connection, value: int) -> None:
    conn.execute("INSERT INTO state_meta(key, value) VALUES (?, ?) ON CONFLICT(key)"
                 " DO UPDATE SET value = excluded.value", (WATERMARK_KEY, str(int(value))))


def _has_changes_table(conn: apsw.Connection) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                        (CHANGES,)).fetchone() is not None


def install_changelog(conn: apsw.Connection) -> None:
    """Migration body (m006): the sync triggers go, the watermark and the
    change log come. An index the sync triggers kept covers every row, so
    the watermark starts at the highest id (a stale index stays stale)."""
    for name in LEGACY_TRIGGERS:
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
    conn.execute(f"CREATE TABLE IF NOT EXISTS {CHANGES} (id INTEGER PRIMARY KEY,"
                 " message_id INTEGER NOT NULL, indexed INTEGER NOT NULL, old_text TEXT)")
    conn.execute(f"CREATE INDEX IF NOT EXISTS {CHANGES}_by_message ON {CHANGES}(message_id)")
    if watermark(conn) is None:
        (top,) = one(conn.execute("SELECT coalesce(max(id), 0) FROM messages"))
        set_watermark(conn, top)
    attach_triggers(conn)


def install(conn: apsw.Connection) -> None:
    """Migration body (m004): view, word and trigram indexes, filled from
    existing rows (m015 replaces the trigram index by the term table)."""
    _create_tables(conn, _LEGACY_INDEXES)
    _fill(conn)


# -- catching up (the indexer's batches) --------------------------------------

@dataclass(frozen=True)
class Backlog:
    """What the index has not caught up on: rows above the watermark (an
    upper bound: ids may have gaps) and change-log entries."""

    watermark: int
    top: int
    changes: int
    stale: bool = False

    @property
    def tail(self) -> int:
        return max(self.top - self.watermark, 0)

    @property
    def empty(self) -> bool:
        return self.tail == 0 and self.changes == 0

    @property
    def work(self) -> bool:
        """Whether the indexer has something to do (never while stale)."""
        return not self.stale and not self.empty


_BACKLOG = (f"SELECT (SELECT CAST(value AS INTEGER) FROM state_meta WHERE key ="
            f" '{WATERMARK_KEY}'), (SELECT coalesce(max(id), 0) FROM messages),"
            f" (SELECT count(*) FROM {CHANGES}),"
            f" EXISTS (SELECT 1 FROM state_meta WHERE key = '{STALE_KEY}')")


def backlog(conn: apsw.Connection) -> Backlog | None:
    """One statement (three seeks and a count of a tiny table); None
    without bookkeeping (a store from before m006)."""
    try:
        w, top, changes, stale = one(conn.execute(_BACKLOG))
    except apsw.SQLError:  # no change log yet: migrations pending on a read-only file
        return None
    return None if w is None else Backlog(w, top, changes, bool(stale))


def _present(conn: apsw.Connection, tables: tuple[str, ...]) -> tuple[str, ...]:
    names = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    return tuple(t for t in tables if t in names)


def _put_text(conn: apsw.Connection, rows: list[tuple[int, str | None]],
              tables: tuple[str, ...]) -> None:
    for table in tables:
        conn.executemany(f"INSERT INTO {table}(rowid, text) VALUES (?, ?)", rows)


def _put(conn: apsw.Connection, rows: list[tuple[int, str | None]]) -> None:
    """Index ``rows`` (id, text) in the word index and add the terms the term
    table does not hold to it, in the caller's transaction."""
    fresh = _unheld_terms(conn, (text for _, text in rows))
    _put_text(conn, rows, TEXT_INDEXES)
    conn.executemany(f"INSERT INTO {TERMS_TABLE}(term) VALUES (?)", [(t,) for t in fresh])
    if fresh:
        _KNOWN[conn].top = int(one(conn.execute(f"SELECT max(id) FROM {TERMS_TABLE}_content"))[0])


# -- the term table ----------------------------------------------------------
#
# Every term of MIN_TERM_CHARS or more the word index holds is a row of the
# term table (terms the index no longer holds may stay: a stale term only
# brings candidates that verification drops). The indexer adds a batch's new
# terms in the batch's transaction: the batch's terms (tokenized here the
# way the word index tokenizes) that the term table does not hold.
#
# Which terms it holds is kept per connection (`_KnownTerms`): asking FTS5
# costs ~30 us a term (an fts5vocab seek, or the term's trigrams), which
# made a batch of 100 prose messages 7x slower than the word index alone.
# Terms are only ever appended to the table (rowids grow), so the set is
# loaded once (all of it, up to KNOWN_TERMS_MAX terms) and then follows
# the table by rowid: terms above the highest rowid it has seen (another
# process's batches) are read in before a batch. It is dropped when the
# schema changes (a rebuild, m015, a copied index: the table is made
# anew), when the highest rowid goes down (the table was emptied), and
# when a transaction of the connection rolls back (terms it added are
# gone). Above KNOWN_TERMS_MAX terms the set is not loaded: terms not in it
# are looked up in the word index's vocabulary (a term it held before the
# batch is in the term table), and the set is a bounded cache; a term
# whose last message went and that comes back may then be added twice,
# which `terms_holding` reads as once.

KNOWN_TERMS_MAX = 200_000


@dataclass
class _KnownTerms:
    version: int | None = None
    top: int = 0  # the highest rowid of the term table read into ``terms``
    complete: bool = False  # every term of the table is in ``terms``
    terms: set[str] = field(default_factory=set)

    def forget(self) -> None:
        self.version, self.top, self.complete = None, 0, False
        self.terms.clear()


_KNOWN: "weakref.WeakKeyDictionary[apsw.Connection, _KnownTerms]" = weakref.WeakKeyDictionary()


def _known_terms(conn: apsw.Connection) -> _KnownTerms:
    known = _KNOWN.get(conn)
    if known is None:
        known = _KNOWN[conn] = _KnownTerms()
        conn.set_rollback_hook(known.forget)
    (version,) = one(conn.execute("PRAGMA schema_version"))
    (top,) = one(conn.execute(f"SELECT coalesce(max(id), 0) FROM {TERMS_TABLE}_content"))
    if known.version != version or top < known.top:
        known.forget()
        known.version = int(version)
        known.complete = top <= KNOWN_TERMS_MAX
    if top > known.top:
        if known.complete:  # (the content table's rows: c0 is the term)
            known.terms.update(t for (t,) in conn.execute(
                f"SELECT c0 FROM {TERMS_TABLE}_content WHERE id > ?", (known.top,)))
            known.complete = len(known.terms) <= KNOWN_TERMS_MAX
        known.top = int(top)
    return known

VOCAB = "temp.hermes_word_vocab"


def word_tokens(conn: apsw.Connection, text: str) -> list[str]:
    """``text``'s terms as the word index folds and splits them."""
    name, *args = WORD_TOKENIZER.split()
    tokenize = conn.fts5_tokenizer(name, args)
    return cast("list[str]", tokenize(text.encode("utf-8", "surrogatepass"),
                                      apsw.FTS5_TOKENIZE_DOCUMENT, None,
                                      include_offsets=False, include_colocated=False))


def _vocabulary(conn: apsw.Connection) -> str:
    """The word index's vocabulary (fts5vocab, a per-connection temp table)."""
    conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {VOCAB} USING"
                 f" fts5vocab(main, {FTS_TABLE}, 'row')")
    return VOCAB


def _unheld_terms(conn: apsw.Connection, texts: Any) -> list[str]:
    """The terms of ``texts`` the term table may not hold (before they are
    indexed: the vocabulary then still says what the word index held)."""
    terms: set[str] = set()
    for text in texts:
        if isinstance(text, str) and text:
            terms.update(t for t in word_tokens(conn, text) if len(t) >= MIN_TERM_CHARS)
    known = _known_terms(conn)
    terms -= known.terms
    if terms and not known.complete:
        held = f"SELECT 1 FROM {_vocabulary(conn)} WHERE term = ?"
        found = {t for t in terms if conn.execute(held, (t,)).fetchone() is not None}
        terms -= found
        _remember(known, found)
    _remember(known, terms)  # (added by the caller in this transaction)
    return sorted(terms)


def _remember(known: _KnownTerms, terms: set[str]) -> None:
    if len(known.terms) + len(terms) > KNOWN_TERMS_MAX:
        known.terms.clear()
        known.complete = False
    known.terms.update(terms)


#: A long term is filtered by at most this many of its trigrams (spread over
#: it, first and last included); checking each candidate makes any subset exact.
MAX_TRIGRAMS = 16


def trigrams(term: str) -> list[str]:
    """The distinct trigrams a candidate for ``term`` must hold (by code
    point, as the trigram tokenizer splits; it folds case itself)."""
    grams = list(dict.fromkeys(term[i:i + 3] for i in range(len(term) - 2)))
    if len(grams) <= MAX_TRIGRAMS:
        return grams
    step = (len(grams) - 1) / (MAX_TRIGRAMS - 1)
    return list(dict.fromkeys(grams[round(i * step)] for i in range(MAX_TRIGRAMS)))


def trigram_match(terms: list[str]) -> str:
    """The AND of every term's trigrams, as FTS5 strings."""
    return " AND ".join('"' + g.replace('"', '""') + '"' for t in terms for g in trigrams(t))


def terms_holding(conn: apsw.Connection, run: str, cap: int) -> list[str] | None:
    """The terms of the term table holding ``run`` (folded as the word index
    folds, MIN_TERM_CHARS or more); None when more than ``cap`` do."""
    found = list(dict.fromkeys(t for (t,) in conn.execute(
        f"SELECT term FROM {TERMS_TABLE} WHERE {TERMS_TABLE} MATCH ? AND instr(term, ?) > 0"
        f" LIMIT {int(cap) + 1}", (trigram_match([run]), run))))
    return None if len(found) > cap else found


def term_held(conn: apsw.Connection, term: str) -> bool:
    """Whether the term table holds ``term`` (of MIN_TERM_CHARS or more,
    folded as the word index folds): its trigrams, then the term itself."""
    return conn.execute(f"SELECT 1 FROM {TERMS_TABLE} WHERE {TERMS_TABLE} MATCH ? AND term = ?",
                        (trigram_match([term]), term)).fetchone() is not None


def terms_missing(conn: apsw.Connection) -> int:
    """How many terms of MIN_TERM_CHARS or more the word index holds that
    the term table does not (0 for a term table in step)."""
    (n,) = one(conn.execute(
        f"SELECT count(*) FROM {_vocabulary(conn)} WHERE length(term) >= {MIN_TERM_CHARS}"
        f" AND term NOT IN (SELECT term FROM {TERMS_TABLE})"))
    return int(n)


def fill_terms(conn: apsw.Connection) -> int:
    """The term table made anew from the word index's vocabulary, in the
    caller's transaction; how many terms it holds."""
    conn.execute(f"DROP TABLE IF EXISTS {TERMS_TABLE}")
    conn.execute(fts_ddl(TERMS_TABLE))
    conn.execute(f"INSERT INTO {TERMS_TABLE}(term) SELECT term FROM {_vocabulary(conn)}"
                 f" WHERE length(term) >= {MIN_TERM_CHARS}")
    return conn.changes()


def terms_from_trigrams(conn: apsw.Connection) -> int:
    """Migration body (m015): the trigram index over every text goes, the
    term table comes, filled from the word index's vocabulary (which covers
    every row the index holds, logged old texts included); how many terms.
    A stale index gets an empty term table (the rebuild fills both); an
    index that turns out damaged here is marked stale, so the store still
    opens and search scans until `repair`."""
    conn.execute(f"DROP TABLE IF EXISTS {LEGACY_TRIGRAM_TABLE}")
    conn.execute(f"DROP TABLE IF EXISTS {TERMS_TABLE}")
    conn.execute(fts_ddl(TERMS_TABLE))
    if watermark(conn) is None or stale_marker(conn) is not None:
        return 0
    try:
        return fill_terms(conn)
    except INDEX_DAMAGE_ERRORS as e:
        mark_stale(conn, f"m015: {type(e).__name__}: {e}", code_of(e))
        conn.execute(f"DROP TABLE IF EXISTS {TERMS_TABLE}")
        conn.execute(fts_ddl(TERMS_TABLE))
        return 0


def _apply_changes(conn: apsw.Connection, w: int, limit: int) -> int:
    entries: list[tuple[Any, ...]] = conn.execute(
        f"SELECT id, message_id, indexed, old_text FROM {CHANGES}" " ORDER BY id LIMIT ?", (limit,)).fetchall()
    for eid, mid, indexed, old in entries:
        if indexed:
            for table in TEXT_INDEXES:
                conn.execute(f"INSERT INTO {table}({table}, rowid, text) VALUES ('delete', ?, ?)",
                             (mid, old))
        row = conn.execute(f"SELECT text FROM {TEXT_VIEW} WHERE id = ?", (mid,)).fetchone()
        if row is not None and mid <= w:
            _put(conn, [(mid, row[0])])
        conn.execute(f"DELETE FROM {CHANGES} WHERE id = ?", (eid,))
    return len(entries)


def _index_new(conn: apsw.Connection, w: int, limit: int) -> int:
    rows: list[tuple[Any, ...]] = conn.execute(
        f"SELECT id, text FROM {TEXT_VIEW} WHERE id > ? ORDER BY id LIMIT ?",
        (w, limit)).fetchall()
    if rows:
        _put(conn, rows)
        set_watermark(conn, rows[-1][0])
    return len(rows)


def index_batch(conn: apsw.Connection, limit: int) -> int:
    """Apply up to ``limit`` change-log entries, then index up to the rest of
    ``limit`` new rows, in the caller's write transaction; returns how much
    was done (0: caught up, or no bookkeeping, or the index is stale)."""
    w = watermark(conn)
    if w is None or stale_marker(conn) is not None:
        return 0
    done = _apply_changes(conn, w, limit)
    if done < limit:
        done += _index_new(conn, w, limit - done)
    return done


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
    """Record why the index is not trusted, in the caller's transaction. The
    indexer stops and search scans canonical rows until a rebuild."""
    record = {"since": time.time(), "reason": reason, "pid": os.getpid(),
              "sqlite_code": sqlite_code}
    conn.execute("INSERT INTO state_meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO NOTHING",
                 (STALE_KEY, json.dumps(record, sort_keys=True)))


def code_of(exc: BaseException | None) -> int | None:
    code = getattr(exc, "extendedresult", None)
    return code if isinstance(code, int) else None


def corruption_is_index_only(conn: apsw.Connection) -> bool:
    """After SQLITE_CORRUPT: True only when every canonical table checks clean
    and a table of the search indexes does not. Anything unclear counts as
    structural. The one judgement both the store's containment guard (no
    quarantine then) and a failing search (which then marks the index stale)
    use, so the two never disagree about whose damage it is."""
    try:
        rows: list[tuple[Any, ...]] = conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'"
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
    if code_of(exc) == apsw.SQLITE_CORRUPT_VTAB:
        return True
    return corruption_is_index_only(conn)


# -- rebuild -----------------------------------------------------------------

def has_current_shape(conn: apsw.Connection, tables: tuple[str, ...] = INDEXES) -> bool:
    """Whether the search tables exist as `fts_ddl` creates them today."""
    marks = ",".join("?" * len(tables))
    rows = dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'"
                             f" AND name IN ({marks})", tables))
    return all(" ".join((rows.get(t) or "").split()).endswith(
        f"tokenize='{TOKENIZERS[t]}'{OPTIONS[t]})") for t in tables)


def reshape(conn: apsw.Connection) -> None:
    """Migration body (m009): `reset` of the word and trigram indexes of
    that time unless they have that shape."""
    if not has_current_shape(conn, _LEGACY_INDEXES):
        reset(conn, _LEGACY_INDEXES)


def reshape_trigram(conn: apsw.Connection) -> None:
    """Migration body (m011): the trigram index in today's shape (no size
    table), refilled in the caller's transaction with exactly the documents
    the word index holds, so the watermark and the change log stay true for
    both: every row up to the watermark that the change log does not hold,
    with its text, and each logged row whose old text is indexed, with that
    text (the indexer later deletes it by that text). The word index is
    left as it is. A stale or otherwise reshaped store is `reset` instead.
    (m015 later replaces this index by the term table.)"""
    if has_current_shape(conn, _LEGACY_INDEXES):
        return
    w = watermark(conn)
    if w is None or stale_marker(conn) is not None or not _word_index_current(conn):
        reset(conn, _LEGACY_INDEXES)
        return
    trigrams = LEGACY_TRIGRAM_TABLE
    conn.execute(f"DROP TABLE IF EXISTS {trigrams}")
    conn.execute(fts_ddl(trigrams, f", content='{TEXT_VIEW}', content_rowid='id'"))
    conn.execute(
        f"INSERT INTO {trigrams}(rowid, text) SELECT id, text FROM {TEXT_VIEW} AS v"
        f" WHERE v.id <= ? AND NOT EXISTS (SELECT 1 FROM {CHANGES} AS c"
        f" WHERE c.message_id = v.id) ORDER BY v.id", (w,))
    conn.execute(f"INSERT INTO {trigrams}(rowid, text) SELECT message_id, old_text"
                 f" FROM {CHANGES} WHERE indexed = 1 ORDER BY message_id")


def _word_index_current(conn: apsw.Connection) -> bool:
    row = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?",
                       (FTS_TABLE,)).fetchone()
    return row is not None and " ".join(str(row[0]).split()).endswith(
        f"tokenize='{TOKENIZERS[FTS_TABLE]}'{OPTIONS[FTS_TABLE]})")


# FTS5 keeps the number of documents an index holds in its averages record
# (``<index>_data`` row 1: an SQLite varint, then one per column, of tokens).
_AVERAGES_ROWID = 1


def document_count(conn: apsw.Connection, table: str) -> int:
    """How many documents ``table`` holds, from its averages record: the
    count an index without a size table (``columnsize=0``) can still give
    without reading its segments (0 before its first document). Raises
    apsw.CorruptError when the record does not parse."""
    row = conn.execute(f"SELECT block FROM {table}_data WHERE id = ?",
                       (_AVERAGES_ROWID,)).fetchone()
    if row is None or row[0] == b"":
        return 0  # a new or emptied index: no record yet, or an empty one
    if not isinstance(row[0], bytes):
        raise apsw.CorruptError(f"{table}: the averages record is not a blob")
    return _varint(row[0], table)


def _varint(block: bytes, table: str) -> int:
    """The leading SQLite varint of ``block`` (big-endian 7-bit groups, the
    ninth byte whole)."""
    value = 0
    for i, byte in enumerate(block[:9]):
        if i == 8:
            return (value << 8) | byte
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value
    raise apsw.CorruptError(f"{table}: the averages record is truncated")


def reset(conn: apsw.Connection, tables: tuple[str, ...] = INDEXES) -> dict[str, int]:
    """Drop and recreate the search tables empty, watermark 0, change log
    empty, marker cleared, in the caller's transaction; the indexer then
    fills them from canonical rows (`index_batch`). ``tables``: the set of
    an older migration (m009's word and trigram indexes)."""
    for table in INDEXES + _LEGACY_INDEXES:
        conn.execute(f"DROP TABLE IF EXISTS {table}")
    conn.execute(f"DROP VIEW IF EXISTS {TEXT_VIEW}")  # the text rules may have changed
    _create_tables(conn, tables)
    install_changelog(conn)
    conn.execute(f"DELETE FROM {CHANGES}")
    set_watermark(conn, 0)
    conn.execute("DELETE FROM state_meta WHERE key = ?", (STALE_KEY,))
    (rows,) = one(conn.execute("SELECT count(*) FROM messages"))
    return {"messages": rows}

