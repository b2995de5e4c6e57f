"""Hostile search text: one huge or repetitive message and a query that
matches it everywhere. Each case is timed with the message still in the
unindexed tail and again once indexed; the goal is under 1 s each.

    python bench/hostile.py [--skip-50mb]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from sessiondb import SessionDB

CASES = (("ZZZZ over 300 KB of Z", "Z", 300_000, "ZZZZ"),
         ("ZZZZ over 50 MB of Z", "Z", 50_000_000, "ZZZZ"),
         ("0000 over 20 KB of zeros", "0", 20_000, "0000"),
         ("Z (scan) over 50 MB of Z", "Z", 50_000_000, "Z"))


def timed(db: SessionDB, q: str) -> tuple[float, int, bool]:
    started = time.perf_counter()
    hits = db.search(q)
    return time.perf_counter() - started, len(hits), bool(getattr(hits, "partial", False))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-50mb", action="store_true")
    args = ap.parse_args()
    for label, ch, size, q in CASES:
        if args.skip_50mb and size > 1_000_000:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            with SessionDB(Path(tmp) / "state.db", background_index=False) as db:
                db.create_session("s", source="bench")
                db.append_message("s", {"role": "user", "content": ch * size})
                db.append_message("s", {"role": "user", "content": "an ordinary message"})
                tail = timed(db, q)
                db.catch_up_index()
                indexed = timed(db, q)
        print(f"hostile {label} | tail {tail[0]:.3f}s ({tail[1]} hits) | indexed "
              f"{indexed[0]:.3f}s ({indexed[1]} hits) | goal < 1 s: "
              f"{'met' if max(tail[0], indexed[0]) < 1 else 'NOT met'}")


if __name__ == "__main__":
    main()
