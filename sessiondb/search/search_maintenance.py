"""Looking after the search index: guarded rebuild, health report, open-time repair.

A rebuild is a reset (empty indexes, watermark 0, change log cleared, in
one transaction) followed by the indexer's catch-up batches, run here in
the caller's thread so the rebuild returns with a full index. A crash
between batches leaves a consistent, partly filled index that the next
open (or a search over the long tail) keeps filling.

Rebuild is refused while another process holds the store open (seen in the
kernel's lock table, see `holders`): the rebuild holds the write lock for
as long as it takes to re-tokenize every message (seconds on large stores),
which would push other writers past their lock patience, and another
process may be the one that is failing open against the damaged index at
that moment. A process that opens the store between the check and the
rebuild transaction only waits on the write lock.
"""
from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Any, TYPE_CHECKING

import apsw

from ..base import SearchIndexCorrupt, SearchRebuildRefused, StorageError, one
from ..index import search_index
from ..sqlitefile import holders

if TYPE_CHECKING:
    from ..engine import StoreCore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IndexHealth:
    """One index: FTS5's integrity-check and a real MATCH probe ("ok" or the error)."""

    name: str
    integrity: str
    probe: str


@dataclass(frozen=True)
class SearchHealth:
    """The search index's state: stale marker, triggers, per-index checks."""

    stale: dict | None
    triggers_attached: bool  # the change-log triggers that keep the index exact
    indexes: list[IndexHealth] = field(default_factory=list)
    pending: int = 0  # rows and change-log entries the indexer has not caught up on

    @property
    def ok(self) -> bool:
        return (self.stale is None and self.triggers_attached
                and all(i.integrity == "ok" and i.probe == "ok" for i in self.indexes))

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def check_alone(core: "StoreCore", *, force: bool = False) -> None:
    """Raise SearchRebuildRefused unless no other process holds the store."""
    pids = holders.other_holders(core.path)
    if pids is None and not force:
        raise SearchRebuildRefused(
            f"cannot tell whether another process has {core.path} open on this platform "
            "(no /proc/locks); close other hermes processes and pass force=True "
            "(`sessions reindex --force`)", path=str(core.path))
    if pids:
        raise SearchRebuildRefused(
            f"processes {', '.join(map(str, pids))} have {core.path} open; rebuilding the search "
            "index now would hold the write lock against them. Close them and retry",
            path=str(core.path), holders=pids)


def rebuild(core: "StoreCore", *, force: bool = False) -> dict[str, Any]:
    """Reset both indexes (and the change-log triggers, and ``fts_stale``),
    then fill them from canonical rows in batches."""
    core.refuse_write("rebuild the search index")
    check_alone(core, force=force)
    started = time.monotonic()
    try:
        with core.write() as conn:
            was_stale = search_index.stale_marker(conn) is not None
            stats = search_index.reset(conn)
        core.catch_up_index()
    except SearchIndexCorrupt as e:
        # Damage in the index's b-tree pages (the store's guard checked that
        # every canonical table is clean, so nothing was quarantined): SQLite
        # cannot free those pages, so no rebuild in place can succeed and
        # reindexing again would fail the same way. Only recovery, which
        # writes a new file with a fresh index, gets search back.
        raise SearchIndexCorrupt(
            f"the search index of {core.path} cannot be rebuilt in place, its pages are "
            f"damaged ({e}); messages are intact and still written, search keeps using "
            "the fallback scan; `hermes sessions repair` rebuilds the store from its "
            "canonical tables to get the index back",
            path=str(core.path), sqlite_code=e.sqlite_code) from e
    return {**stats, "was_stale": was_stale, "seconds": round(time.monotonic() - started, 3)}


def rebuild_on_open(core: "StoreCore") -> dict[str, Any] | None:
    """Open-time repair: rebuild a stale index only when this process is the
    only holder (and the lock table can say so). Never fails the open.
    Returns the rebuild's stats when it ran."""
    try:
        with core.read() as conn:
            if (search_index.stale_marker(conn) is None
                    or str(one(conn.execute("PRAGMA journal_mode"))[0]).lower() != "wal"):
                return None
        if holders.other_holders(core.path) != []:
            return None
        stats = rebuild(core)
        log.warning("rebuilt the stale search index on open (%d messages)", stats["messages"])
        return stats
    except StorageError as e:
        log.warning("search index is stale and could not be rebuilt on open: %s", e)
        return None


def _integrity(conn: apsw.Connection, table: str) -> str:
    """FTS5's integrity-check of the index's own structures, then coverage:
    every message up to the watermark and not in the change log has exactly
    one document in the index, and no other document is there. (FTS5's
    comparison against the content, rank=1, cannot read a view that uses
    json_each.) The term table is checked against the word index's
    vocabulary instead (`_term_coverage`); an index without a size table
    has no list of its documents to compare, only their number."""
    try:
        conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 0)")
        if table == search_index.TERMS_TABLE:
            return _term_coverage(conn)
        if not _has_docsize(conn, table):
            return _count_coverage(conn, table)
        top, logged = _covered(conn)
        (missing,) = one(conn.execute(
            f"SELECT count(*) FROM messages AS m WHERE m.id <= ? AND NOT EXISTS"
            f" (SELECT 1 FROM {table}_docsize AS d WHERE d.id = m.id){logged % 'm.id'}",
            (top,)))
        (extra,) = one(conn.execute(
            f"SELECT count(*) FROM {table}_docsize AS d WHERE NOT EXISTS"
            f" (SELECT 1 FROM messages AS m WHERE m.id = d.id){logged % 'd.id'}"))
    except apsw.Error as e:
        return f"{type(e).__name__}: {e}"
    if missing or extra:
        return f"index out of step: {missing} messages not indexed, {extra} stale documents"
    return "ok"


