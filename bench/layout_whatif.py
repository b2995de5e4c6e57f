"""What candidate storage layouts would take, measured on a real store.

Copies the ``messages`` rows of a store (say one `size_breakdown.py
--keep` built) into scratch files laid out another way, and prints each
candidate's bytes per message from ``dbstat``; then builds candidate
search indexes over the store's indexed text (its text view) the same
way. Nothing here is a layout the store uses: it measures what a change
would save before anyone builds its migration.

Row candidates (the table and its two indexes, every row copied by id):

- ``current``: the columns, constraint and indexes the store has now;
- ``int-session``: the session as an integer reference (8 bytes at most;
  one session here, so 1 byte) in the row and both indexes;
- ``int-session-no-fp``: the same without the 12-byte fingerprint column;
- the last at other page sizes.

Index candidates (contentless FTS5 tables fed the same text, 2 KiB pages
unless ``--page-size``): the word index as it is, without its size table
(``columnsize=0``), without positions (``detail=column``: no phrase or
NEAR queries), and the trigram index as it is.

    python bench/layout_whatif.py STORE.db [--page-size 2048]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import apsw  # noqa: E402

from sessiondb.index import search_index  # noqa: E402

_COLS = ("uid, position, role, content_kind, content, tool_calls, tool_call_id, tool_name,"
         " finish_reason, timestamp, token_count, meta, {fp}state, compaction_id, kind")
ROWS = (("current", "TEXT", True, 0), ("int-session", "INTEGER", True, 0),
        ("int-session-no-fp", "INTEGER", False, 0),
        ("int-session-no-fp", "INTEGER", False, 4096),
        ("int-session-no-fp", "INTEGER", False, 8192))
WORD_DDL = f"tokenize='{search_index.TOKENIZERS[search_index.FTS_TABLE]}'"
TRIGRAM_DDL = f"tokenize='{search_index.TOKENIZERS[search_index.TRIGRAM_TABLE]}'"
INDEXES = (("word index (as now)", WORD_DDL),
           ("word, columnsize=0", WORD_DDL + ", columnsize=0"),
           ("word, detail=column", WORD_DDL + ", detail=column"),
           ("trigram (as now)", TRIGRAM_DDL + ", detail=none, columnsize=0"))


def scratch(root: Path, name: str, page_size: int, store: Path) -> apsw.Connection:
    path = root / f"{name}-{page_size}.db"
    if path.exists():
        os.remove(path)
    conn = apsw.Connection(str(path))
    conn.execute(f"PRAGMA page_size={page_size}; PRAGMA journal_mode=OFF")
    conn.execute("ATTACH ? AS s", (str(store),))
    return conn


def sizes(conn: apsw.Connection) -> dict[str, int]:
    return {name: size for name, size in conn.execute(
        "SELECT name, sum(pgsize) FROM dbstat('main') GROUP BY name") if size}


def row_layout(conn: apsw.Connection, sid_type: str, fp: bool) -> None:
    fp_col = "fingerprint, " if fp else ""
    conn.execute(f"CREATE TABLE messages(id INTEGER PRIMARY KEY, session_id {sid_type},"
                 f" {_COLS.format(fp=fp_col)}, UNIQUE (session_id, uid));"
                 "CREATE INDEX messages_in_order ON messages(session_id, position)")
    ref = ("(SELECT rowid FROM s.sessions AS x WHERE x.id = m.session_id)"
           if sid_type == "INTEGER" else "m.session_id")
    conn.execute(f"INSERT INTO messages SELECT m.id, {ref}, {_COLS.format(fp=fp_col)}"
                 " FROM s.messages AS m ORDER BY m.id")


def index_layout(conn: apsw.Connection, options: str) -> None:
    conn.execute(f"CREATE VIRTUAL TABLE ix USING fts5(text, content='', {options})")
    conn.execute(f"INSERT INTO ix(rowid, text) SELECT id, text FROM s.{search_index.TEXT_VIEW}"
                 " WHERE text IS NOT NULL ORDER BY id")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store")
    ap.add_argument("--page-size", type=int, default=2048, help="for the index candidates")
    args = ap.parse_args()
    store = Path(args.store)
    probe = apsw.Connection(str(store))
    (n,) = probe.execute("SELECT count(*) FROM messages").fetchone()
    probe.close()
    print(f"{store}: {n:,} messages; bytes per message (dbstat pages)")
    with tempfile.TemporaryDirectory(prefix="hermes-whatif-") as tmp:
        for name, sid_type, fp, page in ROWS:
            conn = scratch(Path(tmp), name, page or 2048, store)
            row_layout(conn, sid_type, fp)
            got = sizes(conn)
            parts = ", ".join(f"{k} {v / n:.1f}" for k, v in sorted(got.items())
                              if k != "sqlite_schema")
            print(f"  rows {name} @{page or 2048}: {sum(got.values()) / n:.1f} ({parts})")
            conn.close()
        for name, options in INDEXES:
            conn = scratch(Path(tmp), "ix", args.page_size, store)
            index_layout(conn, options)
            got = sizes(conn)
            parts = ", ".join(f"{k.removeprefix('ix_')} {v / n:.1f}" for k, v in sorted(got.items())
                              if k != "sqlite_schema")
            print(f"  index {name} @{args.page_size}: {sum(got.values()) / n:.1f} ({parts})")
            conn.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
