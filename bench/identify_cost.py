"""What identifying a store before opening it costs (sessiondb/sqlitefile/identity.py).

Prints, on a store of ours with a -wal of about ``MB`` megabytes (frames
not yet checkpointed), the time of `identify` beside the time of the whole
`SessionDB` open that runs it, and beside a floor: an apsw read-only
connection reading ``sqlite_master`` and the migrations ledger (which
identification must not use: it would create a -shm beside a foreign file).

    .venv/bin/python bench/identify_cost.py [MB]
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import apsw

from sessiondb import SessionDB
from sessiondb.sqlitefile.identity import identify


def _time(fn, n: int = 20) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n


def _floor(path: Path) -> None:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    conn.execute("SELECT * FROM sqlite_master").fetchall()
    conn.execute("SELECT name FROM migrations").fetchall()
    conn.close()


def main(megabytes: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "state.db"
        with SessionDB(path, checkpoint_pages=10**7) as db:
            db.create_session("s", source="bench")
            i = 0
            while os.path.getsize(f"{path}-wal") < megabytes * (1 << 20):
                db.append_message("s", {"role": "user", "content": f"message {i} " * 40})
                i += 1
            wal = os.path.getsize(f"{path}-wal")
            ours = _time(lambda: identify(path))
            floor = _time(lambda: _floor(path))
            whole = _time(lambda: SessionDB(path).close(), 5)
    print(f"-wal: {wal / (1 << 20):.1f} MiB")
    print(f"identify (raw read, no SQLite):     {ours * 1e3:8.2f} ms")
    print(f"floor (apsw read-only schema read): {floor * 1e3:8.2f} ms")
    print(f"ratio identify / floor:             {ours / floor:8.2f}")
    print(f"whole SessionDB open and close:     {whole * 1e3:8.2f} ms")


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 8.0)
