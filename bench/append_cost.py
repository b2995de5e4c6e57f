"""What one append costs in the caller's thread: Python calls, the deepest
stack below `append_message`, and SQL statements; plus, where the store has
an indexer, the statements its catch-up runs per message (another thread,
off the commit).

    python bench/append_cost.py [--messages N]

Run it against another checkout with ``PYTHONPATH=that/checkout`` to compare.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from sessiondb import SessionDB


def _message(i: int) -> dict:
    return {"role": "user" if i % 2 else "assistant", "content": f"bench message {i} " * 8}


def measure(n: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        db = SessionDB(Path(tmp) / "state.db")
        indexer = getattr(db, "_indexer", None)
        if indexer is not None:
            indexer.pause()  # no batch between the appends counted here
        db.create_session("s", source="bench")
        for i in range(50):
            db.append_message("s", _message(i))
        statements: list[str] = []
        db._writer.exec_trace = lambda _c, sql, _b: statements.append(sql) or True
        calls = [0]
        depth = [0, 0]

        def profile(frame, event, _arg):  # type: ignore[no-untyped-def]
            if event == "call":
                calls[0] += 1
                depth[0] += 1
                depth[1] = max(depth[1], depth[0])
            elif event == "return":
                depth[0] -= 1
        for i in range(n):
            sys.setprofile(profile)
            db.append_message("s", _message(50 + i))
            sys.setprofile(None)
            depth[0] = 0
        db._writer.exec_trace = None
        out = {"calls_per_append": calls[0] / n, "max_depth": depth[1] - 1,
               "statements_per_append": len(statements) / n}
        if indexer is not None:
            seen: list[str] = []
            # the indexer's own connection (or the writer, where the handle has none)
            conn = getattr(getattr(db, "_core", None), "index_conn", None) or db._writer
            conn.exec_trace = lambda _c, sql, _b: seen.append(sql) or True
            done = db.catch_up_index()
            conn.exec_trace = None
            out["indexer_statements_per_message"] = len(seen) / max(done, 1)
        db.close()
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=500)
    args = ap.parse_args()
    r = measure(args.messages)
    print("append cost | " + " | ".join(f"{k} {v:.2f}" for k, v in r.items()))


if __name__ == "__main__":
    main()