def _has_docsize(conn: apsw.Connection, table: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                        (f"{table}_docsize",)).fetchone() is not None


def _term_coverage(conn: apsw.Connection) -> str:
    """Every term of MIN_TERM_CHARS or more the word index holds is in the
    term table (terms it no longer holds may stay there: harmless)."""
    missing = search_index.terms_missing(conn)
    return "ok" if not missing else f"term table out of step: {missing} terms missing"


def _count_coverage(conn: apsw.Connection, table: str) -> str:
    """The number of documents ``table`` holds against the number it should:
    the rows up to the watermark the change log does not hold, plus the
    logged rows whose old text is still indexed. (Both indexes are written
    in the same transactions, so the word index's per-document check covers
    which documents; this catches an index that lost or gained some.)"""
    top, logged = _covered(conn)
    (expected,) = one(conn.execute(
        f"SELECT count(*) FROM messages AS m WHERE m.id <= ?{logged % 'm.id'}", (top,)))
    if logged:
        (old,) = one(conn.execute(f"SELECT count(*) FROM {search_index.CHANGES}"
                                  " WHERE indexed = 1"))
        expected += old
    held = search_index.document_count(conn, table)
    if held != expected:
        return f"index out of step: it holds {held} documents, {expected} expected"
    return "ok"


def _covered(conn: apsw.Connection) -> tuple[int, str]:
    """(highest id the index should hold, an SQL clause with one ``%s`` for
    an id column that leaves out rows the change log holds). A store from
    before m006 has neither: every row should be indexed."""
    w = search_index.watermark(conn)
    if w is None:
        return 2 ** 62, ""
    return w, (f" AND NOT EXISTS (SELECT 1 FROM {search_index.CHANGES} AS c"
               " WHERE c.message_id = %s)")


def _probe_words(conn: apsw.Connection) -> tuple[int, str] | None:
    """A recent indexed message and a word it contains."""
    top, logged = _covered(conn)
    row = conn.execute(f"SELECT id, text FROM {search_index.TEXT_VIEW} WHERE id = "
                       f"(SELECT max(m.id) FROM messages AS m WHERE m.id <= ?"
                       f"{logged % 'm.id'})", (top,)).fetchone()
    if row is None or not row[1]:
        return None
    # A whitespace-separated run of ASCII letters and digits is one token to
    # unicode61 whatever surrounds it; Python's isalnum() is not its idea of
    # a token character (marks, some scripts), which made the probe report
    # an indexed message as missing.
    word = next((w for w in row[1].split() if w.isascii() and w.isalnum()), None)
    return None if word is None else (row[0], word)


def _probe(conn: apsw.Connection, table: str, target: tuple[int, str] | None) -> str:
    """Run a real MATCH; with a target row, it must come back."""
    try:
        if target is None:
            probe = '"probe"' if table == search_index.FTS_TABLE else '"pro"'  # one trigram
            conn.execute(f"SELECT rowid FROM {table} WHERE {table} MATCH ? LIMIT 1",
                         (probe,)).fetchall()
            return "ok"
        rid, word = target
        if table == search_index.TERMS_TABLE:
            return _probe_term(conn, rid, word)
        found = conn.execute(f"SELECT 1 FROM {table} WHERE {table} MATCH ? AND rowid = ?",
                             ('"' + word.replace('"', '""') + '"', rid)).fetchone()
        return "ok" if found else f"message {rid} is missing from the index"
    except apsw.Error as e:
        return f"{type(e).__name__}: {e}"


def _probe_term(conn: apsw.Connection, rid: int, word: str) -> str:
    """The probe word of message ``rid`` (ASCII letters and digits: one term
    of the word index, lower-cased) must be a term of the term table."""
    term = word.lower()
    if len(term) < search_index.MIN_TERM_CHARS:  # not a term: the table is still read
        search_index.terms_holding(conn, "pro", 1)
        return "ok"
    if search_index.term_held(conn, term):
        return "ok"
    return f"term {term!r} of message {rid} is missing from the term table"


def health(core: "StoreCore") -> SearchHealth:
    """FTS5 integrity-check (against the canonical rows) and a MATCH probe per
    index. Runs on the writer (integrity-check is an INSERT command), so it
    holds the write lock while it reads the whole index."""
    with core.write() as conn:
        return health_on(conn)


def health_on(conn: apsw.Connection) -> SearchHealth:
    """`health` on a connection the caller owns (recovery runs it on a private
    copy, so checking never takes the live store's write lock)."""
    stale = search_index.stale_marker(conn)
    attached = search_index.triggers_attached(conn)
    try:
        target = _probe_words(conn)
    except apsw.Error:
        target = None
    checks = [IndexHealth(t, _integrity(conn, t), _probe(conn, t, target))
              for t in search_index.INDEXES]
    backlog = search_index.backlog(conn)
    pending = 0 if backlog is None else backlog.tail + backlog.changes
    return SearchHealth(stale, attached, checks, pending)
