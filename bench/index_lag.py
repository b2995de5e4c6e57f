"""Freshness lag of the search index: from a commit's return to the moment
the background indexer has the row indexed (search finds the row at once
either way: it scans the not-yet-indexed tail).

One writer appends a message per commit (NORMAL) at full speed, or paced at
``--rate`` commits/s; a watcher thread polls the watermark on its own
read-only connection every 0.5 ms. Prints p50/p99/max in milliseconds.

    python bench/index_lag.py [--messages N] [--rate R]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

import apsw

from sessiondb import SessionDB


def run(n: int, rate: float | None) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "state.db"
        db = SessionDB(path)
        db.create_session("s", source="bench")
        committed: dict[int, float] = {}
        indexed: dict[int, float] = {}
        stop = threading.Event()

        def watch() -> None:
            conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
            seen = 0
            while not stop.is_set() or seen < max(committed, default=0):
                row = conn.execute("SELECT CAST(value AS INTEGER) FROM state_meta"
                                   " WHERE key = 'fts_watermark'").fetchone()
                now = time.perf_counter()
                w = row[0] if row else 0
                for rid in range(seen + 1, w + 1):
                    indexed[rid] = now
                seen = max(seen, w)
                time.sleep(0.0005)
            conn.close()
        watcher = threading.Thread(target=watch)
        watcher.start()
        gap = 1.0 / rate if rate else 0.0
        for i in range(n):
            rid = db.append_message("s", {"role": "user", "content": f"lag probe {i} " * 6})
            committed[rid] = time.perf_counter()
            if gap:
                time.sleep(gap)
        stop.set()
        watcher.join(60)
        db.close()
    lags = sorted((indexed[r] - t) * 1000 for r, t in committed.items() if r in indexed)
    return {"p50_ms": statistics.median(lags), "p99_ms": lags[int(len(lags) * 0.99) - 1],
            "max_ms": lags[-1], "rows": len(lags)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=3000)
    ap.add_argument("--rate", type=float, default=None, help="commits per second (default: flat out)")
    args = ap.parse_args()
    r = run(args.messages, args.rate)
    label = f"{args.rate:g}/s" if args.rate else "flat out"
    print(f"index lag {args.messages:,} commits {label} | p50 {r['p50_ms']:.1f} ms | "
          f"p99 {r['p99_ms']:.1f} ms | max {r['max_ms']:.1f} ms")


if __name__ == "__main__":
    main()
