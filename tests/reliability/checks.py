"""Whole-store checks shared by the torture runs: what must hold after any
crash, fault or contention episode. Each returns a list of findings (empty
means healthy), so a runner can count them and a test can assert on them."""
from __future__ import annotations

from pathlib import Path

import apsw

from sessiondb.index import search_index

FTS_TABLES = ("messages_fts", "messages_terms")


def _conn(path: Path) -> apsw.Connection:
    # apsw on a file no store handle has open any more (after a kill or close).
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READWRITE)
    conn.set_busy_timeout(5000)
    return conn


def fts_tables(conn: apsw.Connection) -> list[str]:
    """Full-text tables present (the search migrations create them)."""
    rows = conn.execute("SELECT name FROM sqlite_schema WHERE type='table' AND name IN "
                        f"({','.join('?' * len(FTS_TABLES))})", FTS_TABLES).fetchall()
    return [r[0] for r in rows]


def integrity(conn: apsw.Connection) -> list[str]:
    lines = [r[0] for r in conn.execute("PRAGMA integrity_check")]
    return [] if lines == ["ok"] else [f"integrity_check: {ln}" for ln in lines[:5]]


def fts_integrity(conn: apsw.Connection) -> list[str]:
    """FTS5's integrity-check of every full-text table present, and one
    indexed document per message row. (The rank-1 check against the content
    cannot be used: the index's content is a view over json_each,
    which FTS5 reads with virtual tables disabled.) The index is written
    after the commit: it must hold the rows up to the watermark that the
    change log does not name, plus the old text of logged rows it indexed;
    rows above the watermark wait for the indexer. Skipped while the store
    carries the durable ``fts_stale`` marker: the index is known stale then
    and a guarded rebuild is due. The term table holds terms, not
    messages: every term of the word index must be in it."""
    tables = fts_tables(conn)
    if not tables or _meta(conn, "fts_stale") is not None:
        return []
    out = []
    rows = _expected_documents(conn)
    for name in tables:
        try:
            conn.execute(f"INSERT INTO {name}({name}) VALUES('integrity-check')")
            if name == search_index.TERMS_TABLE:
                missing = search_index.terms_missing(conn)
                if missing:
                    out.append(f"{name}: {missing} terms of the word index missing")
                continue
            docs = _documents(conn, name)
        except apsw.Error as e:
            out.append(f"{name} integrity-check: {e}")
            continue
        if docs != rows:
            out.append(f"{name}: {docs} indexed documents for {rows} message rows")
    return out


def _documents(conn: apsw.Connection, name: str) -> int:
    """Documents an index holds: its size table's rows, or, for an index
    without one (``columnsize=0``), the count FTS5 keeps in its averages
    record."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?",
                    (f"{name}_docsize",)).fetchone():
        return conn.execute(f"SELECT count(*) FROM {name}_docsize").fetchone()[0]
    return search_index.document_count(conn, name)


def _expected_documents(conn: apsw.Connection) -> int:
    watermark = _meta(conn, "fts_watermark")
    if watermark is None:  # no bookkeeping (an index a helper added): every row
        return conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    (covered,) = conn.execute(
        "SELECT count(*) FROM messages WHERE id <= ? AND id NOT IN"
        " (SELECT message_id FROM search_changes)", (int(watermark),)).fetchone()
    (logged,) = conn.execute("SELECT count(*) FROM search_changes WHERE indexed").fetchone()
    return covered + logged


def _meta(conn: apsw.Connection, key: str) -> str | None:
    try:
        row = conn.execute("SELECT value FROM state_meta WHERE key = ?", (key,)).fetchone()
    except apsw.Error:
        return None
    return row[0] if row else None


def counters(conn: apsw.Connection) -> list[str]:
    """Session counters equal what the message rows say."""
    rows = conn.execute(
        "SELECT s.id, s.message_count, s.tool_call_count, count(m.id),"
        " coalesce(sum(CASE WHEN m.tool_calls IS NULL THEN 0"
        "                   ELSE json_array_length(m.tool_calls) END), 0)"
        " FROM sessions s LEFT JOIN messages m ON m.session_id = s.id GROUP BY s.id").fetchall()
    return [f"session {sid}: message_count {mc} but {n} rows, tool_call_count {tc} but {t}"
            for sid, mc, tc, n, t in rows if (mc, tc) != (n, t)]


def compactions(conn: apsw.Connection) -> list[str]:
    """Every compaction row is whole: its summary row and all absorbed rows."""
    out = []
    for cid, summary, absorbed in conn.execute(
            "SELECT id, summary_id, absorbed_count FROM compactions").fetchall():
        if not conn.execute("SELECT 1 FROM messages WHERE id = ?", (summary,)).fetchone():
            out.append(f"compaction {cid}: summary row {summary} missing")
        (n,) = conn.execute("SELECT count(*) FROM messages WHERE compaction_id = ? AND"
                            " kind IN ('', 'message')", (cid,)).fetchone()
        if n != absorbed:
            out.append(f"compaction {cid}: {n} archived rows, {absorbed} absorbed")
    return out


def store_findings(path: Path) -> list[str]:
    """integrity, FTS integrity (when the index exists), counters, compactions."""
    conn = _conn(path)
    try:
        return integrity(conn) + fts_integrity(conn) + counters(conn) + compactions(conn)
    finally:
        conn.close()
