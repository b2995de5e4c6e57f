"""A store whose search index b-tree pages are damaged, rebuilt from its
canonical tables (for `repair`, on its private copy).

SQLite cannot free pages it cannot read, so an index whose b-tree is damaged
cannot be dropped, and so not rebuilt, in place. On the private copy the
index's schema entries (the FTS5 tables, their shadow tables, the text view
and the sync triggers) are taken out of ``sqlite_master``; ``VACUUM`` then
writes a new file from the tables that remain, which leaves the damaged
pages behind; the index is then built anew from the messages. Every row of
every remaining table is checked against the live store (`digest`) before
repair promotes the copy under its exclusive lock, with a backup of the
damaged file kept.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import apsw

from sessiondb.recovery_api import (CHANGES, INDEX_META_KEYS, INDEXES, LEGACY_TRIGRAM_TABLE,
                                    TEXT_VIEW, TRIGGERS, one)

FTS5_SHADOWS = ("data", "idx", "docsize", "config", "content")


def derived_names() -> tuple[str, ...]:
    """Every schema entry of the search index (and of the trigram index a
    file from before m015 has)."""
    tables = INDEXES + (LEGACY_TRIGRAM_TABLE,)
    shadows = tuple(f"{t}_{s}" for t in tables for s in FTS5_SHADOWS)
    return tables + shadows + TRIGGERS + (TEXT_VIEW,)


def _tables(conn: apsw.Connection) -> list[str]:
    names = {*derived_names(), CHANGES}  # the change log is the index's bookkeeping too
    return sorted(name for (name,) in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        if name not in names)


def digest(conn: apsw.Connection) -> str:
    """Hash of every row of every table that is not the search index or its
    bookkeeping (which a rebuild resets), in a stable order (all columns), so
    it survives VACUUM's rowid renumbering."""
    h = hashlib.sha256()
    for table in _tables(conn):
        q = table.replace('"', '""')
        ncols = len(list(conn.execute(f'PRAGMA table_info("{q}")')))
        order = ", ".join(str(i) for i in range(1, ncols + 1))
        skip = ""
        if table == "state_meta":
            skip = f" WHERE key NOT IN ({','.join('?' * len(INDEX_META_KEYS))})"
        h.update(f"\0{table}\0".encode())
        for row in conn.execute(f'SELECT * FROM "{q}"{skip} ORDER BY {order}',
                                INDEX_META_KEYS if skip else ()):
            h.update(repr(row).encode())
    return h.hexdigest()


def strip_search_index(copy: Path) -> int:
    """Take the search index out of the copy's schema and VACUUM the copy;
    returns how many schema entries went. Only ever run on a private copy."""
    names = derived_names()
    marks = ",".join("?" * len(names))
    conn = apsw.Connection(str(copy), flags=apsw.SQLITE_OPEN_READWRITE)
    try:
        conn.execute("PRAGMA writable_schema=ON")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(f"DELETE FROM sqlite_master WHERE name IN ({marks})", names)
        (gone,) = one(conn.execute("SELECT changes()"))
        (version,) = one(conn.execute("PRAGMA schema_version"))
        conn.execute(f"PRAGMA schema_version={int(version) + 1}")  # others reload it
        conn.execute("COMMIT")
        conn.execute("PRAGMA writable_schema=OFF")
    finally:
        conn.close()
    conn = apsw.Connection(str(copy), flags=apsw.SQLITE_OPEN_READWRITE)
    try:
        conn.execute("VACUUM")  # copies only what the schema names: the damage stays behind
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()
    return int(gone)


__all__ = ["digest", "strip_search_index", "derived_names"]
