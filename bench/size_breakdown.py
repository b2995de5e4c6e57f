"""Where a store's bytes go: ``dbstat`` per table and index, per message.

Builds a store of N messages of a corpus (bench/common.py ``CORPORA``) in
batches through `SessionDB.append_messages`, lets the indexer catch up,
closes it (checkpoint), and prints each b-tree's pages and payload divided
by the message count, with the free pages and the file's total.

    python bench/size_breakdown.py [--corpus prose|b1|scale] [--messages 10000] [--page-size N]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import apsw  # noqa: E402

from common import CORPORA, PROSE_SESSION, apply_page_size, page_size_option  # noqa: E402
from sessiondb import SessionDB  # noqa: E402


def build(path: Path, corpus: str, n: int, batch: int) -> None:
    if corpus == "scale":
        return build_scale(path, n)
    msgs = [CORPORA[corpus](i) for i in range(n)]
    with SessionDB(path) as db:
        sid = db.create_session(PROSE_SESSION, source="bench")
        for at in range(0, n, batch):
            db.append_messages(sid, msgs[at:at + batch])
        db.catch_up_index()


def build_scale(path: Path, n: int) -> None:
    """The scale benchmark's corpus (bench/scale_data.py: sessions of 40-160
    messages, 200 B - 4 KB texts, tool calls), through the export importer."""
    from scale_data import write_export
    from sessiondb.importers import importer
    export = path.with_suffix(".jsonl")
    write_export(export, n)
    with SessionDB(path, background_index=False) as db:
        importer.import_export_file(db, export)
        db.catch_up_index()
    export.unlink()


def breakdown(path: Path, n: int) -> list[tuple[str, float, float]]:
    conn = apsw.Connection(str(path))
    rows = list(conn.execute("SELECT name, sum(pgsize), sum(payload) FROM dbstat"
                             " GROUP BY name ORDER BY sum(pgsize) DESC"))
    (free,) = conn.execute("PRAGMA freelist_count").fetchone()
    (page,) = conn.execute("PRAGMA page_size").fetchone()
    conn.close()
    out = [(name, size / n, payload / n) for name, size, payload in rows if size]
    out.append(("(free pages)", free * page / n, 0.0))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", choices=sorted(CORPORA), default="prose")
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--keep", help="build the store at this path and keep it")
    page_size_option(ap)
    args = ap.parse_args()
    apply_page_size(args.page_size)
    with tempfile.TemporaryDirectory(prefix="hermes-size-") as tmp:
        path = Path(args.keep) if args.keep else Path(tmp) / "size.db"
        build(path, args.corpus, args.messages, args.batch)
        rows = breakdown(path, args.messages)
        total = path.stat().st_size / args.messages
    print(f"{args.corpus} corpus, {args.messages:,} messages: {total:.1f} B/msg (file)")
    for name, size, payload in rows:
        print(f"  {name:<32} {size:8.1f} B/msg  payload {payload:8.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
