"""What SQLite itself needs, with no Python per row: the floors under the
two throughput goals that are measured as not met (docs/benchmarks.md).

- ``append``: the B1 corpus (bench/common.py, 10,000 messages) appended in
  batches of 100 to a fresh store of this tree's schema, every row put in
  by one ``INSERT ... SELECT`` from a staged table (the work a commit of
  ours does in C: the row and its two indexes, in WAL with
  ``synchronous=NORMAL``), then the two search indexes fed the same way
  from the store's own text view, 100 messages a transaction (the work
  the indexer does). The two parts share the one write lock of the file,
  so a message costs their sum in wall time whatever the number of cores.
- ``index`` (``--store PATH``): both search indexes of an existing store
  built from its text view in one statement each, into scratch files
  (the store is opened read-only: its file and WAL are never written): the import's and the
  recover's unavoidable index work, per message.

CPU is this process's (``time.process_time``: SQLite runs on this thread).

    python bench/sqlite_floor.py [--rounds 3] [--store ~/.hermes/state.db]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import apsw  # noqa: E402

from common import message  # noqa: E402
from sessiondb import SessionDB  # noqa: E402
from sessiondb.rows.codec import role_key  # noqa: E402
from sessiondb.base.onerow import one  # noqa: E402
from sessiondb.index.search_index import (FTS_TABLE, OPTIONS, TEXT_INDEXES, TEXT_VIEW,  # noqa: E402
                                    TOKENIZERS, WATERMARK_KEY, fill_terms)

# the indexes built from the text itself (the term table is filled from the
# word index's vocabulary, not tokenized: not part of this floor)
INDEXES = TEXT_INDEXES

N, BATCH = 10_000, 100
_COLS = ("session_id, uid, position, role, content_kind, content, finish_reason, timestamp,"
         " meta, fingerprint, kind")
# the stored forms of m012 (role code, '' for an empty meta and for kind 'message'),
# as the store writes them
_ROWS = (f"INSERT INTO messages({_COLS}) SELECT 'b1', uid, i + 1, role, 'text', content,"
         " finish_reason, 1.7e9 + i, '', randomblob(12), '' FROM staged.t WHERE i >= ? AND i < ?")


def _stage(path: Path) -> None:
    """The corpus as rows in a side file, uids drawn as the store draws them."""
    conn = apsw.Connection(str(path))
    conn.execute("CREATE TABLE t(i INTEGER PRIMARY KEY, role, content, finish_reason, uid BLOB)")
    rows = [(i, role_key(m["role"]), m["content"], m.get("finish_reason"), os.urandom(16))
            for i, m in ((i, message(i)) for i in range(N))]
    with conn:
        conn.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?)", rows)
    conn.close()


def _batches(conn: apsw.Connection, sql: list[str], lo_base: int) -> float:
    cpu = time.process_time()
    for lo in range(0, N, BATCH):
        conn.execute("BEGIN IMMEDIATE")
        for statement in sql:
            conn.execute(statement, (lo + lo_base, lo + lo_base + BATCH))
        conn.execute("COMMIT")
    return time.process_time() - cpu


def append_floor(work: Path) -> dict[str, float]:
    """Microseconds of CPU a message: rows, index, and their sum."""
    _stage(work / "staged.db")
    db = SessionDB(work / "store.db")
    db.create_session("b1", source="bench")
    db.close()
    conn = apsw.Connection(str(work / "store.db"))
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute(f"ATTACH '{work / 'staged.db'}' AS staged")
    rows = _batches(conn, [_ROWS], 0)
    # the indexer's whole work: both indexes, and its watermark moved in the same transaction
    index_sql = [f"INSERT INTO {t}(rowid, text) SELECT id, text FROM {TEXT_VIEW}"
                 " WHERE id > ? AND id <= ?" for t in INDEXES]
    index_sql.append("UPDATE state_meta SET value = CAST(max(?, ?) AS TEXT) WHERE key ="
                     f" '{WATERMARK_KEY}'")
    index = _batches(conn, index_sql, 0)
    # the term table, from the word index's vocabulary once (as m015 fills it):
    # the least its upkeep can cost, the indexer adds each batch's new terms
    cpu = time.process_time()
    with conn:
        fill_terms(conn)
    index += time.process_time() - cpu
    (count,) = one(conn.execute(f"SELECT count(*) FROM {FTS_TABLE}_docsize"))
    conn.close()
    if count != N:
        raise SystemExit(f"the floor indexed {count} of {N} messages")
    return {"rows_us": rows / N * 1e6, "index_us": index / N * 1e6,
            "total_us": (rows + index) / N * 1e6}


def index_floor(store: Path, work: Path) -> dict[str, Any]:
    """Both search indexes of ``store`` built by SQLite alone, CPU each."""
    src = apsw.Connection(f"file:{store}?mode=ro", flags=apsw.SQLITE_OPEN_READONLY
                          | apsw.SQLITE_OPEN_URI)
    (messages, chars) = one(src.execute(f"SELECT count(*), sum(length(text)) FROM {TEXT_VIEW}"))
    src.close()
    out: dict[str, Any] = {"messages": messages, "text_mb": (chars or 0) / 1e6}
    for table in INDEXES:
        conn = apsw.Connection(str(work / f"{table}.db"), flags=apsw.SQLITE_OPEN_READWRITE
                               | apsw.SQLITE_OPEN_CREATE | apsw.SQLITE_OPEN_URI)
        conn.execute("PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF; PRAGMA page_size=2048")
        conn.execute(f"ATTACH 'file:{store}?mode=ro' AS src")
        conn.execute(f"CREATE VIRTUAL TABLE {table} USING fts5(text,"
                     f" tokenize='{TOKENIZERS[table]}'{OPTIONS[table]})")
        cpu = time.process_time()
        with conn:
            conn.execute(f"INSERT INTO {table}(rowid, text) SELECT id, text FROM src.{TEXT_VIEW}")
        out[f"{table}_cpu_s"] = time.process_time() - cpu
        conn.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--store", type=Path, help="also time both indexes of this store's text")
    args = ap.parse_args()
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            f = append_floor(Path(tmp))
        print(f"append floor round {r + 1}: rows {f['rows_us']:.1f} us + index"
              f" {f['index_us']:.1f} us = {f['total_us']:.1f} us CPU a message"
              f" (at most {1e6 / f['total_us']:,.0f} msg/s on the one write lock),"
              f" load {os.getloadavg()[0]:.1f}")
    if args.store is not None and not args.store.expanduser().is_file():
        raise SystemExit(f"Error: no store at {args.store}")
    if args.store is not None:
        with tempfile.TemporaryDirectory() as tmp:
            f = index_floor(args.store.expanduser(), Path(tmp))
        total = sum(v for k, v in f.items() if k.endswith("_cpu_s"))
        parts = ", ".join(f"{k[:-6]} {v:.2f} s" for k, v in f.items() if k.endswith("_cpu_s"))
        print(f"index floor: {f['messages']:,} messages, {f['text_mb']:.0f} MB of text: {parts};"
              f" {total:.2f} s CPU in all, {total / max(f['messages'], 1) * 1e6:.0f} us a"
              f" message, load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
