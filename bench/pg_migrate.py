"""`hermes sessions migrate --to` throughput: the COPY path against the statement path.

One SQLite store of bench/search.py's corpus (same generator and seed,
sessions of 200) is copied into fresh PostgreSQL databases on the
benchmark's own cluster (bench/pg_subjects.py: durable defaults), in the
same run: by the statement-per-row path (``PgSide(bulk=False)``: executemany
of 250-row chunks, both GIN indexes maintained by every insert) and by the
COPY path (sessiondb/pg/bulk.py: COPY into a staging table, 5,000-row
chunks, the search indexes built once at the end). Both end verified
(every count equal); messages/s counts the whole command (sessions, usage,
counting both ends, the index build).

    python bench/pg_migrate.py --messages 100000
    python bench/pg_migrate.py --messages 100000 --keep /tmp/pgbench   # reuse cluster and store
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from pg_subjects import BenchServer  # noqa: E402
from search import Generator, build  # noqa: E402
from sessiondb.pg.transfer import PgSide, SqliteSide, connect, transfer  # noqa: E402


def migrate(path: Path, url: str, use_copy: bool) -> dict:
    conn = connect(url)
    src = SqliteSide(str(path))
    try:
        t0 = time.perf_counter()
        result = transfer(src, PgSide(conn, url, bulk=use_copy))
        took = time.perf_counter() - t0
    finally:
        src.close()
        conn.close()
    n = result.source_counts["messages"]
    return {"messages": n, "seconds": round(took, 1), "msg_per_s": round(n / took),
            "verified": result.verified, "loadavg_after": os.getloadavg()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--keep", type=Path, help="cluster and SQLite store in this directory, kept")
    ap.add_argument("--only", default="statements,copy", help="which paths, comma-separated")
    args = ap.parse_args()
    server = BenchServer(args.keep).start()
    try:
        store = server.root / f"migrate{args.messages}.db"
        if not store.exists():
            print(f"building a {args.messages:,}-message SQLite store", file=sys.stderr)
            build(store, args.messages, Generator())
        out = {}
        for name in args.only.split(","):
            url = server.database(f"migrate_{name}")
            out[name] = migrate(store, url, name == "copy")
            print(f"{name}: {out[name]}", flush=True)
        print(json.dumps(out))
    finally:
        server.destroy()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
