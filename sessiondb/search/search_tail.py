"""Search over the rows the index has not caught up on: an exact, bounded tail.

The indexer runs after the commit (sessiondb/index/indexer.py), so at any moment
the index may lack the newest rows (ids above the watermark) and hold old
text for rows in the change log. For each search that meets such a backlog,
those rows are copied into a private in-memory SQLite database with the
same word index (same tokenizer, same indexed text) and the same
columns the search SQL reads, and the query runs there too (a substring
through the terms of the tail's own vocabulary that hold its run); rows of the
change log are left out of the main index's answer. So every match a full
re-index would return is returned, with the same snippet.

What is not identical: bm25 scores of tail rows are computed against the
tail's own statistics (document count, average length, term frequency),
so with ``order="rank"`` a tail row may sit a little higher or lower than
it will once indexed. Storage orders (``newest``/``oldest``) are exact.

The bound: a search copies at most ``TAIL_ROWS`` backlog rows. A longer
backlog (the indexer is paused, starved or another process wrote a burst)
is first caught up by the search itself when its handle can write; when it
cannot (read-only handle, inside a caller's transaction, another process
holds the lock), the ``TAIL_ROWS`` oldest backlog rows are searched and the
result is flagged partial.
"""
from __future__ import annotations

from dataclasses import dataclass

import apsw

from ..index import search_index

TAIL_ROWS = 2_000

_SCHEMA = (
    "CREATE TABLE sessions (id TEXT PRIMARY KEY, title TEXT, source TEXT);"
    "CREATE TABLE messages (id INTEGER PRIMARY KEY, session_id TEXT, role TEXT,"
    " timestamp REAL, state TEXT, body TEXT);"
    + "".join(search_index.fts_ddl(t) + ";" for t in search_index.TEXT_INDEXES)
    + f"CREATE VIRTUAL TABLE tail_vocab USING fts5vocab({search_index.FTS_TABLE}, 'row');")


@dataclass
class Tail:
    """The backlog rows of one search, in a private in-memory database."""

    conn: apsw.Connection
    rows: int
    changed: bool  # the change log is not empty: leave its rows out of the index
    partial: bool  # the backlog was longer than TAIL_ROWS and only part is here

    def close(self) -> None:
        self.conn.close()


def _rows(conn: apsw.Connection, watermark: int, changed: bool) -> list[tuple]:
    cols = f"m.id, m.session_id, m.role, m.timestamp, m.state, {search_index.text_expr('m')}"
    rows = conn.execute(f"SELECT {cols} FROM messages AS m WHERE m.id > ? ORDER BY m.id"
                        f" LIMIT {TAIL_ROWS + 1}", (watermark,)).fetchall()
    if changed:
        rows += conn.execute(f"SELECT {cols} FROM messages AS m WHERE m.id IN"
                             f" (SELECT message_id FROM {search_index.CHANGES})"
                             f" AND m.id <= ? LIMIT {TAIL_ROWS + 1}", (watermark,)).fetchall()
    return rows


def load(conn: apsw.Connection, backlog: search_index.Backlog) -> Tail | None:
    """Copy the backlog rows (read in the caller's read transaction); None
    when there is none."""
    if backlog.empty:
        return None
    rows = _rows(conn, backlog.watermark, backlog.changes > 0)
    partial = len(rows) > TAIL_ROWS
    rows = rows[:TAIL_ROWS]
    mem = apsw.Connection(":memory:")
    try:
        mem.execute(_SCHEMA)
        search_index.register_functions(mem)
        sids = sorted({r[1] for r in rows})
        for start in range(0, len(sids), 500):
            chunk = sids[start:start + 500]
            mem.executemany("INSERT INTO sessions(id, title, source) VALUES (?, ?, ?)",
                            conn.execute("SELECT id, title, source FROM sessions WHERE id IN"
                                         f" ({','.join('?' * len(chunk))})", chunk).fetchall())
        mem.executemany("INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?)", rows)
        docs = [(r[0], r[5]) for r in rows]
        for table in search_index.TEXT_INDEXES:
            mem.executemany(f"INSERT INTO {table}(rowid, text) VALUES (?, ?)", docs)
    except BaseException:
        mem.close()
        raise
    return Tail(mem, len(rows), backlog.changes > 0, partial)


def terms_holding(tail: Tail, run: str) -> list[str]:
    """The tail's terms holding ``run`` (folded as the word index folds)."""
    return [t for (t,) in tail.conn.execute(
        "SELECT term FROM tail_vocab WHERE instr(term, ?) > 0", (run,))]
