"""The recovered store's search index taken over from the source instead of rebuilt.

Tokenizing every message again for the word index (and its term table) is
most of a healthy store's recovery; SQLite's ``.recover`` copies the
index's shadow tables as rows. We do the same, and only when that is
provably the same result as a rebuild:

- the source is ours and inspect found it sound with a sound, current
  search index (every FTS5 check passed, not marked stale, quick_check
  found no damage);
- every message of the source came back whole from an SQL lane (same
  rowid, every column as SQLite read it), none quarantined, no value
  rewritten (``quarantined_values`` counts every cleaned JSON value), and
  the output holds exactly as many messages, with the same lowest and
  highest id, as the source;
- the two files index the same way (`sessiondb.index.search_copy.check_copyable`).

The copy carries the source's watermark and change log; the backlog they
describe (rows the source had not indexed yet) is then indexed, so the
output's index is complete either way. Then the guard: sampled MATCH
probes of rows over the whole id range here, and FTS5's own integrity
check of every index in verification (``PRAGMA integrity_check`` runs
it; run here too it would read the whole index twice). Anything that
fails (a read error while copying, the probes) empties the index and the
caller rebuilds it; a verification that fails on a copied index has it
rebuilt (`rebuild`) and verifies again. The report says which it was and
why (``search_index``).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import apsw

from sessiondb.recovery_api import (CHANGES, INDEXES, IndexNotCopyable, TERMS_TABLE, TEXT_INDEXES,
                                    attach_readonly,
                                    copy_search_index, index_batch, one, set_watermark)

from ..inspection import sampled_health
from ..schema import READ_ERRORS, quote
from .write_stats import WriteStats

SQL_LANES = frozenset({"backup", "rows", "bisect"})  # lanes that read rows through SQLite
CATCH_UP = 10000  # backlog rows indexed per transaction
Tick = Callable[[str, int, int], None]


def source_reason(verdict: str, inspect: dict[str, Any], foreign: bool) -> str | None:
    """Why the source's index cannot be taken over, from inspect alone
    (None: it can, if the rows come back whole)."""
    if foreign:
        return "the source is not a store of ours"
    if verdict != "healthy":
        return f"the source is not sound (inspect: {verdict})"
    if inspect.get("fts_stale"):
        return "the source's search index is marked stale"
    fts = inspect.get("fts") or []
    if len(fts) != len(INDEXES) or not all(f["integrity_ok"] and f["probe_ok"] for f in fts):
        return "the source's search index did not pass inspect's checks"
    if (inspect.get("quick_check") or {}).get("ok") is False:
        return "quick_check found damage in the source"
    return None


def rows_reason(state: Any) -> str | None:
    """Why the recovered messages may differ from the source's (None: they
    were all read whole through SQLite)."""
    if state is None:
        return "the source has no messages table"
    if state.gaps or state.partial or state.carved:
        return "not every message was read whole through SQLite"
    if not set(state.by_lane) <= SQL_LANES:
        return "some messages came from a lane that does not read through SQLite"
    return None


def _same_rows(conn: apsw.Connection, schema: str, stats: WriteStats) -> str | None:
    if stats.table("messages").quarantined or stats.quarantined_values:
        return "some recovered values were quarantined or rewritten"
    shape = "SELECT count(*), min(id), max(id) FROM {}.messages"
    ours = one(conn.execute(shape.format("main")))
    theirs = one(conn.execute(shape.format(quote(schema))))
    return None if ours == theirs else "the output's messages are not the source's"


def _guard(conn: apsw.Connection) -> str | None:
    """Sampled MATCH probes of each index: rows over the whole id range must
    be found by their own words. (FTS5's integrity-check of the index's
    structure is part of verification's ``PRAGMA integrity_check``, which
    reads the whole index once; a failure there rebuilds, see `rebuild`.)"""
    for table in INDEXES:
        health = sampled_health(conn, table)
        if not (health.integrity_ok and health.probe_ok):
            return f"{table}: {health.error}"
    return None


def _catch_up(conn: apsw.Connection, tick: Tick) -> None:
    while True:
        with conn:
            if not index_batch(conn, CATCH_UP):
                return
        tick("indexing the source's backlog", 0, 0)


def rebuild(path: Path, fill: Callable[[apsw.Connection], None]) -> None:
    """Replace a copied index that verification refused by one built from
    the messages (``fill``), on the finished output at ``path``."""
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READWRITE)
    try:
        _empty(conn)
        fill(conn)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()


def _empty(conn: apsw.Connection) -> None:
    """Back to an empty index with nothing logged, for the rebuild."""
    with conn:
        for table in TEXT_INDEXES:
            q = quote(table)
            conn.execute(f"INSERT INTO {q}({q}) VALUES('delete-all')")
        conn.execute(f"DELETE FROM {quote(TERMS_TABLE)}")  # it keeps its own terms
        conn.execute(f"DELETE FROM {CHANGES}")
        set_watermark(conn, 0)


def take_over(conn: apsw.Connection, source: Path, stats: WriteStats, tick: Tick) -> str | None:
    """Copy ``source``'s index into the output on ``conn`` (opened with
    SQLITE_OPEN_URI); None when it was, else why not (the index is then
    empty for the caller to rebuild)."""
    tick("building the search index: copying the source's", 0, 0)
    started = time.monotonic()
    try:
        with attach_readonly(conn, source) as schema:
            reason = _same_rows(conn, schema, stats)
            if reason is not None:
                return reason
            with conn:
                copy_search_index(conn, schema)
    except IndexNotCopyable as e:
        _empty(conn)
        return e.reason
    except READ_ERRORS as e:
        _empty(conn)
        return f"the source's index could not be read ({type(e).__name__})"
    stats.timings["search_copy_s"] = round(time.monotonic() - started, 3)
    try:
        _catch_up(conn, tick)
        reason = _guard(conn)
    except READ_ERRORS as e:
        reason = f"the copied index could not be brought up to date ({type(e).__name__})"
    if reason is not None:
        _empty(conn)
    else:
        tick("building the search index: copied from the source", 1, 1)
    return reason
