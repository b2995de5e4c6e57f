"""Store statistics: row counts, file sizes and the full-text index's size.

Only reads. The full-text index size is measured with SQLite's ``dbstat``
virtual table (bytes of every page of the ``messages_fts*`` and
``messages_terms*`` tables and their indexes: the word index and the term
table); where ``dbstat`` is not compiled in, the size is reported
as unknown (``method = "unavailable"``) next to the whole file's page
counts, rather than guessed.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, TYPE_CHECKING

import apsw

from ..base import MessageState, one
from ..index import INDEXES
from ..rows import usage

if TYPE_CHECKING:  # for type hints only
    from ..engine import StoreCore

# The word index and the term table, and their shadow tables.
FTS_PREFIXES = INDEXES
STATES = tuple(s.value for s in MessageState)


def _file_size(path: Path) -> int | None:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return None


def _fts_size(conn: apsw.Connection) -> dict[str, Any]:
    likes = [p.replace("_", "\\_") + "%" for p in FTS_PREFIXES]
    match = " OR ".join(["name LIKE ? ESCAPE '\\' OR tbl_name LIKE ? ESCAPE '\\'"] * len(likes))
    names = [r[0] for r in conn.execute(
        f"SELECT name FROM sqlite_master WHERE ({match}) AND type IN ('table', 'index')"
        " ORDER BY name", [like for like in likes for _ in (0, 1)])]
    if not names:
        return {"tables": [], "bytes": 0, "method": "none"}
    total = 0
    try:
        for name in names:
            # Virtual tables own no pages (dbstat has no row for them); shadow tables do.
            row = conn.execute("SELECT sum(pgsize) FROM dbstat WHERE name = ? AND aggregate = 1",
                               (name,)).fetchone()
            total += (row[0] or 0) if row else 0
    except apsw.SQLError:
        return {"tables": names, "bytes": None, "method": "unavailable"}
    return {"tables": names, "bytes": total, "method": "dbstat"}


def _pragma(conn: apsw.Connection, name: str) -> int:
    return int(one(conn.execute(f"PRAGMA {name}"))[0])


def store_stats(core: "StoreCore") -> dict[str, Any]:
    """One document describing a SQLite store (keys documented in docs/cli.md);
    `SessionDB.store_stats` calls it, a PostgreSQL store has its own (pg/stats.py)."""
    path = Path(core.path)
    with core.snapshot() as conn:  # one snapshot for every count below
        (sessions,) = one(conn.execute("SELECT count(*) FROM sessions"))
        by_state = dict.fromkeys(STATES, 0)
        by_state.update(conn.execute("SELECT state, count(*) FROM messages GROUP BY state"))
        pages = {"page_size": _pragma(conn, "page_size"),
                 "page_count": _pragma(conn, "page_count"),
                 "freelist_count": _pragma(conn, "freelist_count")}
        fts = _fts_size(conn)
        spent = usage.summary(usage.totals(conn))
    return {
        "path": str(path), "sessions": sessions, "messages": sum(by_state.values()),
        "messages_by_state": by_state, "pages": pages, "fts": fts, "usage": spent,
        "files": {"db": _file_size(path), "wal": _file_size(Path(f"{path}-wal")),
                  "shm": _file_size(Path(f"{path}-shm"))},
    }
