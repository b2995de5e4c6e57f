"""Stores as the schema before m015 left them: the trigram index over every
text instead of the term table (for the tests of m014 and m015)."""
from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import apsw

from sessiondb.index import search_index
from tests.helpers.damage import sql_read

ROOT = Path(__file__).resolve().parents[2]
_SCHEMA = "SELECT type, name, sql FROM sqlite_master ORDER BY rowid"

TRIGRAMS = search_index.LEGACY_TRIGRAM_TABLE


def as_m014(path: Path) -> None:
    """Put a store's search tables back the way m014 left them: no term
    table, a trigram index holding exactly the documents the word index
    holds (every row up to the watermark the change log does not hold, with
    its text, and each logged row's old text), and no m015 in the ledger."""
    view, changes = search_index.TEXT_VIEW, search_index.CHANGES
    conn = apsw.Connection(str(path))
    try:
        with conn:
            conn.execute(f"DROP TABLE IF EXISTS {search_index.TERMS_TABLE}")
            conn.execute(search_index.fts_ddl(
                TRIGRAMS, f", content='{view}', content_rowid='id'"))
            conn.execute(
                f"INSERT INTO {TRIGRAMS}(rowid, text) SELECT id, text FROM {view} AS v"
                " WHERE v.id <= (SELECT CAST(value AS INTEGER) FROM state_meta WHERE key ="
                f" 'fts_watermark') AND NOT EXISTS (SELECT 1 FROM {changes} AS c"
                " WHERE c.message_id = v.id) ORDER BY v.id")
            conn.execute(f"INSERT INTO {TRIGRAMS}(rowid, text) SELECT message_id, old_text"
                         f" FROM {changes} WHERE indexed = 1 ORDER BY message_id")
            conn.execute("DELETE FROM migrations WHERE name = 'm015_term_trigrams'")
    finally:
        conn.close()


def text_tables(conn: apsw.Connection) -> list[str]:
    """The tables of the store indexing the text view (the trigram index too
    in a store before m015)."""
    names = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    return [t for t in (*search_index.TEXT_INDEXES, TRIGRAMS) if t in names]


def killed_inside(path: Path, script: str, migration: str) -> None:
    """Run ``script`` on ``path`` in a process that kills itself with SIGKILL
    inside ``migration``; the file must then hold the old layout whole (the
    same schema, the migration not in the ledger)."""
    schema = sql_read(path, _SCHEMA)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script), str(path)],
                          cwd=ROOT, capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert sql_read(path, _SCHEMA) == schema
    assert not sql_read(path, "SELECT 1 FROM migrations WHERE name = ?", (migration,))
